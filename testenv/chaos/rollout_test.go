package chaos_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/chaos"
	"lehr.dev/lehr/testenv/wait"
)

// Control killed with SIGKILL in the middle of a rollout, and restarted as
// systemd would: the new process waits out the dead one's election lease,
// reads the rollout from etcd and finishes it — no stage entered twice,
// none skipped — and every host ends at the version.
func TestRolloutSurvivesControlKill(t *testing.T) {
	bin := lehrBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cl, err := chaos.StartCluster(ctx, ctx, chaos.ClusterOptions{
		Binary: bin, Dir: runDir(t), Logger: testLogger(t),
		Topology: chaos.Topology{Zones: 2, DistributorsPerZone: 1, AgentsPerZone: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	prod := cl.Producer()
	ns := chaos.Domain + "/rollout"
	stage := func(name, zone string, bake time.Duration) *lehrpb.RolloutStage {
		return &lehrpb.RolloutStage{Name: name, Bake: durationpb.New(bake),
			Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{zone}}}}
	}
	if _, err := prod.SetRolloutPolicy(ctx, chaos.Domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		stage("first", "z0", 3*time.Second), stage("second", "z1", time.Second),
	}}, "kill test", 0); err != nil {
		t.Fatal(err)
	}
	for i, a := range cl.Agents {
		c, err := consumer.New(consumer.Options{Socket: a.Socket(), FilesDir: a.FilesDir(), ClientID: "rollout-kill", RetryInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Subscribe(ctx, ns); err != nil {
			t.Fatalf("subscribe on agent %d: %v", i, err)
		}
	}
	if _, err := prod.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	// Every zone's distributor reports its agent before the rollout
	// starts: a zone without a report is skipped (an event the check
	// below would count).
	for _, z := range cl.Zones() {
		wait.For(t, z+"'s distributor reporting its agent", func() bool {
			st, err := prod.RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
			return err == nil && len(st.GetDistributors()) == 1 && st.GetDistributors()[0].GetAgents() == 1
		})
	}
	v2, err := prod.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("2")}})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the first stage baking", func() bool {
		r, err := prod.GetRollout(ctx, ns, v2.GetSeq())
		return err == nil && r.GetStage() == 0 && r.GetStageAppliedTime() != nil
	})
	if !cl.Control.Kill() {
		t.Fatal("control was not running")
	}
	if err := cl.Control.Start(ctx); err != nil { // as systemd restarts it
		t.Fatal(err)
	}

	wctx, wcancel := context.WithTimeout(ctx, wait.Timeout)
	defer wcancel()
	r, err := prod.WaitRollout(wctx, ns, v2.GetSeq(), 200*time.Millisecond, nil)
	if err != nil || r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Fatalf("after the kill: %v, %v; want the rollout succeeded", r, err)
	}
	evs, err := prod.RolloutEvents(ctx, ns, v2.GetSeq())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.GetKind())
	}
	if want := []string{"started", "stage", "applied", "advanced", "stage", "applied", "succeeded"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v (no stage twice, none skipped)", kinds, want)
	}
	for _, a := range cl.Agents {
		wait.For(t, a.HostID+" at the version", func() bool {
			st, err := a.Status(ctx)
			if err != nil {
				return false
			}
			for _, n := range st.GetNamespaces() {
				if n.GetNamespace() == ns {
					return n.GetVersion() == v2.GetSeq()
				}
			}
			return false
		})
	}
	if f := cl.Failures(); len(f) > 0 {
		t.Errorf("process failures: %v", f)
	}
}
