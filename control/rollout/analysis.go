package rollout

import (
	"fmt"
	"strings"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// AnalysisGrace is the least time a stage waits, after its bake, for the
// last look of its canary analysis (the data arrive a report interval or
// two after the interval they describe); at least half the bake.
const AnalysisGrace = 30 * time.Second

// analysisNote is what a rollout's reason says of its stage's analysis.
func analysisNote(cev *lehrpb.CanaryEvaluation) string {
	res := cev.GetResult()
	if cev == nil || res == nil {
		return ""
	}
	return fmt.Sprintf("; canary analysis: %s at look %d of %d (%s)",
		strings.TrimPrefix(res.GetVerdict().String(), "CANARY_VERDICT_"), res.GetLook(), res.GetLooks(), res.GetReason())
}

func orNone(s string) string {
	if s == "" {
		return "no look yet"
	}
	return s
}
