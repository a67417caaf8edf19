package rollout

import (
	"testing"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestZoneEmpty(t *testing.T) {
	for _, tc := range []struct {
		z    *zoneEvidence
		want string
	}{
		{nil, "no distributor has reported for it"},
		{&zoneEvidence{zone: "b"}, "no distributor has reported for it"},
		{&zoneEvidence{zone: "b", distributors: 2}, "its distributors serve no hosts"},
		{&zoneEvidence{zone: "b", distributors: 1, agents: 3}, ""},
		// Reported once, silent now: not empty, waited for.
		{&zoneEvidence{zone: "b", lastReport: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}, ""},
	} {
		if got := tc.z.empty(); got != tc.want {
			t.Errorf("%+v.empty() = %q, want %q", tc.z, got, tc.want)
		}
	}
}

// The reasons name the zones with pending hosts, a few hosts each, then
// counts; with nothing pending, the zones whose hosts applied.
func TestDescribeZones(t *testing.T) {
	many := []string{"h1", "h2", "h3", "h4", "h5", "h6"}
	for _, tc := range []struct {
		name  string
		zones []*zoneEvidence
		want  string
	}{
		{"nothing reached", nil, ""},
		{"no host anywhere", []*zoneEvidence{{zone: "a"}, {zone: "b"}}, ""},
		{"pending, named", []*zoneEvidence{{zone: "a", applied: 3}, {zone: "b", pending: 2, pendingHosts: []string{"h1", "h2"}}},
			"zone b: 0 of 2 host(s) hold version 7 (pending: b/h1, b/h2)"},
		{"more pending than named", []*zoneEvidence{{zone: "b", applied: 1, pending: 9, pendingHosts: many}},
			"zone b: 1 of 10 host(s) hold version 7 (pending: b/h1, b/h2, b/h3, b/h4, b/h5 and 4 more)"},
		{"pending, unnamed", []*zoneEvidence{{zone: "b", pending: 2}},
			"zone b: 0 of 2 host(s) hold version 7 (2 pending, not named in its distributors' reports yet)"},
		{"none pending: the applied zones", []*zoneEvidence{{zone: "a", applied: 1}, {zone: "b"}, {zone: "c", applied: 2}},
			"zone a: 1 of 1 host(s) hold version 7; zone c: 2 of 2 host(s) hold version 7"},
		{"many zones", []*zoneEvidence{{zone: "a", pending: 1}, {zone: "b", pending: 1}, {zone: "c", pending: 1}, {zone: "d", pending: 1}, {zone: "e", pending: 1}, {zone: "f", pending: 1}, {zone: "g", pending: 1}},
			"zone a: 0 of 1 host(s) hold version 7 (1 pending, not named in its distributors' reports yet); " +
				"zone b: 0 of 1 host(s) hold version 7 (1 pending, not named in its distributors' reports yet); " +
				"zone c: 0 of 1 host(s) hold version 7 (1 pending, not named in its distributors' reports yet); " +
				"zone d: 0 of 1 host(s) hold version 7 (1 pending, not named in its distributors' reports yet); " +
				"zone e: 0 of 1 host(s) hold version 7 (1 pending, not named in its distributors' reports yet); and 2 more zone(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeZones(tc.zones, 7); got != tc.want {
				t.Errorf("describeZones\ngot  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestSkippedZones(t *testing.T) {
	zones := map[string]*zoneEvidence{
		"a": {zone: "a", distributors: 1, agents: 4},
		"b": {zone: "b"},
		"c": {zone: "c", distributors: 1},
	}
	got := skippedZones(zones, []string{"a", "b", "c", "d"})
	want := []string{"zone b: no distributor has reported for it", "zone c: its distributors serve no hosts", "zone d: no distributor has reported for it"}
	if len(got) != len(want) {
		t.Fatalf("skippedZones = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("skippedZones[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestWaitNotes(t *testing.T) {
	if got, want := nameSome([]string{"a/1", "a/2"}, 2), "a/1, a/2"; got != want {
		t.Errorf("nameSome = %q, want %q", got, want)
	}
	if got, want := nameSome([]string{"a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "a/7"}, 9), "a/1, a/2, a/3, a/4, a/5 and 4 more"; got != want {
		t.Errorf("nameSome = %q, want %q", got, want)
	}
	at := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	if got, want := unreported([]string{"a", "b"}, map[string]int{"a": 2}, at), "; b: no distributor reports, skipped at 12:00:30 UTC unless one reports"; got != want {
		t.Errorf("unreported = %q, want %q", got, want)
	}
	if got := unreported([]string{"a"}, map[string]int{"a": 1}, at); got != "" {
		t.Errorf("unreported with every zone reporting = %q, want \"\"", got)
	}
	for _, tc := range []struct {
		deadline, want time.Duration
	}{{10 * time.Minute, EmptyZoneWait}, {5 * time.Second, 2500 * time.Millisecond}} {
		if got := emptyZoneWait(Stage{ApplyDeadline: tc.deadline}); got != tc.want {
			t.Errorf("emptyZoneWait with apply deadline %v = %v, want %v", tc.deadline, got, tc.want)
		}
	}
	r := &lehrpb.Rollout{CanaryHosts: []*lehrpb.ZoneHosts{{Zone: "a", Hosts: []string{"h1"}}, {Zone: "b"}, {Zone: "c", Hosts: []string{"h4"}}}}
	if got, want := canaryNote(r), " (canary hosts: a/h1, c/h4)"; got != want {
		t.Errorf("canaryNote = %q, want %q", got, want)
	}
	if got := canaryNote(&lehrpb.Rollout{}); got != "" {
		t.Errorf("canaryNote without canaries = %q, want \"\"", got)
	}
}
