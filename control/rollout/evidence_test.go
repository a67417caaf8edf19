package rollout

import (
	"errors"
	"slices"
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

// Gather reads the distributors' zone status as each kind of stage
// needs: a whole zone counts its distributors' version counts, a canary of
// named hosts exactly those hosts' own reports, a cohort share the health
// summaries of the rollout's candidate — and names who reported what.
func TestGather(t *testing.T) {
	const v = 2
	report := func(host string, version uint64, cohort bool) *lehrpb.HostReport {
		return &lehrpb.HostReport{HostId: host, Cohort: cohort, Report: &lehrpb.NamespaceReport{Namespace: ns, Version: version}}
	}
	whole := &lehrpb.RolloutPolicy{GlobalBlast: true}
	canary := canaryThenAll(nil)
	share := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "half", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Percent: 50}}, ApplyDeadline: dur(60e9)},
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}},
	}}
	for _, tc := range []struct {
		name     string
		policy   *lehrpb.RolloutPolicy
		named    []string // the zone's canary hosts, recorded on the rollout
		status   []*lehrpb.DistributorStatus
		applied  int
		pending  []string // pending hosts named
		heldBy   []string
		behindBy []string
		stale    bool
	}{
		{name: "whole zone", policy: whole, status: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 4, Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: v, Agents: 3}, {Namespace: ns, Version: 1, Agents: 1}},
				Hosts: []*lehrpb.HostReport{report("h4", 1, false)}},
		}, applied: 3, pending: []string{"h4"}, heldBy: []string{"a/d1"}, behindBy: []string{"a/d1"}},
		{name: "named canary hosts", policy: canary, named: []string{"h1", "h2"}, status: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 3, Hosts: []*lehrpb.HostReport{report("h1", v, true), report("h3", 1, false)}},
			{DistributorId: "d2", Agents: 2, Hosts: []*lehrpb.HostReport{report("h2", 1, true)}},
		}, applied: 1, pending: []string{"h2"}, heldBy: []string{"a/d1"}, behindBy: []string{"a/d2"}},
		{name: "a named host not reporting yet is pending", policy: canary, named: []string{"h1"}, status: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 3},
		}, applied: 0, pending: []string{"h1"}},
		{name: "cohort share", policy: share, status: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 4, Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 1, Agents: 4}},
				Health: []*lehrpb.NamespaceHealth{
					{Namespace: ns, Version: v, Cohort: true, Agents: 1, Candidate: v},
					{Namespace: ns, Version: 1, Cohort: true, Agents: 1, Candidate: v},
					{Namespace: ns, Version: 1, Cohort: false, Agents: 2, Candidate: v}, // outside the cohort: not waited for
				},
				Hosts: []*lehrpb.HostReport{report("h2", 1, true), report("h3", 1, false)}},
		}, applied: 1, pending: []string{"h2"}, heldBy: []string{"a/d1"}, behindBy: []string{"a/d1"}},
		{name: "a summary older than the candidate is not evidence", policy: share, status: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 2, Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 1, Agents: 2}},
				Health: []*lehrpb.NamespaceHealth{{Namespace: ns, Version: 1, Cohort: true, Agents: 1}}},
		}, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &lehrpb.Rollout{Id: ns + "@2", Namespace: ns, Version: v, Policy: tc.policy, Salt: "s"}
			if tc.named != nil {
				r.CanaryHosts = []*lehrpb.ZoneHosts{{Zone: "a", Hosts: tc.named}}
			}
			stages := Resolve(tc.policy, []string{"a"})
			read := 0
			ev, err := Gather(r, stages, nil, func(z string) ([]*lehrpb.DistributorStatus, error) {
				read++
				if z != "a" {
					t.Errorf("read the status of zone %q, which the stage does not reach", z)
				}
				return tc.status, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if read != 1 {
				t.Errorf("read %d zone statuses, want 1", read)
			}
			var pending []string
			for _, z := range ev.zones {
				pending = append(pending, z.pendingHosts...)
			}
			if ev.applied != tc.applied || ev.pending != len(tc.pending) || !slices.Equal(pending, tc.pending) {
				t.Errorf("applied %d, pending %d %v; want %d, %d %v", ev.applied, ev.pending, pending, tc.applied, len(tc.pending), tc.pending)
			}
			if got := ev.heldBy.names(); !slices.Equal(got, tc.heldBy) {
				t.Errorf("held by %v, want %v", got, tc.heldBy)
			}
			if got := ev.behindBy.names(); !slices.Equal(got, tc.behindBy) {
				t.Errorf("behind by %v, want %v", got, tc.behindBy)
			}
			if got := slices.Contains(ev.stale, "a"); got != tc.stale {
				t.Errorf("zone a stale = %v, want %v", got, tc.stale)
			}
		})
	}
}

func TestGatherPassesOnTheReadersError(t *testing.T) {
	boom := errors.New("etcd unavailable")
	r := &lehrpb.Rollout{Id: ns + "@2", Namespace: ns, Version: 2, Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}}
	if _, err := Gather(r, Resolve(r.GetPolicy(), []string{"a"}), nil, func(string) ([]*lehrpb.DistributorStatus, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Gather = %v, want the reader's error", err)
	}
}
