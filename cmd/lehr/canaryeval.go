package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"lehr.dev/lehr/proto/lehrpb"
)

// Output of "lehr canary show" and "lehr canary list": the evaluations
// control runs for rollouts' canary stages (and for Evaluate calls).

func verdictWord(v lehrpb.CanaryVerdict) string {
	if v == lehrpb.CanaryVerdict_CANARY_VERDICT_UNSPECIFIED {
		return "-"
	}
	return strings.TrimPrefix(v.String(), "CANARY_VERDICT_")
}

func evalState(s lehrpb.CanaryEvaluationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CANARY_EVALUATION_STATE_"))
}

// writeEvaluation prints one evaluation: what it compares, its latest
// look, and every check with its explanation.
func writeEvaluation(w io.Writer, ev *lehrpb.CanaryEvaluation) {
	res := ev.GetResult()
	fmt.Fprintf(w, "evaluation %s (%s)\n", clean(ev.GetId()), evalState(ev.GetState()))
	if ev.GetRolloutId() != "" {
		fmt.Fprintf(w, "  validates rollout %s\n", clean(ev.GetRolloutId()))
	}
	fmt.Fprintf(w, "  change at %s, bake %v\n", fmtTime(ev.GetChangeTime()), ev.GetBake().AsDuration())
	for _, t := range ev.GetTrials() {
		canaries, controls := "the watched cohort hosts", "the watched hosts outside the cohort"
		if len(t.GetCanaryHosts()) > 0 {
			canaries = strings.Join(t.GetCanaryHosts(), ", ")
		}
		if len(t.GetControlHosts()) > 0 {
			controls = strings.Join(t.GetControlHosts(), ", ")
		}
		fmt.Fprintf(w, "  %s: canary %s; control %s\n", clean(t.GetZone()), clean(canaries), clean(controls))
	}
	if res == nil {
		fmt.Fprintln(w, "  no look yet")
		return
	}
	fmt.Fprintf(w, "  verdict %s at look %d of %d (%d interval(s) of %ds after the change; %d canary and %d control host(s) with data): %s\n",
		verdictWord(res.GetVerdict()), res.GetLook(), res.GetLooks(), res.GetAfterIntervals(), res.GetIntervalSeconds(),
		res.GetCanaryHosts(), res.GetControlHosts(), clean(res.GetReason()))
	for _, c := range res.GetChecks() {
		fmt.Fprintf(w, "  %-5s %s: %s\n", verdictWord(c.GetVerdict()), clean(c.GetName()), clean(c.GetExplanation()))
		if c.GetTest() != "" {
			fmt.Fprintf(w, "        %s; effect %.3g, statistic %.3g on %.3g df, p %.3g (needed < %.3g)\n",
				clean(c.GetTest()), c.GetEffect(), c.GetStatistic(), c.GetDf(), c.GetP(), c.GetThreshold())
		}
		if aa := c.GetAa(); aa != nil {
			fmt.Fprintf(w, "        A/A (control against control): %s, p %.3g; %d of %d random halvings differ at p < 0.05 (about 1 expected)\n",
				verdictWord(aa.GetVerdict()), aa.GetP(), aa.GetAaDiffer(), aa.GetAaSplits())
		}
	}
	if hcs := res.GetHostChecks(); len(hcs) > 0 {
		fmt.Fprintln(w, "  host-level checks (each canary host against its own history; evidence, not the verdict):")
		for _, h := range hcs {
			fmt.Fprintf(w, "    %s: failed on %d of %d canary host(s)", clean(h.GetName()), h.GetFailed(), h.GetHosts())
			if h.GetFailed() > 0 {
				fmt.Fprintf(w, " (%s): %s", clean(strings.Join(h.GetFailedHosts(), ", ")), clean(h.GetExplanation()))
			}
			fmt.Fprintln(w)
		}
	}
}

// writeEvaluations prints one line per evaluation.
func writeEvaluations(w io.Writer, evs []*lehrpb.CanaryEvaluation) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "no canary evaluations")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tVERDICT\tLOOK\tUPDATED\tREASON")
	for _, ev := range evs {
		res := ev.GetResult()
		look := "-"
		if res != nil {
			look = fmt.Sprintf("%d/%d", res.GetLook(), res.GetLooks())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(ev.GetId()), evalState(ev.GetState()), verdictWord(res.GetVerdict()), look,
			fmtTime(ev.GetUpdateTime()), oneLine(res.GetReason()))
	}
	tw.Flush()
}
