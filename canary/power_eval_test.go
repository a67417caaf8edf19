package canary_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
)

// TestPowerEval measures the population judge on the bench's kinds of
// fleets (canary/scenario: every change, φ ∈ {0, 0.5, 0.8, 0.95}, 1, 3 or
// 10 canary hosts, host spread 0.1 or 0.3, good changes also on zero-error
// fleets) without the rest of the bench: LEHR_POWER=N seeds per cell from
// LEHR_POWER_BASE on (the bench uses base 0; issue 36 was tuned on
// 5,000,000 and validated on 9,000,000), LEHR_POWER_ONLY=good, bad or a
// change's name to run one, LEHR_POWER_V=1 to print every false failure.
// Skipped without LEHR_POWER. One goroutine: ~3 ms a fleet.
func TestPowerEval(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LEHR_POWER"))
	if n == 0 {
		t.Skip("LEHR_POWER unset")
	}
	base, _ := strconv.ParseUint(os.Getenv("LEHR_POWER_BASE"), 10, 64)
	only := os.Getenv("LEHR_POWER_ONLY")
	start := time.Now()
	phis := []float64{0, 0.5, 0.8, 0.95}
	type key struct {
		ch   scenario.Change
		k    int
		zero bool
	}
	fails, tot := map[key]int{}, map[key]int{}
	phiF, phiN := map[float64]int{}, map[float64]int{}
	for _, ch := range scenario.Changes {
		if only != "" && !(only == "good" && ch == scenario.Good) && !(only == "bad" && ch != scenario.Good) && only != ch.String() {
			continue
		}
		for _, zero := range []bool{false, true} {
			if zero && ch != scenario.Good {
				continue
			}
			for _, k := range []int{1, 3, 10} {
				for _, phi := range phis {
					for _, sp := range []float64{0.1, 0.3} {
						for seed := range n {
							s := scenario.DefaultSpec(ch, k, phi)
							s.ZeroErrors, s.HostSpread = zero, sp
							sd := base + uint64(seed) + uint64(1000*k) + uint64(100000*int(ch)) + uint64(1e7*phi) + uint64(1e9*sp)
							if zero {
								sd += 7777
							}
							r, err := canary.Judge(scenario.Generate(s, sd), canary.Options{BakeIntervals: s.After})
							if err != nil {
								t.Fatal(err)
							}
							kk := key{ch, k, zero}
							tot[kk]++
							if ch == scenario.Good {
								phiN[phi]++
							}
							if r.Verdict == canary.Fail {
								fails[kk]++
								if ch == scenario.Good {
									phiF[phi]++
								}
								if os.Getenv("LEHR_POWER_V") != "" && ch == scenario.Good {
									fmt.Printf("FF seed %d k %d phi %.2f sp %.1f zero %v: %s\n", sd, k, phi, sp, zero, r.Reason)
								}
							}
						}
					}
				}
			}
		}
	}
	var bf, bn, gf, gn, mf, mn int
	for _, ch := range scenario.Changes {
		for _, zero := range []bool{false, true} {
			line := fmt.Sprintf("%-22s zero=%-5v", ch, zero)
			var f, m int
			for _, k := range []int{1, 3, 10} {
				kk := key{ch, k, zero}
				if tot[kk] == 0 {
					continue
				}
				line += fmt.Sprintf("  %d: %6.2f%%", k, 100*float64(fails[kk])/float64(tot[kk]))
				f += fails[kk]
				m += tot[kk]
			}
			if m == 0 {
				continue
			}
			fmt.Printf("%s  all: %6.2f%% (%d/%d)\n", line, 100*float64(f)/float64(m), f, m)
			switch {
			case ch == scenario.Good:
				gf, gn = gf+f, gn+m
			case ch.Mild():
				mf, mn = mf+f, mn+m
			default:
				bf, bn = bf+f, bn+m
			}
		}
	}
	for _, phi := range phis {
		if phiN[phi] > 0 {
			fmt.Printf("good phi %.2f: %.2f%%\n", phi, 100*float64(phiF[phi])/float64(phiN[phi]))
		}
	}
	fmt.Printf("BAD caught %.2f%% of %d; MILD caught %.2f%% of %d; GOOD failed %.2f%% of %d; %v\n",
		100*float64(bf)/float64(max(bn, 1)), bn, 100*float64(mf)/float64(max(mn, 1)), mn, 100*float64(gf)/float64(max(gn, 1)), gn, time.Since(start))
}
