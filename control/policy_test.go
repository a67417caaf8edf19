package control_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Rollout policies through the API: set, read back with where the
// effective one comes from, delete, history — and every bad policy
// refused with the field at fault, storing nothing.
func TestRolloutPolicyAPI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "pay", nil)
	publish(t, cl, "pay/limits", prop("a", "", "1"))
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(scope string) *lehrpb.GetRolloutPolicyResponse {
		t.Helper()
		r, err := cl.GetRolloutPolicy(ctx, &lehrpb.GetRolloutPolicyRequest{Scope: scope})
		if err != nil {
			t.Fatalf("GetRolloutPolicy(%s): %v", scope, err)
		}
		return r
	}

	// Nothing set: the built-in default.
	if r := get("pay/limits"); r.GetSource() != lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_BUILT_IN ||
		!proto.Equal(r.GetEffective(), rollout.Default()) || r.GetStored() != nil {
		t.Errorf("before any policy: %v; want the built-in default, nothing stored", r)
	}

	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Zones: []string{"zone-b"}, Percent: 5}}, Bake: durationpb.New(time.Minute)},
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}},
	}}
	rec, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "pay", Policy: staged, Message: "slower", Author: "ann"})
	if err != nil || rec.GetGeneration() != 1 || rec.GetAuthor() != "ann" || rec.GetMessage() != "slower" {
		t.Fatalf("SetRolloutPolicy(pay): %v, %v", rec, err)
	}
	if r := get("pay/limits"); r.GetSource() != lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN || !proto.Equal(r.GetEffective(), staged) {
		t.Errorf("namespace under a domain policy: %v; want the domain's", r)
	}
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "pay/limits", Policy: rollout.GlobalBlast(), Message: "incident 42"}); err != nil {
		t.Fatal(err)
	}
	if r := get("pay/limits"); r.GetSource() != lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE || !r.GetEffective().GetGlobalBlast() || r.GetStored().GetGeneration() != 1 {
		t.Errorf("namespace override: %v; want the namespace's global blast", r)
	}
	del, err := cl.DeleteRolloutPolicy(ctx, &lehrpb.DeleteRolloutPolicyRequest{Scope: "pay/limits", Message: "incident over"})
	if err != nil || !del.GetDeleted() || del.GetGeneration() != 2 {
		t.Fatalf("DeleteRolloutPolicy: %v, %v", del, err)
	}
	if again, err := cl.DeleteRolloutPolicy(ctx, &lehrpb.DeleteRolloutPolicyRequest{Scope: "pay/limits"}); err != nil || again.GetGeneration() != 2 {
		t.Errorf("deleting again: %v, %v; want the deletion record (a retry is harmless)", again, err)
	}
	if r := get("pay/limits"); r.GetSource() != lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN || r.GetStored() != nil {
		t.Errorf("after delete: %v; want the domain's policy again", r)
	}
	hist, err := cl.RolloutPolicyHistory(ctx, &lehrpb.RolloutPolicyHistoryRequest{Scope: "pay/limits"})
	if err != nil || len(hist.GetRecords()) != 2 || hist.GetRecords()[0].GetMessage() != "incident over" || hist.GetRecords()[1].GetMessage() != "incident 42" {
		t.Errorf("history: %v, %v; want the deletion then the global blast", hist, err)
	}

	// Bad requests change nothing.
	set := func(scope string, p *lehrpb.RolloutPolicy, gen uint64) error {
		_, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: scope, Policy: p, ExpectedGeneration: gen})
		return err
	}
	stage := func(mod func(*lehrpb.RolloutStage)) *lehrpb.RolloutPolicy {
		st := &lehrpb.RolloutStage{Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}}
		mod(st)
		return &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{st}}
	}
	tests := []struct {
		name  string
		err   error
		code  codes.Code
		field string
		msg   string
	}{
		{"empty stages", set("pay", &lehrpb.RolloutPolicy{}, 0), codes.InvalidArgument, "policy.stages", "at least one stage"},
		{"unknown zone", set("pay", &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-x"}}}}}}, 0),
			codes.InvalidArgument, "policy.stages[0].zones.zones[0]", "not registered"},
		{"negative bake", set("pay", stage(func(s *lehrpb.RolloutStage) { s.Bake = durationpb.New(-time.Minute) }), 0), codes.InvalidArgument, "policy.stages[0].bake", "-1m0s"},
		{"percent over 100", set("pay", stage(func(s *lehrpb.RolloutStage) {
			s.Target = &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Percent: 120}}
		}), 0), codes.InvalidArgument, "policy.stages[0].canary.percent", "at most 100"},
		{"no scope", set("", staged, 0), codes.InvalidArgument, "scope", "required"},
		{"bad scope", set("Pay Ments", staged, 0), codes.InvalidArgument, "scope", ""},
		{"unknown domain", set("nodomain", staged, 0), codes.NotFound, "scope", "lehr domain create nodomain"},
		{"unknown namespace", set("pay/nons", staged, 0), codes.NotFound, "scope", "does not exist"},
		{"stale generation", set("pay", rollout.GlobalBlast(), 9), codes.FailedPrecondition, "expected_generation", "generation 1, not 9"},
		// This control has no --alerts-url: a monitoring check could never
		// be checked.
		{"alerts without a source", set("pay", &lehrpb.RolloutPolicy{Stages: staged.GetStages(),
			Monitoring: &lehrpb.MonitoringCheck{Alerts: []*lehrpb.AlertSelector{{Alert: "HighErrorRate"}}}}, 0),
			codes.InvalidArgument, "policy.monitoring", "start it with --alerts-url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatalf("accepted; want %v on %s", tc.code, tc.field)
			}
			e := apierror.FromError(tc.err)
			if e.Code != tc.code || e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("got %v on %q: %q; want %v on %q containing %q", e.Code, e.Field, e.Message, tc.code, tc.field, tc.msg)
			}
		})
	}
	if r := get("pay"); r.GetStored().GetGeneration() != 1 || !proto.Equal(r.GetEffective(), staged) {
		t.Errorf("after the bad requests the domain's policy is %v; want generation 1 unchanged", r)
	}
}

// Dependency order through the API: a namespace's policy may name others
// in after; a domain's may not, nor a namespace itself, nor a cycle
// through the others' policies (named in the error); a refusal stores
// nothing.
func TestRolloutPolicyAfter(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "pay", nil)
	for _, ns := range []string{"pay/limits", "pay/flags", "pay/keys", "pay/other"} {
		publish(t, cl, ns, prop("a", "", "1"))
	}
	after := func(ns ...string) *lehrpb.RolloutPolicy { return &lehrpb.RolloutPolicy{GlobalBlast: true, After: ns} }
	set := func(scope string, p *lehrpb.RolloutPolicy) error {
		_, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: scope, Policy: p, Message: "order"})
		return err
	}
	for scope, p := range map[string]*lehrpb.RolloutPolicy{"pay/limits": after("pay/flags"), "pay/flags": after("pay/keys", "search/ranking")} {
		if err := set(scope, p); err != nil {
			t.Fatalf("SetRolloutPolicy(%s after %v): %v", scope, p.GetAfter(), err)
		}
	}
	for _, tc := range []struct {
		scope string
		p     *lehrpb.RolloutPolicy
		field string
		want  string
	}{
		{"pay/keys", after("pay/limits"), "policy.after[0]", "a cycle: pay/keys → pay/limits → pay/flags → pay/keys"},
		{"pay/keys", after("pay/other", "pay/flags"), "policy.after[1]", "a cycle: pay/keys → pay/flags → pay/keys"},
		{"pay/keys", after("pay/keys"), "policy.after[0]", "cannot roll out after itself"},
		{"pay", after("pay/flags"), "policy.after", "only a namespace's own policy"},
		{"pay/keys", after("nodomain"), "policy.after[0]", "domain/name"},
	} {
		err := set(tc.scope, tc.p)
		if e := apierror.FromError(err); err == nil || e.Code != codes.InvalidArgument || e.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetRolloutPolicy(%s after %v) = %v; want INVALID_ARGUMENT on %s saying %q", tc.scope, tc.p.GetAfter(), err, tc.field, tc.want)
		}
	}
	if r, err := cl.GetRolloutPolicy(ctx, &lehrpb.GetRolloutPolicyRequest{Scope: "pay/keys"}); err != nil || r.GetStored() != nil {
		t.Errorf("pay/keys after the refusals: %v, %v; want no policy of its own", r, err)
	}
	// Breaking the chain makes the same policy acceptable.
	if _, err := cl.DeleteRolloutPolicy(ctx, &lehrpb.DeleteRolloutPolicyRequest{Scope: "pay/flags"}); err != nil {
		t.Fatal(err)
	}
	if err := set("pay/keys", after("pay/limits")); err != nil {
		t.Errorf("pay/keys after pay/limits once pay/flags names nothing: %v", err)
	}
}
