package preview

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// How an experiment, its counts and its commit gate are shown — by "lehr
// policy experiment" and the operator console (control/console) alike, so
// both say the same. The figures are the API's; what is composed here is
// the line around them. Callers escape the result for their medium
// (termtext.Clean, html/template): it holds stored text (names, etags).

// NoCounts is what is said of an experiment the hosts have counted no
// decision for.
const NoCounts = "no decisions counted yet (is it previewing? do the hosts' services call Evaluate?)"

// StateLine says whether e is being previewed and since when: "ACTIVE
// since 2026-11-27 18:40:02Z", "SUSPENDED since …", "never previewed".
func StateLine(e *lehrpb.PolicyExperiment) string {
	md := e.GetPreviewMetadata()
	if md == nil {
		return "never previewed"
	}
	switch md.GetState() {
	case lehrpb.PolicyPreviewMetadata_ACTIVE:
		return "ACTIVE since " + fmtTime(md.GetStartTime())
	case lehrpb.PolicyPreviewMetadata_SUSPENDED:
		return "SUSPENDED since " + fmtTime(md.GetStopTime())
	}
	return md.GetState().String()
}

// CountsHeading is the line above an experiment's counts.
func CountsHeading(c *lehrpb.PolicyExperimentCounts) string {
	return fmt.Sprintf("experiment %s (etag now %s): decisions counted at hosts, live → experiment", c.GetName(), c.GetEtag())
}

// DisagreeShare is the share of the decisions of p the experiment
// disagreed with the live policy on, "12.50%", or "-" when p counts none.
func DisagreeShare(p *lehrpb.PreviewCounts) string {
	total, dis := Decisions(p)
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(dis)/float64(total))
}

// GateLine says whether the gate of a commit of the experiment of etag
// asking for req's bounds (min_evaluations, max_disagreement) would pass
// on counts, and why: Gate's refusal in its own words, or what passes.
// The gate is the commit's: control keeps no bounds of an experiment, so
// the answer is for the bounds given.
func GateLine(req *lehrpb.CommitPolicyExperimentRequest, etag string, counts *lehrpb.PolicyExperimentCounts) (pass bool, line string) {
	if err := Gate(req, etag, counts); err != nil {
		return false, apierror.FromError(err).Message
	}
	total, disagree := Decisions(EtagTotals(etag, counts))
	seen := fmt.Sprintf("hosts have not evaluated experiment etag %s yet", etag)
	if total > 0 {
		seen = fmt.Sprintf("hosts have evaluated experiment etag %s %d times and it disagreed with the live policy on %d (%.4g%%)",
			etag, total, disagree, 100*float64(disagree)/float64(total))
	}
	if req.GetMinEvaluations() == 0 && req.GetMaxDisagreement() == 0 {
		return true, seen + "; a commit that asks for no bound (min_evaluations, max_disagreement) is not gated by the counts"
	}
	var bounds string
	switch min, m := req.GetMinEvaluations(), req.GetMaxDisagreement(); {
	case min > 0 && m > 0:
		bounds = fmt.Sprintf("at least %d evaluations and at most %.4g%% disagreement", min, 100*m)
	case min > 0:
		bounds = fmt.Sprintf("at least %d evaluations", min)
	default:
		bounds = fmt.Sprintf("at most %.4g%% disagreement", 100*m)
	}
	return true, seen + "; a commit asking for " + bounds + " passes the gate"
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}
