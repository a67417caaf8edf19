package evaluation

// Learning from history (docs/canary.md, "Learning from history"): when a
// rollout succeeds, the evaluations of its version that passed at their
// last look are kept changes, and what each of their checks measured
// (lehrpb.CanaryCheckSample) joins the namespace's history
// (lehrpb.CanaryHistory, store canaryhist.go); every later evaluation of
// the namespace is judged with it (canary.Input.History).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// Bounds of a namespace's history.
const (
	// MaxHistoryEntries bounds the (check, bake) histories a namespace
	// keeps; a new one beyond it replaces the one updated longest ago.
	MaxHistoryEntries = 16
	// MaxHistoryBytes bounds a namespace's stored history, key and value:
	// MaxHistoryEntries of canary.MaxHistory samples (at most 24 bytes
	// each) and a check name of at most 63 bytes, and the key.
	MaxHistoryBytes = MaxHistoryEntries*(canary.MaxHistory*24+80) + 300
	// pruneEvery is how many StepAll calls (leader rounds) pass between
	// prunes of the histories of deleted namespaces.
	pruneEvery = 600
)

// HistoryStore is what learning needs of the store (*store.Store).
type HistoryStore interface {
	CanaryHistory(ctx context.Context, ns string) (store.StoredCanaryHistory, error)
	PutCanaryHistory(ctx context.Context, g store.Guard, ns string, rec *lehrpb.CanaryHistory, old store.StoredCanaryHistory) (store.StoredCanaryHistory, error)
	PruneCanaryHistories(ctx context.Context, g store.Guard) (int, error)
}

// History returns what the judge learned of ns's checks.
func (s *Service) History(ctx context.Context, ns string) (*lehrpb.CanaryHistory, error) {
	h, err := s.st.CanaryHistory(ctx, ns)
	if err != nil {
		return nil, err
	}
	return h.Record, nil
}

// Kept reports whether ev is an evaluation of a kept change that history
// learns from: DONE, PASS at the last look of its bake.
func Kept(ev *lehrpb.CanaryEvaluation) bool {
	r := ev.GetResult()
	return ev.GetState() == lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE &&
		r.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_PASS && r.GetLooks() > 0 && r.GetLook() >= r.GetLooks()
}

// LearnVersion adds to ns's history the samples of every kept evaluation
// of version (Kept), once: a version at or below the history's
// learned_version is not learned again. The strategist calls it when a
// rollout of version succeeds. It returns how many evaluations it
// learned from.
func (s *Service) LearnVersion(ctx context.Context, g store.Guard, ns string, version uint64) (int, error) {
	evs, err := s.st.Evaluations(ctx, ns)
	if err != nil {
		return 0, err
	}
	var kept []*lehrpb.CanaryEvaluation
	for _, ev := range evs {
		if ev.GetVersion() == version && Kept(ev) {
			kept = append(kept, ev)
		}
	}
	if len(kept) == 0 {
		return 0, nil // nothing to learn: no write, no record
	}
	for attempt := 0; ; attempt++ {
		old, err := s.st.CanaryHistory(ctx, ns)
		if err != nil {
			return 0, err
		}
		if old.Record.GetLearnedVersion() >= version {
			return 0, nil
		}
		rec := proto.CloneOf(old.Record)
		rec.LearnedVersion = version
		for _, ev := range kept {
			Learn(rec, ev)
		}
		_, err = s.st.PutCanaryHistory(ctx, g, ns, rec, old)
		if errors.Is(err, store.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return 0, err
		}
		s.log.Info("canary history: learned from a kept change", "namespace", ns, "version", version, "evaluations", len(kept))
		return len(kept), nil
	}
}

// Learn adds the samples of ev's checks to rec: per (check, bake), the
// newest canary.MaxHistory, at most MaxHistoryEntries (check, bake)
// histories, the one updated longest ago going first. Pure.
func Learn(rec *lehrpb.CanaryHistory, ev *lehrpb.CanaryEvaluation) {
	for _, c := range ev.GetResult().GetChecks() {
		sm := c.GetSample()
		if sm == nil {
			continue
		}
		after := sm.GetAfterIntervals()
		i := slices.IndexFunc(rec.Checks, func(h *lehrpb.CanaryCheckHistory) bool {
			return h.GetCheck() == c.GetName() && h.GetAfterIntervals() == after
		})
		var h *lehrpb.CanaryCheckHistory
		if i >= 0 {
			h = rec.Checks[i]
			rec.Checks = slices.Delete(rec.Checks, i, i+1)
		} else {
			h = &lehrpb.CanaryCheckHistory{Check: c.GetName(), AfterIntervals: after}
		}
		x := proto.CloneOf(sm)
		x.AfterIntervals = 0 // the history's
		h.Samples = append(h.Samples, x)
		if n := len(h.Samples); n > canary.MaxHistory {
			h.Samples = slices.Delete(h.Samples, 0, n-canary.MaxHistory)
		}
		rec.Checks = append(rec.Checks, h)
		if n := len(rec.Checks); n > MaxHistoryEntries {
			rec.Checks = slices.Delete(rec.Checks, 0, n-MaxHistoryEntries)
		}
	}
}

// JudgeHistory returns rec's histories at a bake of bake intervals, for
// the judge (canary.Input.History).
func JudgeHistory(rec *lehrpb.CanaryHistory, bake int) map[string]canary.History {
	var out map[string]canary.History
	for _, h := range rec.GetChecks() {
		if int(h.GetAfterIntervals()) != bake {
			continue
		}
		if out == nil {
			out = map[string]canary.History{}
		}
		ch := canary.History{After: bake}
		for _, x := range h.GetSamples() {
			ch.Samples = append(ch.Samples, canary.Sample{After: bake, Effect: float64(x.GetEffect()),
				LevelVar: float64(x.GetLevelVariance()), SpreadVar: float64(x.GetSpreadVariance()), DF: int(x.GetDf())})
		}
		out[h.GetCheck()] = ch
	}
	return out
}

// Forget deletes ns's history of check, or of every check when check is
// empty, guarded by g. It returns the samples forgotten and the bytes
// freed.
func (s *Service) Forget(ctx context.Context, g store.Guard, ns, check string) (samples int, freed int64, err error) {
	for attempt := 0; ; attempt++ {
		old, err := s.st.CanaryHistory(ctx, ns)
		if err != nil {
			return 0, 0, err
		}
		if old.ModRevision == 0 {
			return 0, 0, nil
		}
		var rec *lehrpb.CanaryHistory
		samples = 0
		if check != "" {
			rec = proto.CloneOf(old.Record)
			rec.Checks = slices.DeleteFunc(rec.Checks, func(h *lehrpb.CanaryCheckHistory) bool {
				if h.GetCheck() == check {
					samples += len(h.GetSamples())
					return true
				}
				return false
			})
			if samples == 0 {
				return 0, 0, nil
			}
		} else {
			for _, h := range old.Record.GetChecks() {
				samples += len(h.GetSamples())
			}
		}
		got, err := s.st.PutCanaryHistory(ctx, g, ns, rec, old)
		if errors.Is(err, store.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("forget the canary history of %s: %w", ns, err)
		}
		return samples, old.Bytes - got.Bytes, nil
	}
}

// sample converts a judge's sample to the stored one (float32: seven
// digits are plenty for a variance or an effect).
func sample(x *canary.Sample) *lehrpb.CanaryCheckSample {
	if x == nil {
		return nil
	}
	f := func(v float64) float32 {
		if math.IsInf(v, 0) {
			return float32(math.NaN())
		}
		return float32(v)
	}
	return &lehrpb.CanaryCheckSample{AfterIntervals: int32(x.After), Effect: f(x.Effect),
		LevelVariance: f(x.LevelVar), SpreadVariance: f(x.SpreadVar), Df: int32(x.DF)}
}

// LearnedLine sums what a check's learned history did, "" without one:
// "learned from 42 kept evaluations: normally ±0.3 %; tolerance 2 %
// (learned); noise 1.1× the learned".
func LearnedLine(c *lehrpb.CanaryCheckResult) string {
	n := c.GetLearnedEvaluations()
	if n == 0 {
		return ""
	}
	if !c.GetLearnedUsed() {
		return fmt.Sprintf("history: %d kept evaluation(s) at this bake, %d needed before they are used", n, canary.MinHistory)
	}
	s := fmt.Sprintf("history: learned from %d kept evaluations: normally ±%.3g %%", n, 100*c.GetLearnedTypical())
	if t := c.GetLearnedTolerance(); t > 0 {
		s += fmt.Sprintf("; learned tolerance %.3g %%", 100*t)
	}
	if r := c.GetNoiseRatio(); r > 0 {
		s += fmt.Sprintf("; control spread %.3g× the learned", r)
		if c.GetNoiseGrown() {
			s += " (noise grew: not pooled)"
		}
	}
	if c.GetLearnedChangedVerdict() {
		s += "; history changed the verdict"
	}
	return s
}

// HistoryLines describes a namespace's history, one line per check and
// bake.
func HistoryLines(h *lehrpb.CanaryHistory) []string {
	var out []string
	for _, c := range h.GetChecks() {
		var eff []float64
		for _, x := range c.GetSamples() {
			if v := float64(x.GetEffect()); !math.IsNaN(v) {
				eff = append(eff, math.Abs(v))
			}
		}
		typ := "-"
		if len(eff) > 0 {
			slices.Sort(eff)
			typ = fmt.Sprintf("±%.3g %%", 100*eff[min(len(eff)-1, int(math.Ceil(0.9*float64(len(eff))))-1)])
		}
		out = append(out, fmt.Sprintf("%s, bake %d intervals: %d sample(s), 90 %% of kept changes within %s", c.GetCheck(), c.GetAfterIntervals(), len(c.GetSamples()), typ))
	}
	return out
}
