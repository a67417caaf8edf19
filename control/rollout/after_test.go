package rollout

import (
	"errors"
	"strings"
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestContentOf(t *testing.T) {
	rb := func(seq, of uint64) *lehrpb.VersionInfo {
		return &lehrpb.VersionInfo{Seq: seq, Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: of}
	}
	versions := map[uint64]*lehrpb.VersionInfo{
		3:  {Seq: 3, Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT},
		4:  {Seq: 4, Source: lehrpb.VersionSource_VERSION_SOURCE_PATCH},
		5:  rb(5, 3),  // a rollback to 3
		6:  rb(6, 5),  // a rollback to 5, itself 3's content
		8:  rb(8, 7),  // a rollback to 7, which history compaction removed
		9:  rb(9, 9),  // malformed: not older
		10: rb(10, 0), // a rollback recorded without what it republished
	}
	info := func(v uint64) (*lehrpb.VersionInfo, error) { return versions[v], nil }
	for _, tc := range []struct{ v, want uint64 }{{0, 0}, {3, 3}, {4, 4}, {5, 3}, {6, 3}, {8, 7}, {9, 9}, {10, 10}} {
		if got, err := ContentOf(tc.v, info); err != nil || got != tc.want {
			t.Errorf("ContentOf(%d) = %d, %v; want %d", tc.v, got, err, tc.want)
		}
	}
	boom := errors.New("etcd down")
	if _, err := ContentOf(5, func(uint64) (*lehrpb.VersionInfo, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("ContentOf with a failing read = %v, want its error", err)
	}
	// A lineage longer than MaxLineage stops there instead of looping.
	long := func(v uint64) (*lehrpb.VersionInfo, error) { return rb(v, v-1), nil }
	if got, err := ContentOf(1000, long); err != nil || got != 1000-MaxLineage {
		t.Errorf("ContentOf along a long lineage = %d, %v; want %d", got, err, 1000-MaxLineage)
	}
}

func TestUnmet(t *testing.T) {
	r := &lehrpb.Rollout{Requires: []*lehrpb.RolloutRequirement{{Namespace: "pay/flags", Version: 6}, {Namespace: "pay/keys", Version: 2}}}
	stage := Stage{Name: "b only", Targets: []Target{{Zone: "b", Percent: 100}}}
	at := func(zs map[string]ZoneContent) []Reached {
		return []Reached{{Namespace: "pay/flags", Zones: zs}, {Namespace: "pay/keys", Zones: map[string]ZoneContent{"a": {2, 2}, "b": {3, 3}}}}
	}
	for _, tc := range []struct {
		name    string
		r       *lehrpb.Rollout
		reached []Reached
		want    string
	}{
		{"nothing required", &lehrpb.Rollout{}, nil, ""},
		{"met where the stage goes", r, at(map[string]ZoneContent{"a": {5, 5}, "b": {6, 6}}), ""},
		{"newer content", r, at(map[string]ZoneContent{"b": {9, 9}}), ""},
		{"behind", r, at(map[string]ZoneContent{"a": {6, 6}, "b": {5, 5}}), "waits for pay/flags to reach b with version 6's content or newer (its goal there is version 5)"},
		{"rolled back", r, at(map[string]ZoneContent{"b": {7, 5}}), "its goal there is version 7, a rollback republishing version 5's content"},
		{"no goal", r, at(map[string]ZoneContent{"a": {6, 6}}), "(it has no goal there yet)"},
		{"not read", r, nil, "waits for pay/flags to reach b"},
	} {
		got := Unmet(tc.r, stage, tc.reached)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Unmet = %q, want %q", tc.name, got, tc.want)
		}
	}
}
