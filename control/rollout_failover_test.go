package control_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/strategist"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A rollout outlives the control replica leading it: the other replica
// wins the election and resumes it from etcd where it stood, entering no
// stage twice and skipping none.
func TestRolloutSurvivesControlFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	opts := control.Options{EtcdEndpoints: cluster.Endpoints(), Rollouts: true, RolloutInterval: 50 * time.Millisecond}
	a := controltest.StartControl(t, opts) // leads: it campaigns first
	cl := a.Client
	createDomain(t, cl, "ha", nil)
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	// Two whole-zone stages; no distributor serves either zone, so each
	// skips its zone (a "skipped" event) and passes on its bake alone.
	stage := func(name, zone string, bake time.Duration) *lehrpb.RolloutStage {
		return &lehrpb.RolloutStage{Name: name, Bake: durationpb.New(bake),
			Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{zone}}}}
	}
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "ha", Policy: &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		stage("a", "zone-a", 3*time.Second), stage("b", "zone-b", time.Second),
	}}}); err != nil {
		t.Fatal(err)
	}
	publish(t, cl, "ha/ns", prop("k", "", "1"))
	v2 := publish(t, cl, "ha/ns", prop("k", "", "2"))
	b := controltest.StartControl(t, opts) // waits in the election
	wait.For(t, "the rollout baking its first stage", func() bool {
		r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "ha/ns", Version: v2.GetSeq()})
		return err == nil && r.GetStage() == 0 && r.GetStageAppliedTime() != nil
	})
	a.Stop()

	var r *lehrpb.Rollout
	wait.For(t, "the other replica to finish the rollout", func() bool {
		r, err = b.Client.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "ha/ns", Version: v2.GetSeq()})
		return err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED
	})
	evs, err := b.Client.ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: "ha/ns", Version: v2.GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs.GetEvents() {
		kinds = append(kinds, ev.GetKind())
	}
	if want := []string{"started", "stage", "skipped", "applied", "advanced", "stage", "skipped", "applied", "succeeded"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v (no stage entered twice, none left out)", kinds, want)
	}
	for _, z := range []string{"zone-a", "zone-b"} {
		g, err := b.Client.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: z, Namespace: "ha/ns"})
		if err != nil || len(g.GetGoals()) != 1 || g.GetGoals()[0].GetVersion() != v2.GetSeq() {
			t.Errorf("goal of %s: %v, %v; want version %d", z, g, err, v2.GetSeq())
		}
	}
}

// A namespace keeps its newest strategist.KeepRollouts rollouts; older
// finished ones go with their event logs.
func TestRolloutHistoryIsBounded(t *testing.T) {
	ctx := testCtx(t)
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 20 * time.Millisecond})
	cl := srv.Client
	// 26 publishes as fast as their rollouts finish: above the default
	// publish rate.
	createDomain(t, cl, "b", &lehrpb.Quotas{PublishesPerSecond: 1000, PublishBurst: 1000})
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "b", Policy: &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	const n = strategist.KeepRollouts + 5
	var last *lehrpb.VersionInfo
	for i := range n + 1 {
		last = publish(t, cl, "b/ns", prop("k", "", fmt.Sprint(i)))
		if i == 0 {
			continue // a first version has no rollout
		}
		wait.For(t, fmt.Sprintf("rollout of version %d done", last.GetSeq()), func() bool {
			r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "b/ns", Version: last.GetSeq()})
			return err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED
		})
	}
	wait.For(t, "old rollouts pruned", func() bool {
		rs, err := cl.ListRollouts(ctx, &lehrpb.ListRolloutsRequest{Namespace: "b/ns"})
		return err == nil && len(rs.GetRollouts()) == strategist.KeepRollouts
	})
	rs, _ := cl.ListRollouts(ctx, &lehrpb.ListRolloutsRequest{Namespace: "b/ns"})
	if got := rs.GetRollouts()[len(rs.GetRollouts())-1].GetVersion(); got != last.GetSeq() {
		t.Errorf("newest kept rollout is of version %d, want %d", got, last.GetSeq())
	}
	if _, err := cl.ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: "b/ns", Version: 2}); err == nil {
		t.Errorf("the events of pruned rollout 2 are still readable")
	}
}
