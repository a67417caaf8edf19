package rollout_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestResolve(t *testing.T) {
	zs := []string{"zone-c", "zone-a", "zone-b"}
	dl := rollout.DefaultApplyDeadline
	tests := []struct {
		name string
		p    *lehrpb.RolloutPolicy
		want []rollout.Stage
	}{
		{"default: a canary per zone, the first zone, the rest", rollout.Default(), []rollout.Stage{
			{Name: "canary", Canary: true, Bake: 10 * time.Minute, ApplyDeadline: dl, MinHostsApplied: 1, Analysis: &lehrpb.CanaryAnalysis{}, Targets: []rollout.Target{
				{Zone: "zone-a", Hosts: 1}, {Zone: "zone-b", Hosts: 1}, {Zone: "zone-c", Hosts: 1}}},
			{Name: "first zone", Bake: 30 * time.Minute, ApplyDeadline: dl, Targets: []rollout.Target{{Zone: "zone-a", Percent: 100}}},
			{Name: "rest", ApplyDeadline: dl, Targets: []rollout.Target{{Zone: "zone-b", Percent: 100}, {Zone: "zone-c", Percent: 100}}},
		}},
		{"global blast", rollout.GlobalBlast(), []rollout.Stage{
			{Name: rollout.GlobalBlastStage, ApplyDeadline: dl, Targets: []rollout.Target{
				{Zone: "zone-a", Percent: 100}, {Zone: "zone-b", Percent: 100}, {Zone: "zone-c", Percent: 100}}},
		}},
		{"zones a policy leaves are reached at the end", policy(
			canary(&lehrpb.CanaryTarget{Zones: []string{"zone-b"}, Percent: 5}),
			zones(&lehrpb.ZonesTarget{Zones: []string{"zone-b"}, Percent: 50}),
		), []rollout.Stage{
			{Name: "stage 1", Canary: true, ApplyDeadline: dl, MinHostsApplied: 1, Analysis: &lehrpb.CanaryAnalysis{}, Targets: []rollout.Target{{Zone: "zone-b", Percent: 5}}},
			{Name: "stage 2", ApplyDeadline: dl, Targets: []rollout.Target{{Zone: "zone-b", Percent: 50}}},
			{Name: rollout.RestStage, ApplyDeadline: dl, Targets: []rollout.Target{
				{Zone: "zone-a", Percent: 100}, {Zone: "zone-b", Percent: 100}, {Zone: "zone-c", Percent: 100}}},
		}},
		{"a canary stage without analysis", policy(
			&lehrpb.RolloutStage{Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}, Analysis: &lehrpb.CanaryAnalysis{Disabled: true}},
		), []rollout.Stage{
			{Name: "stage 1", Canary: true, ApplyDeadline: dl, MinHostsApplied: 1, Targets: []rollout.Target{
				{Zone: "zone-a", Hosts: 1}, {Zone: "zone-b", Hosts: 1}, {Zone: "zone-c", Hosts: 1}}},
			{Name: rollout.RestStage, ApplyDeadline: dl, Targets: []rollout.Target{
				{Zone: "zone-a", Percent: 100}, {Zone: "zone-b", Percent: 100}, {Zone: "zone-c", Percent: 100}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := rollout.Validate("policy", tc.p, rollout.Fleet{Zones: zs}); err != nil {
				t.Fatalf("the policy is not valid: %v", err)
			}
			if diff := cmp.Diff(tc.want, rollout.Resolve(tc.p, zs), protocmp.Transform()); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
		})
	}
}
