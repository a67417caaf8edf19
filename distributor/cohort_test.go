package distributor_test

import (
	"log/slog"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// A goal state with a candidate, written to etcd as the strategist will,
// reaches the hosts of its cohort only, through a real control, goal watch,
// version fetch and QUIC fan-out; the rollback that follows is a newer
// version with the old content, so no host moves backwards.
func TestCandidateGoalThroughTheDistributor(t *testing.T) {
	cluster, err := embedetcd.StartCluster(ctxT(t), t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	// Only a namespace's first version moves goals; the test moves them
	// after that, as the strategist does.
	firstOnly := func(ns *lehrpb.Namespace, _ lehrpb.VersionSource) store.GoalPolicy {
		if ns.GetLatestVersion() == 0 {
			return store.GoalsAllZones
		}
		return store.GoalsNone
	}
	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints(), GoalPolicy: service.GoalPolicy(firstOnly)})
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st := store.New(cli, store.Options{Logger: quiet()})

	setup(t, srv.Client)
	p := newPKI(t)
	d := startDistributor(t, p, srv.Addr)
	ns := "d/app"
	v1 := publish(t, srv.Client, ns, "limit", "10")
	canary := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	other := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, canary, ns, v1)
	waitVersion(t, other, ns, v1)

	v2 := publish(t, srv.Client, ns, "limit", "0") // the bad change
	if err := st.SetGoal(ctxT(t), &lehrpb.GoalState{Zone: zone, Namespace: ns, Version: v1.GetSeq(), Reason: "canary",
		Candidate: &lehrpb.CandidateGoal{Version: v2.GetSeq(), Hosts: []string{"host-1"}, Salt: "rollout-1"}}); err != nil {
		t.Fatalf("SetGoal with a candidate: %v", err)
	}
	waitVersion(t, canary, ns, v2)

	rb, err := srv.Client.Rollback(ctxT(t), &lehrpb.RollbackRequest{Namespace: ns, ToVersion: v1.GetSeq(), Message: "canary failed"})
	if err != nil {
		t.Fatal(err)
	}
	v3 := rb.GetVersion()
	if err := st.SetGoal(ctxT(t), &lehrpb.GoalState{Zone: zone, Namespace: ns, Version: v3.GetSeq(), Reason: "rollback"}); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, canary, ns, v3)
	waitVersion(t, other, ns, v3)
	for _, tc := range []struct {
		a    *agenttest.Agent
		want []uint64
	}{{canary, []uint64{1, 2, 3}}, {other, []uint64{1, 3}}} {
		var got []uint64
		for _, u := range tc.a.Applied(ns) {
			got = append(got, u.Version)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s applied %v, want %v", tc.a.HostID(), got, tc.want)
		}
	}
}
