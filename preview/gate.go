package preview

import (
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// EtagTotals sums the hosts' counts of an experiment's etag, over every
// zone and live etag of counts.
func EtagTotals(etag string, counts *lehrpb.PolicyExperimentCounts) *lehrpb.PreviewCounts {
	sum := &lehrpb.PreviewCounts{ExperimentEtag: etag}
	for _, c := range counts.GetTotals() {
		if c.GetExperimentEtag() == etag {
			Add(sum, c)
		}
	}
	return sum
}

// ExpectedChange returns how much the share of decisions that deny
// changes from the live policy to the experiment of etag, over every
// decision the hosts counted for it (allow→deny less deny→allow, over them
// all), the share of decisions the two disagreed on (allow→deny plus
// deny→allow, over them all), and how many decisions that is.
//
// A commit's rollout expects both on its canary hosts: the deny share to
// move by denyShare, and the share of decisions the replaced version
// would have decided otherwise to be disagreement (Comparison). The
// second is not implied by the first: an experiment that flips a quarter
// of the decisions each way changes the deny share by nothing and half
// of the decisions.
func ExpectedChange(etag string, counts *lehrpb.PolicyExperimentCounts) (denyShare, disagreement float64, decisions uint64) {
	sum := EtagTotals(etag, counts)
	total, disagree := Decisions(sum)
	if total == 0 {
		return 0, 0, 0
	}
	return (float64(sum.GetAllowDeny()) - float64(sum.GetDenyAllow())) / float64(total), float64(disagree) / float64(total), total
}

// Gate refuses, as FAILED_PRECONDITION/PREVIEW_GATE naming the field, a
// commit of the experiment of etag that the hosts' counts do not support
// yet: fewer evaluations than min_evaluations, or a disagreement above
// max_disagreement.
func Gate(req *lehrpb.CommitPolicyExperimentRequest, etag string, counts *lehrpb.PolicyExperimentCounts) error {
	if req.GetMinEvaluations() == 0 && req.GetMaxDisagreement() == 0 {
		return nil
	}
	total, disagree := Decisions(EtagTotals(etag, counts))
	if total < req.GetMinEvaluations() {
		return apierror.New(codes.FailedPrecondition, apierror.ReasonPreviewGate, "min_evaluations",
			"hosts have evaluated experiment etag %s %d times; the commit asks for at least %d: keep previewing (is it ACTIVE? `lehr policy experiment counts`)",
			etag, total, req.GetMinEvaluations()).WithLimit("%d evaluations", req.GetMinEvaluations())
	}
	if m := req.GetMaxDisagreement(); m > 0 {
		if total == 0 {
			return apierror.New(codes.FailedPrecondition, apierror.ReasonPreviewGate, "max_disagreement",
				"hosts have not evaluated experiment etag %s yet, so its disagreement is unknown; start previewing it and wait for traffic", etag)
		}
		if share := float64(disagree) / float64(total); share > m {
			return apierror.New(codes.FailedPrecondition, apierror.ReasonPreviewGate, "max_disagreement",
				"experiment etag %s disagreed with the live policy on %d of %d decisions (%.4g%%); the commit allows at most %.4g%%",
				etag, disagree, total, 100*share, 100*m).WithLimit("%g", m)
		}
	}
	return nil
}
