package control_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// Publishes are progressive (service.Progressive) but no strategist runs:
// whatever moves goals here is the publish itself.
func noStrategist() control.Options { return control.Options{GoalPolicy: service.Progressive} }

// blastZones creates zone-a and zone-b.
func blastZones(t *testing.T, cl lehrpb.ControlClient) []string {
	t.Helper()
	zones := []string{"zone-a", "zone-b"}
	for _, z := range zones {
		if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	return zones
}

func setPolicy(t *testing.T, cl lehrpb.ControlClient, scope string, p *lehrpb.RolloutPolicy) {
	t.Helper()
	if _, err := cl.SetRolloutPolicy(testCtx(t), &lehrpb.SetRolloutPolicyRequest{Scope: scope, Policy: p, Message: "test"}); err != nil {
		t.Fatalf("SetRolloutPolicy(%s): %v", scope, err)
	}
}

// goalVersions returns ns's goal version in each zone (0: none).
func goalVersions(t *testing.T, cl lehrpb.ControlClient, ns string, zones []string) []uint64 {
	t.Helper()
	var out []uint64
	for _, z := range zones {
		g, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: z, Namespace: ns})
		if err != nil {
			t.Fatalf("GetGoals(%s, %s): %v", z, ns, err)
		}
		var v uint64
		if len(g.GetGoals()) > 0 {
			v = g.GetGoals()[0].GetVersion()
		}
		out = append(out, v)
	}
	return out
}

func eventKinds(t *testing.T, cl lehrpb.ControlClient, ns string, v uint64) []string {
	t.Helper()
	evs, err := cl.ListRolloutEvents(testCtx(t), &lehrpb.ListRolloutEventsRequest{Namespace: ns, Version: v})
	if err != nil {
		t.Fatalf("ListRolloutEvents(%s@%d): %v", ns, v, err)
	}
	var kinds []string
	for _, ev := range evs.GetEvents() {
		kinds = append(kinds, ev.GetKind())
	}
	return kinds
}

func all(v uint64, n int) []uint64 { return slices.Repeat([]uint64{v}, n) }

// A global blast does not wait for the strategist (issue 29): the publish
// itself writes every zone's goal, in the version's own transaction, and
// the rollout record as the strategist would have started it — here with
// no strategist running at all.
func TestGlobalBlastMovesGoalsAtPublish(t *testing.T) {
	ctx := testCtx(t)
	cl := controltest.StartControl(t, noStrategist()).Client
	createDomain(t, cl, "blast", nil)
	zones := blastZones(t, cl)
	setPolicy(t, cl, "blast", rollout.GlobalBlast())

	v1 := publish(t, cl, "blast/ns", prop("k", "", "1"))
	v2 := publish(t, cl, "blast/ns", prop("k", "", "2"))
	if got, want := goalVersions(t, cl, "blast/ns", zones), all(v2.GetSeq(), len(zones)); !slices.Equal(got, want) {
		t.Fatalf("goals right after the publish: %v, want %v (every zone, no strategist round)", got, want)
	}
	r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "blast/ns", Version: v2.GetSeq()})
	if err != nil {
		t.Fatalf("GetRollout: %v", err)
	}
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING || r.GetStage() != 0 || r.GetStageStartTime() == nil ||
		r.GetBaseVersion() != v1.GetSeq() || !slices.Equal(r.GetStages(), []string{rollout.GlobalBlastStage}) ||
		r.GetPolicySource() != lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN || r.GetPolicyGeneration() != 1 {
		t.Errorf("rollout %v; want running in stage 0 %q from base %d under the domain's policy (generation 1)", r, rollout.GlobalBlastStage, v1.GetSeq())
	}
	if !strings.Contains(r.GetReason(), "waiting for its hosts to apply version 2") {
		t.Errorf("reason %q; want it waiting for hosts to apply version 2", r.GetReason())
	}
	evs, err := cl.ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: "blast/ns", Version: v2.GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs.GetEvents() {
		kinds = append(kinds, ev.GetKind())
	}
	if want := []string{"started", "stage", rollout.PublishedEventKind}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	if msg := evs.GetEvents()[2].GetMessage(); !strings.HasPrefix(msg, "goals written at publish: every zone at once") {
		t.Errorf("event %q; want it to say the goals were written at publish", msg)
	}
	if msg := evs.GetEvents()[0].GetMessage(); !strings.Contains(msg, "GLOBAL BLAST") {
		t.Errorf("started event %q; want it to say GLOBAL BLAST", msg)
	}
	g, err := cl.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: zones[0], Namespace: "blast/ns"})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.GetGoals()[0]; got.GetChecksum() != v2.GetChecksum() || got.GetCandidate() != nil || !strings.Contains(got.GetReason(), "blast/ns@2") {
		t.Errorf("goal %v; want version 2's checksum %s, no candidate, the rollout's reason", got, v2.GetChecksum())
	}

	// A patch and a rollback by an operator go as they went: the patch
	// is a new global blast superseding the rollout in flight; the
	// rollback every zone at once without a rollout.
	pr, err := cl.Patch(ctx, &lehrpb.PatchRequest{Namespace: "blast/ns", BaseVersion: v2.GetSeq(), Set: []*lehrpb.Property{prop("k", "", "3")}, Author: "alice", Message: "patch"})
	if err != nil {
		t.Fatal(err)
	}
	v3 := pr.GetVersion()
	if got, want := goalVersions(t, cl, "blast/ns", zones), all(v3.GetSeq(), len(zones)); !slices.Equal(got, want) {
		t.Fatalf("goals after the patch: %v, want %v", got, want)
	}
	old, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "blast/ns", Version: v2.GetSeq()})
	if err != nil || old.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED {
		t.Errorf("rollout of version 2 after the patch: %v, %v; want SUPERSEDED", old, err)
	}
	if got, want := eventKinds(t, cl, "blast/ns", v2.GetSeq()), []string{"started", "stage", rollout.PublishedEventKind, "superseded"}; !slices.Equal(got, want) {
		t.Errorf("events of version 2 %v, want %v", got, want)
	}
	r3, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "blast/ns", Version: v3.GetSeq()})
	if err != nil || r3.GetBaseVersion() != v1.GetSeq() || r3.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		t.Errorf("rollout of version 3: %v, %v; want running from the superseded one's base %d", r3, err, v1.GetSeq())
	}
	rb, err := cl.Rollback(ctx, &lehrpb.RollbackRequest{Namespace: "blast/ns", ToVersion: v1.GetSeq(), Author: "alice", Message: "back"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := goalVersions(t, cl, "blast/ns", zones), all(rb.GetVersion().GetSeq(), len(zones)); !slices.Equal(got, want) {
		t.Errorf("goals after the rollback: %v, want %v", got, want)
	}
	if _, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "blast/ns", Version: rb.GetVersion().GetSeq()}); status.Code(err) != codes.NotFound {
		t.Errorf("GetRollout of the operator's rollback: %v; want NOT_FOUND (it needs none, as before)", err)
	}
}

// Any other policy leaves the rollout to the strategist, as before: a
// staged policy, and a global blast while a freeze window is open or
// under max_concurrent (their waits are the strategist's).
func TestPublishLeavesOtherRolloutsToTheStrategist(t *testing.T) {
	ctx := testCtx(t)
	cl := controltest.StartControl(t, noStrategist()).Client
	createDomain(t, cl, "pay", nil)
	zones := blastZones(t, cl)
	frozen := &lehrpb.RolloutPolicy{GlobalBlast: true, FreezeWindows: []*lehrpb.FreezeWindow{{
		Start: timestamppb.New(time.Now().Add(-time.Minute)), End: timestamppb.New(time.Now().Add(time.Hour)), Reason: "launch"}}}
	for ns, p := range map[string]*lehrpb.RolloutPolicy{
		"pay/default": nil, // the built-in default: a canary first
		"pay/staged": {Stages: []*lehrpb.RolloutStage{{Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}},
			Bake: durationpb.New(time.Minute)}}},
		"pay/frozen":  frozen,
		"pay/limited": {GlobalBlast: true, MaxConcurrent: 1},
	} {
		v1 := publish(t, cl, ns, prop("k", "", "1"))
		if p != nil {
			setPolicy(t, cl, ns, p)
		}
		publish(t, cl, ns, prop("k", "", "2"))
		if got, want := goalVersions(t, cl, ns, zones), all(v1.GetSeq(), len(zones)); !slices.Equal(got, want) {
			t.Errorf("%s: goals after the publish %v, want %v (the strategist moves them)", ns, got, want)
		}
		if _, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: 2}); status.Code(err) != codes.NotFound {
			t.Errorf("%s: GetRollout: %v; want NOT_FOUND (the strategist starts it)", ns, err)
		}
	}
}

// Under the strategist, a global blast's rollout started at publish is
// stepped to its end as any other, and it supersedes a staged rollout in
// flight in its own transaction, which the strategist leaves superseded.
func TestGlobalBlastAtPublishUnderTheStrategist(t *testing.T) {
	ctx := testCtx(t)
	cl := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond}).Client
	createDomain(t, cl, "pay", nil)
	zones := blastZones(t, cl)
	// A first stage of zone-a that bakes an hour: version 2's rollout
	// stays in flight.
	setPolicy(t, cl, "pay", &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Name: "a", Bake: durationpb.New(time.Hour),
		Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-a"}}}}}})
	v1 := publish(t, cl, "pay/ns", prop("k", "", "1"))
	v2 := publish(t, cl, "pay/ns", prop("k", "", "2"))
	wait.For(t, "version 2's rollout baking its first stage", func() bool {
		r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "pay/ns", Version: v2.GetSeq()})
		return err == nil && r.GetStageAppliedTime() != nil
	})

	setPolicy(t, cl, "pay", rollout.GlobalBlast())
	v3 := publish(t, cl, "pay/ns", prop("k", "", "3"))
	if got, want := goalVersions(t, cl, "pay/ns", zones), all(v3.GetSeq(), len(zones)); !slices.Equal(got, want) {
		t.Fatalf("goals right after the publish: %v, want %v", got, want)
	}
	r2, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "pay/ns", Version: v2.GetSeq()})
	if err != nil || r2.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED {
		t.Fatalf("rollout of version 2 right after the publish: %v, %v; want SUPERSEDED", r2, err)
	}
	var r3 *lehrpb.Rollout
	wait.For(t, "version 3's rollout to succeed", func() bool {
		r3, err = cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "pay/ns", Version: v3.GetSeq()})
		return err == nil && r3.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED
	})
	if r3.GetBaseVersion() != v1.GetSeq() {
		t.Errorf("base of version 3's rollout %d, want %d (the superseded rollout's)", r3.GetBaseVersion(), v1.GetSeq())
	}
	// No distributor serves the zones: the stage skips them and passes.
	if got, want := eventKinds(t, cl, "pay/ns", v3.GetSeq()), []string{"started", "stage", rollout.PublishedEventKind, "skipped", "applied", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("events of version 3 %v, want %v", got, want)
	}
	// Some rounds later the superseded rollout is still superseded, its
	// log ending there.
	time.Sleep(200 * time.Millisecond)
	r2, err = cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "pay/ns", Version: v2.GetSeq()})
	if err != nil || r2.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED {
		t.Errorf("rollout of version 2: %v, %v; want SUPERSEDED", r2, err)
	}
	if got := eventKinds(t, cl, "pay/ns", v2.GetSeq()); len(got) == 0 || got[len(got)-1] != "superseded" {
		t.Errorf("events of version 2 %v; want the last to be superseded", got)
	}
	if got, want := goalVersions(t, cl, "pay/ns", zones), all(v3.GetSeq(), len(zones)); !slices.Equal(got, want) {
		t.Errorf("goals at the end: %v, want %v", got, want)
	}
}
