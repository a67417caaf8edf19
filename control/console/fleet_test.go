package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// zoneProblems finds each kind of trouble in a zone's status, once, with
// the zone, namespace and host it concerns.
func TestZoneProblems(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	reporting := []*lehrpb.DistributorStatus{{DistributorId: "d", Agents: 3}}
	for _, tc := range []struct {
		name   string
		zone   *lehrpb.Zone
		status *lehrpb.GetZoneStatusResponse
		goals  map[string]*lehrpb.GoalState
		want   []problem // What compared by a fragment
	}{
		{"healthy", &lehrpb.Zone{Name: "z"}, &lehrpb.GetZoneStatusResponse{Distributors: reporting,
			Versions: []*lehrpb.VersionCount{{Namespace: "a/b", Version: 2, Agents: 3}}},
			map[string]*lehrpb.GoalState{"a/b": {Namespace: "a/b", Version: 2}}, nil},
		{"silent", &lehrpb.Zone{Name: "z", LastReportTime: timestamppb.New(now.Add(-time.Hour))}, &lehrpb.GetZoneStatusResponse{}, nil,
			[]problem{{Zone: "z", Kind: "silent zone", What: "the last 1h"}}},
		{"behind", &lehrpb.Zone{Name: "z"}, &lehrpb.GetZoneStatusResponse{Distributors: reporting,
			Versions: []*lehrpb.VersionCount{{Namespace: "a/b", Version: 1, Agents: 2}, {Namespace: "a/b", Version: 2, Agents: 1}}},
			map[string]*lehrpb.GoalState{"a/b": {Namespace: "a/b", Version: 2}},
			[]problem{{Zone: "z", Kind: "behind goal", Namespace: "a/b", What: "2 agent(s) hold version 1; the zone's goal is 2"}}},
		{"cache quarantined", &lehrpb.Zone{Name: "z"}, &lehrpb.GetZoneStatusResponse{Distributors: reporting,
			CacheQuarantines: []*lehrpb.CacheQuarantine{{HostId: "h1", QuarantineTime: timestamppb.New(now.Add(-5 * time.Minute))}}}, nil,
			[]problem{{Zone: "z", Kind: "cache quarantined", Host: "h1", What: "5m0s ago its agent found its cache unopenable"}}},
		{"consumers", &lehrpb.Zone{Name: "z"}, &lehrpb.GetZoneStatusResponse{Distributors: reporting,
			Health: []*lehrpb.NamespaceHealth{{Namespace: "a/b", Version: 2, Consumers: 4, ConsumersRejected: 1, LeasesExpired: 2}}}, nil,
			[]problem{{Zone: "z", Kind: "consumers rejecting", Namespace: "a/b", What: "1 of 4 consumer(s) rejected version 2"},
				{Zone: "z", Kind: "leases lapsed", Namespace: "a/b", What: "2 consumer lease(s) lapsed"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := zoneView{Zone: tc.zone, Status: tc.status, Goals: tc.goals}
			got := zoneProblems(&v, now)
			if len(got) != len(tc.want) {
				t.Fatalf("zoneProblems = %+v; want %d problem(s) like %+v", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Zone != w.Zone || g.Kind != w.Kind || g.Namespace != w.Namespace || g.Host != w.Host || !strings.Contains(g.What, w.What) {
					t.Errorf("problem %d = %+v; want %+v", i, g, w)
				}
			}
		})
	}
}
