package control_test

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// The history of a policy experiment's counts across control replicas:
// the strategist's leader samples (its lehr_control_experiment_samples_total
// counts, the other replica's stays 0), every replica answers the same
// history (from etcd), an agent restart (its distributor's totals fall)
// counts its new totals, and when the leader goes the next one samples on
// into the same record. Zone reports are sent through the API as a
// distributor of zone-a would send them.
func TestExperimentHistoryAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	opts := control.Options{EtcdEndpoints: cluster.Endpoints(), Rollouts: true, RolloutInterval: 50 * time.Millisecond,
		ExperimentSampleInterval: 50 * time.Millisecond}
	a := controltest.StartControl(t, opts) // leads: it campaigns first
	cl := a.Client
	createDomain(t, cl, "ha", nil)
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	const parent = "domains/ha/policies/fw"
	if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "ha/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Message: "no rules"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "x",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent, Rules: []*lehrpb.Property{ruleProp("eve", "deny", `principal.user == "eve"`)}}}}); err != nil {
		t.Fatal(err)
	}
	name := parent + "/experiments/x"
	if _, err := cl.StartPreviewPolicyExperiment(ctx, &lehrpb.StartPreviewPolicyExperimentRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	e, err := cl.GetPolicyExperiment(ctx, &lehrpb.GetPolicyExperimentRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	b := controltest.StartControl(t, opts) // waits in the election

	// report sends distributor d1's totals: allow→allow and allow→deny.
	report := func(aa, ad uint64) {
		t.Helper()
		if _, err := cl.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 1,
			Preview: []*lehrpb.NamespacePreviewCounts{{Namespace: "ha/fw", Counts: []*lehrpb.HostPreviewCounts{{Experiment: "x",
				Counts: &lehrpb.PreviewCounts{LiveEtag: "v1", ExperimentEtag: e.GetEtag(), AllowAllow: aa, AllowDeny: ad}}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	history := func(c *controltest.Server) []*lehrpb.PolicyExperimentSample {
		t.Helper()
		counts, err := c.Client.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return counts.GetHistory()
	}
	sum := func(h []*lehrpb.PolicyExperimentSample) (ev, dis uint64) {
		for _, s := range h {
			ev += s.GetEvaluations()
			dis += s.GetDisagreements()
		}
		return ev, dis
	}
	waitSum := func(what string, ev, dis uint64) {
		t.Helper()
		wait.For(t, what, func() bool {
			e, d := sum(history(b))
			return e == ev && d == dis
		})
	}
	samples := func(c *controltest.Server) int {
		var sb strings.Builder
		c.Control.Metrics().WritePrometheus(&sb)
		m := regexp.MustCompile(`(?m)^lehr_control_experiment_samples_total (\d+)$`).FindStringSubmatch(sb.String())
		if m == nil {
			t.Fatal("no lehr_control_experiment_samples_total")
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}

	// The baseline: d1 reported before the first sample.
	report(100, 10)
	wait.For(t, "a sample of x", func() bool { return len(history(b)) > 0 })
	if ev, dis := sum(history(b)); ev != 0 || dis != 0 {
		t.Errorf("samples before any new decision sum to %d/%d; want 0/0", ev, dis)
	}
	report(150, 20)
	waitSum("the samples to sum to the 60 decisions since the baseline, 10 disagreeing", 60, 10)
	// The agent restarts: d1's totals fall, and count whole.
	report(5, 1)
	waitSum("the samples to count the restarted agent's 6 decisions", 66, 11)
	if na, nb := samples(a), samples(b); na == 0 || nb != 0 {
		t.Errorf("samples stored by the leader %d, by the other replica %d; want some and 0", na, nb)
	}
	ha, hb := history(a), history(b)
	if len(hb) < len(ha) || !proto.Equal(&lehrpb.PolicyExperimentCounts{History: ha}, &lehrpb.PolicyExperimentCounts{History: hb[:len(ha)]}) {
		t.Errorf("the replicas answer different histories:\n%v\n%v", ha, hb)
	}
	for i, s := range hb {
		if i > 0 && !s.GetSampleTime().AsTime().After(hb[i-1].GetSampleTime().AsTime()) {
			t.Errorf("sample %d at %v, not after the one before it", i, s.GetSampleTime().AsTime())
		}
		if s.GetInterval().AsDuration() <= 0 {
			t.Errorf("sample %d over %v", i, s.GetInterval().AsDuration())
		}
	}

	// The leader goes: b leads, its first sample a baseline, then on.
	a.Stop()
	cl = b.Client
	wait.For(t, "replica b to lead", func() bool {
		st, err := cl.GetControlStatus(ctx, &lehrpb.GetControlStatusRequest{})
		return err == nil && st.GetStrategistLeader() == st.GetReplica()
	})
	n := samples(b)
	wait.For(t, "replica b to sample", func() bool { return samples(b) > n })
	report(10, 2)
	waitSum("the new leader to sample into the same record", 72, 12)

	// x committed: its history goes with it.
	e, err = cl.GetPolicyExperiment(ctx, &lehrpb.GetPolicyExperimentRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CommitPolicyExperiment(ctx, &lehrpb.CommitPolicyExperimentRequest{Name: name, Etag: e.GetEtag()}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "x",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent}}}); err != nil {
		t.Fatal(err)
	}
	if h := history(b); len(h) != 0 {
		t.Errorf("x created again after the commit has a history of %d samples; want none", len(h))
	}
}
