package preview

import (
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestDisagreeShare(t *testing.T) {
	for _, tc := range []struct {
		c    *lehrpb.PreviewCounts
		want string
	}{
		{&lehrpb.PreviewCounts{}, "-"},
		{&lehrpb.PreviewCounts{AllowAllow: 3, AllowDeny: 1}, "25.00%"},
		{&lehrpb.PreviewCounts{DenyDeny: 2, DenyAllow: 1}, "33.33%"},
	} {
		if got := DisagreeShare(tc.c); got != tc.want {
			t.Errorf("DisagreeShare(%v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// GateLine passes exactly when Gate does, and says why in Gate's words
// when it refuses.
func TestGateLine(t *testing.T) {
	counts := &lehrpb.PolicyExperimentCounts{Etag: "e2", Totals: []*lehrpb.PreviewCounts{
		{LiveEtag: "v1", ExperimentEtag: "e1", AllowAllow: 100, AllowDeny: 100},
		{LiveEtag: "v1", ExperimentEtag: "e2", AllowAllow: 60, DenyDeny: 20, AllowDeny: 20},
	}}
	for _, tc := range []struct {
		min  uint64
		max  float64
		etag string
		pass bool
		want string
	}{
		{0, 0, "e2", true, "hosts have evaluated experiment etag e2 100 times and it disagreed with the live policy on 20 (20%); a commit that asks for no bound (min_evaluations, max_disagreement) is not gated by the counts"},
		{100, 0, "e2", true, "hosts have evaluated experiment etag e2 100 times and it disagreed with the live policy on 20 (20%); a commit asking for at least 100 evaluations passes the gate"},
		{0, 0.25, "e2", true, "hosts have evaluated experiment etag e2 100 times and it disagreed with the live policy on 20 (20%); a commit asking for at most 25% disagreement passes the gate"},
		{50, 0.2, "e2", true, "hosts have evaluated experiment etag e2 100 times and it disagreed with the live policy on 20 (20%); a commit asking for at least 50 evaluations and at most 20% disagreement passes the gate"},
		{101, 0, "e2", false, "hosts have evaluated experiment etag e2 100 times; the commit asks for at least 101: keep previewing (is it ACTIVE? `lehr policy experiment counts`)"},
		{0, 0.1, "e2", false, "experiment etag e2 disagreed with the live policy on 20 of 100 decisions (20%); the commit allows at most 10%"},
		{0, 0.1, "e3", false, "hosts have not evaluated experiment etag e3 yet, so its disagreement is unknown; start previewing it and wait for traffic"},
		{0, 0, "e3", true, "hosts have not evaluated experiment etag e3 yet; a commit that asks for no bound (min_evaluations, max_disagreement) is not gated by the counts"},
	} {
		req := &lehrpb.CommitPolicyExperimentRequest{MinEvaluations: tc.min, MaxDisagreement: tc.max}
		pass, got := GateLine(req, tc.etag, counts)
		if pass != tc.pass || got != tc.want {
			t.Errorf("GateLine(min %d, max %g, %s) = %v, %q\nwant %v, %q", tc.min, tc.max, tc.etag, pass, got, tc.pass, tc.want)
		}
		if gatePass := Gate(req, tc.etag, counts) == nil; gatePass != pass {
			t.Errorf("GateLine(min %d, max %g, %s) passes %v; Gate %v", tc.min, tc.max, tc.etag, pass, gatePass)
		}
	}
}
