package evaluation

import (
	"fmt"
	"strings"

	"lehr.dev/lehr/proto/lehrpb"
)

// How an evaluation is shown — by "lehr canary show" and the operator
// console (control/console) alike, so both say the same. The words are
// the judge's own (a check's explanation, the verdict's reason); what is
// composed here is the line around them. Callers escape the result for
// their medium (termtext.Clean, html/template): it holds stored text.

// VerdictWord names a verdict: "PASS", "FAIL", "NONE", or "-" when there
// is none.
func VerdictWord(v lehrpb.CanaryVerdict) string {
	if v == lehrpb.CanaryVerdict_CANARY_VERDICT_UNSPECIFIED {
		return "-"
	}
	return strings.TrimPrefix(v.String(), "CANARY_VERDICT_")
}

// StateWord names an evaluation's state: "running", "done".
func StateWord(s lehrpb.CanaryEvaluationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CANARY_EVALUATION_STATE_"))
}

// TrialLine says what one trial compares: "zone-a: canary h1, h2; control
// h3, h4", naming the watched hosts when the trial names none.
func TrialLine(t *lehrpb.CanaryTrial) string {
	canaries, controls := "the watched cohort hosts", "the watched hosts outside the cohort"
	if len(t.GetCanaryHosts()) > 0 {
		canaries = strings.Join(t.GetCanaryHosts(), ", ")
	}
	if len(t.GetControlHosts()) > 0 {
		controls = strings.Join(t.GetControlHosts(), ", ")
	}
	return fmt.Sprintf("%s: canary %s; control %s", t.GetZone(), canaries, controls)
}

// LookLine says where a result stands and why: "verdict FAIL at look 1 of
// 4 (9 interval(s) of 10s after the change; 4 canary and 12 control
// host(s) with data): <reason>".
func LookLine(res *lehrpb.CanaryResult) string {
	return fmt.Sprintf("verdict %s at look %d of %d (%d interval(s) of %ds after the change; %d canary and %d control host(s) with data): %s",
		VerdictWord(res.GetVerdict()), res.GetLook(), res.GetLooks(), res.GetAfterIntervals(), res.GetIntervalSeconds(),
		res.GetCanaryHosts(), res.GetControlHosts(), res.GetReason())
}

// TestLine gives a check's test and its numbers, "" when it ran none.
func TestLine(c *lehrpb.CanaryCheckResult) string {
	if c.GetTest() == "" {
		return ""
	}
	return fmt.Sprintf("%s; effect %.3g, statistic %.3g on %.3g df, p %.3g (needed < %.3g)",
		c.GetTest(), c.GetEffect(), c.GetStatistic(), c.GetDf(), c.GetP(), c.GetThreshold())
}

// AALine gives a check's control-against-control comparison, "" when
// there were too few control hosts to split.
func AALine(c *lehrpb.CanaryCheckResult) string {
	aa := c.GetAa()
	if aa == nil {
		return ""
	}
	return fmt.Sprintf("A/A (control against control): %s, p %.3g; %d of %d random halvings differ at p < 0.05 (about 1 expected)",
		VerdictWord(aa.GetVerdict()), aa.GetP(), aa.GetAaDiffer(), aa.GetAaSplits())
}

// HostChecksHeading introduces a result's host-level checks.
const HostChecksHeading = "host-level checks (each canary host against its own history; evidence, not the verdict)"

// HostCheckLine sums one host-level check over the canary hosts: "errors:
// failed on 1 of 4 canary host(s) (zone-a/h1): <explanation>".
func HostCheckLine(h *lehrpb.CanaryHostCheck) string {
	s := fmt.Sprintf("%s: failed on %d of %d canary host(s)", h.GetName(), h.GetFailed(), h.GetHosts())
	if h.GetFailed() > 0 {
		s += fmt.Sprintf(" (%s): %s", strings.Join(h.GetFailedHosts(), ", "), h.GetExplanation())
	}
	return s
}
