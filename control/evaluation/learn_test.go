package evaluation_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

func keptEvaluation(checks []string, after int32) *lehrpb.CanaryEvaluation {
	res := &lehrpb.CanaryResult{Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_PASS, Look: 4, Looks: 4, AfterIntervals: after}
	for _, c := range checks {
		res.Checks = append(res.Checks, &lehrpb.CanaryCheckResult{Name: c, Sample: &lehrpb.CanaryCheckSample{
			AfterIntervals: after, Effect: -0.0123456, LevelVariance: 1.234567e-3, SpreadVariance: float32(math.NaN()), Df: 99}})
	}
	return &lehrpb.CanaryEvaluation{State: lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE, Result: res}
}

// Learning keeps the newest canary.MaxHistory samples per check and bake
// and at most MaxHistoryEntries of those, within MaxHistoryBytes even
// with the longest check names; the judge gets the histories of its bake.
func TestLearnIsBounded(t *testing.T) {
	var names []string
	for i := range 2 * evaluation.MaxHistoryEntries {
		names = append(names, fmt.Sprintf("%02d", i)+strings.Repeat("c", 61))
	}
	rec := &lehrpb.CanaryHistory{Namespace: "shop/web", LearnedVersion: math.MaxUint64}
	for i := range 3 * canary.MaxHistory {
		// First the checks of a 30-interval bake, then others of a
		// 3,600-interval one, which replace them.
		ev := keptEvaluation(names[:evaluation.MaxHistoryEntries], 30)
		if i >= 3*canary.MaxHistory/2 {
			ev = keptEvaluation(names[evaluation.MaxHistoryEntries:], 3600)
		}
		if !evaluation.Kept(ev) {
			t.Fatal("a PASS at the last look is not kept")
		}
		evaluation.Learn(rec, ev)
	}
	if n := len(rec.GetChecks()); n != evaluation.MaxHistoryEntries {
		t.Errorf("%d histories; want %d", n, evaluation.MaxHistoryEntries)
	}
	for _, h := range rec.GetChecks() {
		if n := len(h.GetSamples()); n != canary.MaxHistory {
			t.Errorf("%s: %d samples; want %d", h.GetCheck(), n, canary.MaxHistory)
		}
	}
	rec.StoredBytes = math.MaxInt64
	if size := len("lehr/canaryhist/shop/web") + proto.Size(rec); size > evaluation.MaxHistoryBytes {
		t.Errorf("a full history takes %d bytes; MaxHistoryBytes says %d", size, evaluation.MaxHistoryBytes)
	}
	if got := evaluation.JudgeHistory(rec, 3600); len(got) != evaluation.MaxHistoryEntries || len(got[names[evaluation.MaxHistoryEntries]].Samples) != canary.MaxHistory {
		t.Errorf("JudgeHistory at 3600 intervals: %d checks; want %d of %d samples each", len(got), evaluation.MaxHistoryEntries, canary.MaxHistory)
	}
	if got := evaluation.JudgeHistory(rec, 30); len(got) != 0 {
		t.Errorf("JudgeHistory at 30 intervals: %d checks; want none (their histories were replaced)", len(got))
	}
	fail := keptEvaluation(names[:1], 30)
	fail.Result.Verdict = lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
	early := keptEvaluation(names[:1], 30)
	early.Result.Look = 3
	if evaluation.Kept(fail) || evaluation.Kept(early) {
		t.Error("a FAIL, or a PASS before the last look, is kept")
	}
}

// A succeeded rollout's kept evaluations are learned once; forgetting a
// check drops its samples, forgetting all the record.
func TestLearnVersionAndForget(t *testing.T) {
	ctx := context.Background()
	f := newFakeStore()
	s, err := evaluation.New(evaluation.Options{Store: f})
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 3; v++ {
		ev := keptEvaluation([]string{"latency", "error ratio"}, 30)
		ev.Id, ev.Namespace, ev.Version = fmt.Sprintf("shop/web@%d/stage-1", v), "shop/web", v
		f.add(ev)
	}
	failed := keptEvaluation([]string{"latency"}, 30)
	failed.Id, failed.Namespace, failed.Version, failed.Result.Verdict = "shop/web@2/other", "shop/web", 2, lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
	f.add(failed)
	for _, v := range []uint64{1, 2, 2, 3} {
		if _, err := s.LearnVersion(ctx, store.Guard{}, "shop/web", v); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := s.History(ctx, "shop/web")
	if len(h.GetChecks()) != 2 || len(h.GetChecks()[0].GetSamples()) != 3 || h.GetLearnedVersion() != 3 {
		t.Fatalf("history = %v; want 2 checks of 3 samples (each version once, the FAIL not), learned through 3", h)
	}
	if n, _, err := s.Forget(ctx, store.Guard{}, "shop/web", "latency"); err != nil || n != 3 {
		t.Fatalf("Forget latency = %d, %v; want 3 samples", n, err)
	}
	h, _ = s.History(ctx, "shop/web")
	if len(h.GetChecks()) != 1 || h.GetChecks()[0].GetCheck() != "error ratio" {
		t.Fatalf("after forgetting latency: %v; want error ratio alone", h)
	}
	if n, freed, err := s.Forget(ctx, store.Guard{}, "shop/web", ""); err != nil || n != 3 || freed <= 0 {
		t.Fatalf("Forget all = %d, %d bytes, %v; want 3 samples and some bytes", n, freed, err)
	}
	if h, _ = s.History(ctx, "shop/web"); len(h.GetChecks()) != 0 {
		t.Fatalf("after forgetting all: %v", h)
	}
}
