package service

import "testing"

func TestAdmitsZone(t *testing.T) {
	for _, tc := range []struct {
		readers []string
		zone    string
		want    bool
	}{
		{nil, "zone-a", true},
		{[]string{"zone-a"}, "zone-a", true},
		{[]string{"zone-b"}, "zone-a", false},
		{[]string{"zone-b", "zone-a/web-1"}, "zone-a", true},
		{[]string{"zone-ab"}, "zone-a", false},
		{[]string{"zone-ab/web-1"}, "zone-a", false},
		{[]string{"zone-a/web-1"}, "zone-ab", false},
	} {
		if got := admitsZone(tc.readers, tc.zone); got != tc.want {
			t.Errorf("admitsZone(%q, %q) = %v, want %v", tc.readers, tc.zone, got, tc.want)
		}
	}
}
