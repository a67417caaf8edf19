package strategist

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Dependency order end to end on etcd: pay/limits' policy names pay/flags
// in after. Published together, the two roll out zone by zone with
// pay/limits' goal in a zone never ahead of pay/flags' there; an
// operator's rollback of pay/flags holds pay/limits' next stage, saying
// why, until pay/flags rolls forward.
func TestAfterOrdersTwoNamespacesThroughEveryStage(t *testing.T) {
	stages := []*lehrpb.RolloutStage{
		{Name: "y", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"y"}}}, Bake: durationpb.New(10 * time.Minute)},
		{Name: "z", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"z"}}}, Bake: durationpb.New(10 * time.Minute)},
	}
	slowStages := []*lehrpb.RolloutStage{
		{Name: "y", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"y"}}}, Bake: durationpb.New(20 * time.Minute)},
		{Name: "z", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"z"}}}, Bake: durationpb.New(20 * time.Minute)},
	}
	const flags, limits = "pay/flags", "pay/limits"
	r := newStrategistRig(t, nil, "y", "z")
	r.s.opts.Policy = func(_ context.Context, ns string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
		p := &lehrpb.RolloutPolicy{Stages: stages}
		if ns == limits {
			p.After = []string{flags}
		} else {
			// flags bakes longer: limits catches up and waits.
			p = &lehrpb.RolloutPolicy{Stages: slowStages}
		}
		return p, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, 1, nil
	}
	mustDomain(r)
	r.commit(flags, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	r.commit(limits, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)

	// content returns the content version of flags' goal in zone.
	content := func(zone string) uint64 {
		t.Helper()
		c, err := r.s.contentOf(r.ctx, flags, r.goal(zone, flags))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// run steps rounds a minute apart until limits' rollout of v ends or
	// rounds pass, checking after each that limits' goal moved to v in a
	// zone only where flags' goal held what it requires, and returns the
	// reasons limits' rollout gave.
	run := func(v uint64, need uint64, rounds int) []string {
		t.Helper()
		var reasons []string
		for range rounds {
			before := map[string]uint64{"y": r.goal("y", limits), "z": r.goal("z", limits)}
			r.round()
			for _, z := range []string{"y", "z"} {
				if before[z] < v && r.goal(z, limits) >= v && content(z) < need {
					t.Fatalf("zone %s: %s's goal moved to %d while %s's goal there holds version %d's content; %s requires %d's first",
						z, limits, r.goal(z, limits), flags, content(z), limits, need)
				}
			}
			ro := r.rollout(limits, v)
			reasons = append(reasons, ro.GetReason())
			if ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
				break
			}
			r.clock.advance(time.Minute)
		}
		return reasons
	}

	// Published together: flags first, limits right after.
	f2 := r.commit(flags, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	l2 := r.commit(limits, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	reasons := run(l2.GetSeq(), f2.GetSeq(), 60)
	if ro := r.rollout(limits, l2.GetSeq()); ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Fatalf("%s's rollout of %d after an hour: %v (%s); want SUCCEEDED", limits, l2.GetSeq(), ro.GetState(), ro.GetReason())
	}
	if req := r.rollout(limits, l2.GetSeq()).GetRequires(); len(req) != 1 || req[0].GetNamespace() != flags || req[0].GetVersion() != f2.GetSeq() {
		t.Errorf("the rollout's requirements: %v; want %s at %d", req, flags, f2.GetSeq())
	}
	// flags entered y in the same round (its rollout decided first), and
	// bakes twice as long: limits waits for it at z.
	if !containsAny(reasons, `stage "y" passed; stage "z" waits for pay/flags to reach z with version 2's content or newer`) {
		t.Errorf("limits' reasons never said it waited for flags in z: %q", reasons)
	}

	// Again, and flags is rolled back by an operator once limits is in y:
	// version 5 republishes 2's content everywhere. limits' next stage
	// holds, saying so, until flags rolls forward with version 6.
	f3 := r.commit(flags, "3", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	l3 := r.commit(limits, "3", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	for i := 0; r.goal("y", limits) != l3.GetSeq(); i++ {
		if i == 30 {
			t.Fatalf("%s never reached zone y: %s", limits, r.rollout(limits, l3.GetSeq()).GetReason())
		}
		run(l3.GetSeq(), f3.GetSeq(), 1)
	}
	rb := r.commitRollback(flags, "2", f2.GetSeq())
	reasons = run(l3.GetSeq(), f3.GetSeq(), 40)
	ro := r.rollout(limits, l3.GetSeq())
	if ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING || r.goal("z", limits) == l3.GetSeq() {
		t.Fatalf("after flags' rollback to %d (version %d): limits' rollout %v, its goal in z %d; want it held before z", f2.GetSeq(), rb.GetSeq(), ro.GetState(), r.goal("z", limits))
	}
	if want := "a rollback republishing version 2's content"; !strings.Contains(ro.GetReason(), want) {
		t.Errorf("limits' reason while held: %q; want it to say %q", ro.GetReason(), want)
	}
	f6 := r.commit(flags, "6", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	run(l3.GetSeq(), f3.GetSeq(), 60)
	if ro := r.rollout(limits, l3.GetSeq()); ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED || content("z") != f6.GetSeq() {
		t.Fatalf("after flags rolled forward to %d: limits' rollout %v (%s), flags' content in z %d; want SUCCEEDED behind it", f6.GetSeq(), ro.GetState(), ro.GetReason(), content("z"))
	}
}

func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// commitRollback commits value v to ns as an operator's rollback to
// version of, to every zone at once.
func (r *strategistRig) commitRollback(ns, v string, of uint64) *lehrpb.VersionInfo {
	r.t.Helper()
	snap, err := content.New([]content.Property{{Key: "k", ContentType: "text/plain", Value: []byte(v)}})
	if err != nil {
		r.t.Fatal(err)
	}
	h, err := r.st.GetNamespace(r.ctx, ns)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := r.st.Commit(r.ctx, store.Commit{Namespace: ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		ExpectedLatest: h.GetLatestVersion(), Content: snap, Goals: store.GoalsAllZones,
		Info: &lehrpb.VersionInfo{Author: "alice", Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: of}})
	if err != nil {
		r.t.Fatalf("roll %s back to %d: %v", ns, of, err)
	}
	return info
}
