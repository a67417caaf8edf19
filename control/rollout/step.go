package rollout

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// The rollout state machine, pure: from a rollout as stored, the stages
// its policy resolves to, the evidence its zones' distributors report and
// the time, Step decides what happens next — a Decision the strategist
// applies in one guarded transaction (control/strategist). Nothing here reads
// or writes etcd.

// StepInput is what a step of a running rollout decides on.
type StepInput struct {
	// Rollout as stored; Step does not change it.
	Rollout *lehrpb.Rollout
	// Stages are Resolve(Rollout.policy, Zones); Zones the registered
	// zones, sorted.
	Stages []Stage
	Zones  []string
	// Evidence is what the distributors of the zones the stages so far
	// reach report about the version (the strategist's gather).
	Evidence Evidence
	// Analysis is the canary evaluation of the stage, when the rollout
	// started one for it (Rollout.evaluation_id names it), as last
	// judged.
	Analysis *lehrpb.CanaryEvaluation
	// Goals returns the namespace's goal in each zone: read only when the
	// decision moves goals.
	Goals func() (map[string]*lehrpb.GoalState, error)
	// Reached returns how far the namespaces the rollout requires
	// (Rollout.requires) have gone: read only before entering a stage.
	Reached func() ([]Reached, error)
	// Alerts returns what control's alerts source says: read only when
	// the next stage is due and the policy has a monitoring check. Nil
	// means control has no alerts source.
	Alerts func() Alerts
	Now    time.Time
}

// Decision is what a step decided. The zero Decision changes nothing.
type Decision struct {
	// Rollout is the rollout to store, with Events, and Goals to write
	// in the same transaction; nil: nothing to write.
	Rollout *lehrpb.Rollout
	Goals   []*lehrpb.GoalState
	Events  []*lehrpb.RolloutEvent
	// End, when set, ends the rollout in End.State and rolls it back: the
	// strategist commits the base version's content as a new version
	// first, then stores Rollout with the rollback (RolledBack).
	End *Ending
	// Analysis, when set, is the stage's canary evaluation to start:
	// the strategist creates it, stores Rollout (which names it, with its
	// event) and steps again with it.
	Analysis *lehrpb.CanaryEvaluation
	// StagePassed is how long the stage that passed took (a metric).
	StagePassed time.Duration
}

// Ending ends a rollout: FAILED on evidence, or ABORTED by an operator
// (Author).
type Ending struct {
	State  lehrpb.RolloutState
	Reason string
	Author string
}

// Active reports whether r is in flight: running or paused.
func Active(r *lehrpb.Rollout) bool {
	st := r.GetState()
	return st == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING || st == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED
}

// newEvent returns r's next event, counting it in r.
func newEvent(r *lehrpb.Rollout, now time.Time, kind, msg, author string) *lehrpb.RolloutEvent {
	r.EventCount++
	return &lehrpb.RolloutEvent{RolloutId: r.GetId(), Seq: r.GetEventCount(), Time: timestamppb.New(now), Kind: kind, Stage: r.GetStage(), Message: msg, Author: author}
}

// Step advances a running rollout as far as the evidence allows: Select
// (name the canary hosts of zones whose samples arrived), Validate (the
// health gates, the canary analysis), then wait, bake, advance or
// succeed. An error is the Goals reader's.
func Step(in StepInput) (Decision, error) {
	r := proto.CloneOf(in.Rollout)
	now, stages, ev := in.Now, in.Stages, in.Evidence
	if len(stages) == 0 || r.GetStageStartTime() == nil {
		return Decision{}, nil // no zone registered; not entered yet: admit decides
	}
	i := min(int(r.GetStage()), len(stages)-1)
	stg := stages[i]

	// Select: name the canary hosts of zones whose samples arrived.
	var evs []*lehrpb.RolloutEvent
	for _, z := range ev.unsampled {
		smps := ev.samples[z]
		empty := ev.byZone[z].empty()
		if ev.zonesReporting[z] == 0 && now.Sub(r.GetStageStartTime().AsTime()) < emptyZoneWait(stg) {
			empty = "" // its distributors may be starting: give them time to report
		}
		if empty == "" && (len(smps) == 0 || len(smps) < ev.zonesReporting[z]) {
			continue // not every distributor of the zone has sampled yet
		}
		n := upTo(stages, i).hosts[z]
		var all []string
		for _, smp := range smps {
			all = append(all, smp.GetHosts()...)
		}
		slices.SortFunc(all, func(a, b string) int {
			return cmp.Or(cmp.Compare(cohort.Position(r.GetSalt(), a), cohort.Position(r.GetSalt(), b)), strings.Compare(a, b))
		})
		all = slices.Compact(all)
		all = all[:min(n, len(all))]
		r.CanaryHosts = append(r.CanaryHosts, &lehrpb.ZoneHosts{Zone: z, Hosts: all})
		kind, msg := "selected", fmt.Sprintf("canary hosts of %s: %s", z, strings.Join(all, ", "))
		switch {
		case len(all) == 0 && empty != "":
			// Nothing to wait for: recorded as a zone without canary
			// hosts, so the stage does not wait for a sample.
			kind, msg = "skipped", fmt.Sprintf("zone %s: %s, so no canary there; its goal moves with the rollout all the same", z, empty)
		case len(all) == 0:
			msg = fmt.Sprintf("no host of %s subscribes to the namespace: no canary there", z)
		}
		evs = append(evs, newEvent(r, now, kind, msg, ""))
	}
	if len(evs) > 0 {
		cur, err := in.Goals()
		if err != nil {
			return Decision{}, err
		}
		r.UpdateTime = timestamppb.New(now)
		return Decision{Rollout: r, Goals: goalsFor(r, stages, i, cur, now), Events: evs}, nil
	}

	// Validate: the built-in health gates, at any time in a stage.
	if ev.lapsed > 0 {
		return failed(r, fmt.Sprintf("%d consumer lease(s) lapsed on hosts running version %d (%s): consumers crashed or hung%s",
			ev.lapsed, r.GetVersion(), orNoHost(nameSome(ev.lapsedHosts, len(ev.lapsedHosts))), ev.lapsedBy.note())), nil
	}
	if ev.consumers > 0 {
		if ratio := float64(ev.rejected) / float64(ev.consumers); ratio > stg.MaxErrorRatio {
			return failed(r, fmt.Sprintf("%d of %d consumers rejected version %d (ratio %.3g, stage %q allows %g) on %s%s",
				ev.rejected, ev.consumers, r.GetVersion(), ratio, stg.Name, stg.MaxErrorRatio, orNoHost(nameSome(ev.rejectingHosts, len(ev.rejectingHosts))),
				ev.rejectedBy.note())), nil
		}
	}
	// Validate: the canary analysis of a canary stage, once its hosts
	// applied; a FAIL at any look rolls back.
	var cev *lehrpb.CanaryEvaluation
	if stg.Analysis != nil && stg.Bake > 0 && r.GetStageAppliedTime() != nil && ev.applied > 0 {
		if id := AnalysisID(r, i); r.GetEvaluationId() != id {
			return startAnalysis(r, i, stg, in.Zones, now), nil
		}
		cev = in.Analysis
		if cev.GetResult().GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
			return failed(r, "canary analysis "+cev.GetId()+": "+evaluation.Explain(cev)+canaryNote(r)+ev.signalsBy.note()), nil
		}
	}
	if r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED {
		return Decision{}, nil // checked above; no stage moves while paused
	}
	started := r.GetStageStartTime().AsTime()
	if r.GetStageAppliedTime() == nil {
		settled := len(ev.unsampled) == 0 && len(ev.stale) == 0 && ev.pending == 0 && len(ev.silent) == 0
		nobody := settled && ev.applied == 0 // no host consumes the namespace where the stage reaches
		if settled && (ev.applied >= stg.MinHostsApplied || nobody) {
			msg, word := fmt.Sprintf("%d host(s) hold version %d after %v", ev.applied, r.GetVersion(), now.Sub(started).Round(time.Millisecond)), ev.heldBy.note()
			if nobody {
				msg, word = "no host the stage reaches consumes the namespace: nothing to wait for or check", ""
			}
			r.StageAppliedTime = timestamppb.New(now)
			r.Reason = fmt.Sprintf("stage %q: %s; baking %v", stg.Name, msg, stg.Bake)
			r.UpdateTime, r.WaitUntil = timestamppb.New(now), timestamppb.New(now.Add(stg.Bake))
			var evs []*lehrpb.RolloutEvent
			if skipped := skippedZones(ev.byZone, wholeOrShare(stg)); len(skipped) > 0 {
				evs = append(evs, newEvent(r, now, "skipped", strings.Join(skipped, "; ")+
					": nothing to wait for there; the goal moves with the rollout all the same", ""))
			}
			evs = append(evs, newEvent(r, now, "applied", msg+word, ""))
			return Decision{Rollout: r, Events: evs}, nil
		}
		// Where it waits: the zones with pending hosts, named.
		where := describeZones(ev.zones, r.GetVersion())
		switch {
		case len(ev.unsampled) > 0:
			where = fmt.Sprintf("the distributors of %s named no canary hosts", strings.Join(ev.unsampled, ", "))
		case len(ev.stale) > 0:
			where = fmt.Sprintf("the distributors of %s did not report on the candidate", strings.Join(ev.stale, ", "))
		}
		if where != "" {
			where = ": " + where
		}
		// Silence is no evidence: when all the stage still lacks is word
		// from silent zones, it waits for them, even past its deadline,
		// and fails there only if the policy says so for no verdict.
		onlySilence := len(ev.silent) > 0 && ev.pending == 0 && len(ev.stale) == 0 && subset(ev.unsampled, ev.silent)
		if now.Sub(started) > stg.ApplyDeadline && !onlySilence {
			return failed(r, fmt.Sprintf("stage %q: after %v, %d host(s) hold version %d and %d do not (at least %d needed)%s%s",
				stg.Name, stg.ApplyDeadline, ev.applied, r.GetVersion(), ev.pending, stg.MinHostsApplied, where, ev.behindBy.note())), nil
		}
		if onlySilence {
			return waitForSilent(r, stg, ev, now, started.Add(stg.ApplyDeadline)), nil
		}
		reason := fmt.Sprintf("stage %q: waiting for hosts to apply version %d: %d applied, %d pending, at least %d needed%s",
			stg.Name, r.GetVersion(), ev.applied, ev.pending, stg.MinHostsApplied, where)
		switch {
		case len(ev.unsampled) > 0:
			reason = fmt.Sprintf("stage %q: waiting for the distributors of %s to sample canary hosts%s", stg.Name, strings.Join(ev.unsampled, ", "),
				unreported(ev.unsampled, ev.zonesReporting, started.Add(emptyZoneWait(stg))))
		case len(ev.stale) > 0:
			reason = fmt.Sprintf("stage %q: waiting for the distributors of %s to report on the candidate", stg.Name, strings.Join(ev.stale, ", "))
		}
		return withReason(r, now, reason, started.Add(stg.ApplyDeadline)), nil
	}
	applied := r.GetStageAppliedTime().AsTime()
	if !r.GetPromote() && now.Sub(applied) < stg.Bake {
		return withReason(r, now, fmt.Sprintf("stage %q: baking (%d host(s) hold version %d, %d of %d consumers rejected it)%s",
			stg.Name, ev.applied, r.GetVersion(), ev.rejected, ev.consumers, analysisNote(cev)), applied.Add(stg.Bake)), nil
	}
	if len(ev.silent) > 0 {
		// Baked, but a zone the stage reaches went silent: what its hosts
		// did since cannot be known.
		return waitForSilent(r, stg, ev, now, time.Time{}), nil
	}
	verdictNote := ""
	if cev != nil && !r.GetPromote() {
		res := cev.GetResult()
		done := cev.GetState() == lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE
		grace := max(AnalysisGrace, stg.Bake/2)
		switch {
		case done && res.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_PASS:
			verdictNote = "; canary analysis PASS"
		case !done && now.Sub(applied) < stg.Bake+grace:
			return withReason(r, now, fmt.Sprintf("stage %q: baked; waiting for the canary analysis's last look (%v at most)%s",
				stg.Name, grace, analysisNote(cev)), applied.Add(stg.Bake+grace)), nil
		default: // no verdict: NONE at the last look, or no last look in time
			why := res.GetReason()
			if !done {
				why = fmt.Sprintf("its last look did not come within %v of the bake's end (%s)", grace, orNone(why))
			}
			switch stg.Analysis.GetOnNoVerdict() {
			case evaluation.OnNoVerdictFail:
				return failed(r, fmt.Sprintf("canary analysis %s gave no verdict (%s) and the policy says fail", cev.GetId(), why)), nil
			case evaluation.OnNoVerdictWait:
				return withReason(r, now, fmt.Sprintf("stage %q: baked, but the canary analysis gave no verdict (%s); the policy says wait: promote or abort the rollout", stg.Name, why), time.Time{}), nil
			}
			verdictNote = "; canary analysis gave no verdict (" + why + "), and the policy says proceed"
		}
	}
	if w, until, ok := Frozen(r.GetPolicy(), now); ok && i+1 < len(stages) {
		return frozen(r, now, w, until, fmt.Sprintf("stage %q passed; stage %q waits", stg.Name, stages[i+1].Name)), nil
	}
	if len(r.GetRequires()) > 0 && i+1 < len(stages) {
		rc, err := in.Reached()
		if err != nil {
			return Decision{}, err
		}
		if why := Unmet(r, stages[i+1], rc); why != "" {
			return dependencyWait(r, now, fmt.Sprintf("stage %q passed; stage %q %s", stg.Name, stages[i+1].Name, why)), nil
		}
	}
	passed := now.Sub(started)
	if i+1 < len(stages) {
		// The monitoring check: no stage is entered while an alert the
		// policy names fires where it moves.
		m := checkStage(r.GetPolicy(), stages[i+1], i+1, in.Alerts)
		if m.hold != nil {
			return held(r, now, m.hold, stages[i+1], fmt.Sprintf("stage %q passed", stg.Name)), nil
		}
		evs := released(r, now, m, stages[i+1])
		evs = append(evs, newEvent(r, now, "advanced", fmt.Sprintf("stage %q passed: %d host(s) held version %d, %d of %d consumers rejected it%s%s",
			stg.Name, ev.applied, r.GetVersion(), ev.rejected, ev.consumers, verdictNote, ev.reporters.note()), ""))
		cur, err := in.Goals()
		if err != nil {
			return Decision{}, err
		}
		d := enter(r, i+1, stages, cur, now, evs...)
		d.StagePassed = passed
		return d, nil
	}
	// The last stage passed: every zone holds the version.
	r.State = lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED
	r.Reason = fmt.Sprintf("every zone holds version %d", r.GetVersion())
	r.UpdateTime, r.WaitUntil = timestamppb.New(now), nil
	var goals []*lehrpb.GoalState
	for _, z := range in.Zones {
		goals = append(goals, &lehrpb.GoalState{Zone: z, Namespace: r.GetNamespace(), Version: r.GetVersion(), Checksum: r.GetChecksum(),
			UpdateTime: timestamppb.New(now), Reason: fmt.Sprintf("rollout %s succeeded", r.GetId())})
	}
	return Decision{Rollout: r, Goals: goals, Events: []*lehrpb.RolloutEvent{newEvent(r, now, "succeeded", r.GetReason(), "")}, StagePassed: passed}, nil
}

// waitForSilent is the decision of a stage that lacks only the word of
// silent zones: it waits — explained, with what to do — and never passes
// on their account. deadline is the stage's apply deadline while its
// hosts have not all applied (zero once they have): past it the stage
// fails if its analysis says so for no verdict (on_no_verdict: fail) and
// otherwise goes on waiting (proceed does not proceed on silence).
func waitForSilent(r *lehrpb.Rollout, stg Stage, ev Evidence, now, deadline time.Time) Decision {
	what := silence(ev.byZone, ev.silent)
	fails := stg.Analysis.GetOnNoVerdict() == evaluation.OnNoVerdictFail
	late := !deadline.IsZero() && now.After(deadline)
	if late && fails {
		return failed(r, fmt.Sprintf("stage %q: after %v, %s: no evidence of what its hosts hold, and the policy says fail on no verdict", stg.Name, stg.ApplyDeadline, what))
	}
	note, until := "", time.Time{}
	switch {
	case late:
		note = fmt.Sprintf("; its apply deadline (%v) passed, and a stage never passes on silence", stg.ApplyDeadline)
	case fails && !deadline.IsZero():
		note, until = "; it fails at its apply deadline (the policy says fail on no verdict)", deadline
	}
	return withReason(r, now, fmt.Sprintf("stage %q: waiting for evidence: %s, so what its hosts hold cannot be known%s; "+
		"restore the zone's distributors or their link to control (lehr zones status %s), or abort the rollout (lehr rollout abort %s)",
		stg.Name, what, note, ev.silent[0], r.GetNamespace()), until)
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// failed is the decision to end r as FAILED on evidence, rolling it back.
func failed(r *lehrpb.Rollout, reason string) Decision {
	return Decision{Rollout: r, End: &Ending{State: lehrpb.RolloutState_ROLLOUT_STATE_FAILED, Reason: reason}}
}

// withReason records why r waits and until when (zero: for nothing
// timed), when either changed. Neither says how long is left: that
// changes every second and is derived from WaitUntil by whoever shows it
// (WaitLeft), so a rollout that only waits is not rewritten.
func withReason(r *lehrpb.Rollout, now time.Time, reason string, until time.Time) Decision {
	if reason == r.GetReason() && until.Equal(waitUntil(r)) {
		return Decision{}
	}
	r.Reason, r.UpdateTime, r.WaitUntil = reason, timestamppb.New(now), timestampOrNil(until)
	return Decision{Rollout: r}
}

// waitUntil is r's WaitUntil, zero when absent.
func waitUntil(r *lehrpb.Rollout) time.Time {
	if r.GetWaitUntil() == nil {
		return time.Time{}
	}
	return r.GetWaitUntil().AsTime()
}

func timestampOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// WaitLeft says how long r's current wait has left at now — "9m17s
// left", "due now" — or "" when r waits for nothing timed: the countdown
// a rollout's reason does not carry.
func WaitLeft(r *lehrpb.Rollout, now time.Time) string {
	until := waitUntil(r)
	if until.IsZero() || r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		return ""
	}
	if left := until.Sub(now).Round(time.Second); left > 0 {
		return left.String() + " left"
	}
	return "due now"
}

// frozen records that r waits for freeze window w to close at until, with
// an event the first time (and evs).
func frozen(r *lehrpb.Rollout, now time.Time, w *lehrpb.FreezeWindow, until time.Time, what string, evs ...*lehrpb.RolloutEvent) Decision {
	why := DescribeFreeze(w)
	if w.GetReason() != "" {
		why = w.GetReason() + ", " + why
	}
	reason := fmt.Sprintf("frozen until %s (%s): %s", until.UTC().Format(time.RFC3339), why, what)
	if reason == r.GetReason() && len(evs) == 0 {
		return Decision{}
	}
	if !strings.HasPrefix(r.GetReason(), "frozen until") {
		evs = append(evs, newEvent(r, now, "frozen", reason, ""))
	}
	r.Reason, r.UpdateTime, r.WaitUntil = reason, timestamppb.New(now), timestamppb.New(until)
	return Decision{Rollout: r, Events: evs}
}

// enter moves r to stage i, with its goals (cur: each zone's goal now).
func enter(r *lehrpb.Rollout, i int, stages []Stage, cur map[string]*lehrpb.GoalState, now time.Time, evs ...*lehrpb.RolloutEvent) Decision {
	r.Stage = int32(i)
	r.StageStartTime, r.StageAppliedTime, r.Promote = timestamppb.New(now), nil, false
	r.Reason = fmt.Sprintf("stage %q: waiting for its hosts to apply version %d", stages[i].Name, r.GetVersion())
	r.UpdateTime, r.WaitUntil = timestamppb.New(now), timestamppb.New(now.Add(stages[i].ApplyDeadline))
	evs = append(evs, newEvent(r, now, "stage", fmt.Sprintf("entered stage %d/%d %q: %s", i+1, len(stages), stages[i].Name, describe(stages[i])), ""))
	return Decision{Rollout: r, Goals: goalsFor(r, stages, i, cur, now), Events: evs}
}

// AnalysisID is the id of the canary evaluation of r's stage i.
func AnalysisID(r *lehrpb.Rollout, i int) string {
	return store.EvaluationID(r.GetNamespace(), r.GetVersion(), fmt.Sprintf("stage-%d", i+1))
}

// startAnalysis is the decision to start the canary evaluation of stage i
// of r: the stage's canary hosts of every zone it reaches against the
// control hosts the zones' distributors watch, from the stage's applied
// time over its bake.
func startAnalysis(r *lehrpb.Rollout, i int, stg Stage, zones []string, now time.Time) Decision {
	id := AnalysisID(r, i)
	var trials []*lehrpb.CanaryTrial
	var desc []string
	for _, t := range stg.Targets {
		if !slices.Contains(zones, t.Zone) {
			continue
		}
		hosts, _ := canaryHosts(r, t.Zone)
		trials = append(trials, &lehrpb.CanaryTrial{Zone: t.Zone, CanaryHosts: hosts})
		if len(hosts) > 0 {
			desc = append(desc, fmt.Sprintf("%s in %s", strings.Join(hosts, ", "), t.Zone))
		} else {
			desc = append(desc, "the watched cohort hosts of "+t.Zone)
		}
	}
	controls := stg.Analysis.GetControlHosts()
	if controls == 0 {
		controls = evaluation.DefaultControlHosts
	}
	r.EvaluationId, r.UpdateTime = id, timestamppb.New(now)
	msg := fmt.Sprintf("canary analysis %s started: canary hosts %s against up to %d control host(s) per zone, judged at %d looks over the %v bake (lehr canary show %s)",
		id, strings.Join(desc, "; "), controls, evaluation.Looks, stg.Bake, id)
	return Decision{
		Rollout: r, Events: []*lehrpb.RolloutEvent{newEvent(r, now, "analysis", msg, "")},
		Analysis: &lehrpb.CanaryEvaluation{
			Id: id, Namespace: r.GetNamespace(), Version: r.GetVersion(), Trials: trials, Config: stg.Analysis,
			ChangeTime: r.GetStageAppliedTime(), Bake: durationpb.New(stg.Bake), RolloutId: r.GetId(),
			ExpectedChecks: r.GetExpectedChecks(),
		},
	}
}

// cumulative is what the stages up to i move in each zone.
type cumulative struct {
	percent map[string]float64 // of the zone's hosts, by the zones stages and percentage canaries
	hosts   map[string]int     // canary host counts
}

func upTo(stages []Stage, i int) cumulative {
	c := cumulative{percent: map[string]float64{}, hosts: map[string]int{}}
	for _, st := range stages[:i+1] {
		for _, t := range st.Targets {
			c.percent[t.Zone] = max(c.percent[t.Zone], t.Percent)
			c.hosts[t.Zone] = max(c.hosts[t.Zone], t.Hosts)
		}
	}
	return c
}

func canaryHosts(r *lehrpb.Rollout, zone string) ([]string, bool) {
	for _, zh := range r.GetCanaryHosts() {
		if zh.GetZone() == zone {
			return zh.GetHosts(), true
		}
	}
	return nil, false
}

// goalsFor computes every zone's goal at stage i: whole zones hold the
// version; zones partly moved keep their stable goal with the version as
// candidate for their cohort; others keep their goal.
func goalsFor(r *lehrpb.Rollout, stages []Stage, i int, cur map[string]*lehrpb.GoalState, now time.Time) []*lehrpb.GoalState {
	c := upTo(stages, i)
	reason := fmt.Sprintf("rollout %s: stage %q", r.GetId(), stages[i].Name)
	var out []*lehrpb.GoalState
	zones := make([]string, 0, len(c.percent))
	for z := range c.percent {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	for _, z := range zones {
		pct, n := c.percent[z], c.hosts[z]
		g := &lehrpb.GoalState{Zone: z, Namespace: r.GetNamespace(), UpdateTime: timestamppb.New(now), Reason: reason}
		if pct >= 100 {
			g.Version, g.Checksum = r.GetVersion(), r.GetChecksum()
			out = append(out, g)
			continue
		}
		old := cur[z]
		if old == nil {
			continue // no stable goal to keep: the zone is reached whole later
		}
		g.Version, g.Checksum = old.GetVersion(), old.GetChecksum()
		cand := &lehrpb.CandidateGoal{Version: r.GetVersion(), Checksum: r.GetChecksum(), Salt: r.GetSalt(),
			PerMillion: uint32(math.Ceil(pct * cohort.Million / 100))}
		if n > 0 {
			if hosts, ok := canaryHosts(r, z); ok {
				cand.Hosts = hosts
			} else {
				cand.Sample = uint32(n)
			}
		}
		if a := stages[i].Analysis; a != nil && stages[i].Bake > 0 {
			cand.Analysis = uint32(cmp.Or(int(a.GetControlHosts()), evaluation.DefaultControlHosts))
			// The agents judge their host-level checks on what they
			// scrape: checks written as queries are control's alone.
			cand.Checks = signals.AgentChecks(a.GetChecks())
		}
		g.Candidate = cand
		out = append(out, g)
	}
	return out
}

func describe(st Stage) string {
	var parts []string
	for _, t := range st.Targets {
		switch {
		case t.Hosts > 0:
			parts = append(parts, fmt.Sprintf("%d canary host(s) in %s", t.Hosts, t.Zone))
		case t.Percent >= 100:
			parts = append(parts, "all of "+t.Zone)
		default:
			parts = append(parts, fmt.Sprintf("%g%% of %s", t.Percent, t.Zone))
		}
	}
	return fmt.Sprintf("%s; bake %v, apply within %v", strings.Join(parts, ", "), st.Bake, st.ApplyDeadline)
}
