package cohort_test

import (
	"fmt"
	"testing"

	"lehr.dev/lehr/internal/cohort"
)

func TestCohort(t *testing.T) {
	hosts := make([]string, 10_000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("host-%05d", i)
	}
	count := func(c cohort.Cohort) (n int) {
		for _, h := range hosts {
			if c.Has(h) {
				n++
			}
		}
		return n
	}
	tests := []struct {
		name   string
		c      cohort.Cohort
		lo, hi int
	}{
		{"empty", cohort.Cohort{Salt: "r1"}, 0, 0},
		{"named", cohort.Cohort{Hosts: []string{"host-00007", "host-00042", "not-a-host"}, Salt: "r1"}, 2, 2},
		{"every host", cohort.Cohort{PerMillion: cohort.Million, Salt: "r1"}, 10_000, 10_000},
		{"5 %", cohort.Cohort{PerMillion: 50_000, Salt: "r1"}, 400, 600},
		{"50 %", cohort.Cohort{PerMillion: 500_000, Salt: "r2"}, 4_800, 5_200},
	}
	for _, tc := range tests {
		if n := count(tc.c); n < tc.lo || n > tc.hi {
			t.Errorf("%s: %d hosts selected, want %d to %d", tc.name, n, tc.lo, tc.hi)
		}
	}
	// Growing the fraction keeps every host already selected; another
	// salt samples other hosts.
	small, large, other := cohort.Cohort{PerMillion: 10_000, Salt: "r1"}, cohort.Cohort{PerMillion: 200_000, Salt: "r1"}, cohort.Cohort{PerMillion: 10_000, Salt: "r2"}
	same := 0
	for _, h := range hosts {
		if small.Has(h) && !large.Has(h) {
			t.Fatalf("%s is in 1 %% but not in 20 %% of the same rollout", h)
		}
		if small.Has(h) && other.Has(h) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("%d hosts are in the 1 %% samples of two rollouts; want independent samples (about 1)", same)
	}
	if cohort.Position("r1", "host-1") != cohort.Position("r1", "host-1") {
		t.Error("Position is not deterministic")
	}
}
