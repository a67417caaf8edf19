package evaluation_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/evaluation"
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
