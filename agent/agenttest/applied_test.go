package agenttest

import (
	"slices"
	"testing"
)

// TestAppliedFrom: a follower gets exactly the records after the ones it
// has seen, in order, and a copy it may keep.
func TestAppliedFrom(t *testing.T) {
	a := &Agent{applied: []Applied{{Namespace: "d/a", Version: 1}, {Namespace: "d/b", Version: 1}, {Namespace: "d/a", Version: 2}}}
	versions := func(recs []Applied) []uint64 {
		var v []uint64
		for _, r := range recs {
			v = append(v, r.Version)
		}
		return v
	}
	for _, tc := range []struct {
		from int
		want []uint64
	}{
		{-1, []uint64{1, 1, 2}},
		{0, []uint64{1, 1, 2}},
		{2, []uint64{2}},
		{3, nil},
		{7, nil},
	} {
		if got := versions(a.AppliedFrom(tc.from)); !slices.Equal(got, tc.want) {
			t.Errorf("AppliedFrom(%d) versions = %v, want %v", tc.from, got, tc.want)
		}
	}
	got := a.AppliedFrom(2)
	got[0].Version = 99
	if a.applied[2].Version != 2 {
		t.Fatal("AppliedFrom returned the agent's own records, not a copy")
	}
}
