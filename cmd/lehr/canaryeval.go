package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
)

// Output of "lehr canary show" and "lehr canary list": the evaluations
// control runs for rollouts' canary stages (and for Evaluate calls).

func verdictWord(v lehrpb.CanaryVerdict) string { return evaluation.VerdictWord(v) }

func evalState(s lehrpb.CanaryEvaluationState) string { return evaluation.StateWord(s) }

// writeEvaluation prints one evaluation: what it compares, its latest
// look, and every check with its explanation (the words and lines of
// control/evaluation's describe.go, which the console shows too).
func writeEvaluation(w io.Writer, ev *lehrpb.CanaryEvaluation) {
	res := ev.GetResult()
	fmt.Fprintf(w, "evaluation %s (%s)\n", clean(ev.GetId()), evalState(ev.GetState()))
	if ev.GetRolloutId() != "" {
		fmt.Fprintf(w, "  validates rollout %s\n", clean(ev.GetRolloutId()))
	}
	if ev.GetUri() != "" {
		fmt.Fprintf(w, "  console %s\n", clean(ev.GetUri()))
	}
	fmt.Fprintf(w, "  change at %s, bake %v\n", fmtTime(ev.GetChangeTime()), ev.GetBake().AsDuration())
	for _, t := range ev.GetTrials() {
		fmt.Fprintf(w, "  %s\n", clean(evaluation.TrialLine(t)))
	}
	if res == nil {
		fmt.Fprintln(w, "  no look yet")
		return
	}
	fmt.Fprintf(w, "  %s\n", clean(evaluation.LookLine(res)))
	for _, c := range res.GetChecks() {
		fmt.Fprintf(w, "  %-5s %s: %s\n", verdictWord(c.GetVerdict()), clean(c.GetName()), clean(c.GetExplanation()))
		if l := evaluation.TestLine(c); l != "" {
			fmt.Fprintf(w, "        %s\n", clean(l))
		}
		if l := evaluation.AALine(c); l != "" {
			fmt.Fprintf(w, "        %s\n", clean(l))
		}
		if l := evaluation.LearnedLine(c); l != "" {
			fmt.Fprintf(w, "        %s\n", clean(l))
		}
	}
	if hcs := res.GetHostChecks(); len(hcs) > 0 {
		fmt.Fprintf(w, "  %s:\n", evaluation.HostChecksHeading)
		for _, h := range hcs {
			fmt.Fprintf(w, "    %s\n", clean(evaluation.HostCheckLine(h)))
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

// writeCanaryHistory prints what the judge learned of a namespace.
func writeCanaryHistory(w io.Writer, h *lehrpb.CanaryHistory) {
	lines := evaluation.HistoryLines(h)
	if len(lines) == 0 {
		fmt.Fprintf(w, "nothing learned of %s yet (kept changes teach the judge: docs/canary.md, \"Learning from history\")\n", clean(h.GetNamespace()))
		return
	}
	fmt.Fprintf(w, "canary history of %s (learned through version %d; %d bytes stored)\n", clean(h.GetNamespace()), h.GetLearnedVersion(), h.GetStoredBytes())
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", clean(l))
	}
}
