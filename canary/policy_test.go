package canary_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lehr.dev/lehr/canary"
)

// policyFleet returns canaries and controls deciding 400 times an
// interval, of which a binomial share p denies: p0 on every host before
// the change at interval 20 of 40, p0 + shift on the canary hosts after.
func policyFleet(seed uint64, canaries, controls int, p0, shift float64) canary.Input {
	rng := rand.New(rand.NewPCG(seed, 7))
	const n, c, decisions = 40, 20, 400
	host := func(after float64) map[string][]float64 {
		d, x := make([]float64, n), make([]float64, n)
		for t := range d {
			p := p0
			if t >= c {
				p = after
			}
			d[t] = decisions
			for range decisions {
				if rng.Float64() < p {
					x[t]++
				}
			}
		}
		return map[string][]float64{canary.MetricPolicyDecisions: d, canary.MetricPolicyDenies: x}
	}
	in := canary.Input{ChangeIndex: c, Canary: map[string]map[string][]float64{}, Control: map[string]map[string][]float64{}}
	for i := range canaries {
		in.Canary[string(rune('a'+i))] = host(p0 + shift)
	}
	for i := range controls {
		in.Control["k"+string(rune('a'+i))] = host(p0)
	}
	return in
}

// TestPolicyCheckExpectedChange: a committed policy experiment's rollout
// expects the canary hosts' deny ratio to move by what the preview
// measured — and by nothing else.
func TestPolicyCheckExpectedChange(t *testing.T) {
	for _, tc := range []struct {
		name            string
		shift, expected float64
		want            canary.Verdict
	}{
		{"moved as previewed", 0.25, 0.25, canary.Pass},
		{"moved as previewed, fewer denials", -0.1, -0.1, canary.Pass},
		{"moved within the tolerance", 0.11, 0.10, canary.Pass},
		{"no change expected, none seen", 0, 0, canary.Pass},
		{"moved, no change expected", 0.25, 0, canary.Fail},
		{"did not move though expected to", 0, 0.25, canary.Fail},
		{"moved twice as much as previewed", 0.5, 0.25, canary.Fail},
		{"moved the other way", -0.1, 0.25, canary.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				in := policyFleet(seed, 3, 8, 0.2, tc.shift)
				in.Checks = []canary.Check{}
				in.Extra = []canary.Check{canary.PolicyCheck(tc.expected)}
				res, err := canary.Judge(in, canary.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c := res.Checks[0]
				if c.Name != canary.PolicyCheckName || c.Verdict != tc.want {
					t.Fatalf("seed %d: %s %v (p = %.3g): %s; want %v", seed, c.Name, c.Verdict, c.P, c.Explanation, tc.want)
				}
				if tc.expected != 0 && !strings.Contains(c.Explanation, "expected on the canary hosts") {
					t.Errorf("explanation does not state the expected change: %s", c.Explanation)
				}
			}
		})
	}
}

// TestExtraChecksJoinTheDefaults: Extra checks run beside the default
// checks, not instead of them.
func TestExtraChecksJoinTheDefaults(t *testing.T) {
	in := fleet(2, 5, 20)
	for h, m := range in.Canary {
		p := policyFleet(1, 1, 0, 0.2, 0).Canary["a"]
		maps := m
		maps[canary.MetricPolicyDecisions], maps[canary.MetricPolicyDenies] = p[canary.MetricPolicyDecisions][:20], p[canary.MetricPolicyDenies][:20]
		in.Canary[h] = maps
	}
	in.Extra = []canary.Check{canary.PolicyCheck(0.1)}
	res, err := canary.Judge(in, canary.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.Name)
	}
	if len(names) < 2 || names[0] != "error ratio" || names[len(names)-1] != canary.PolicyCheckName {
		t.Errorf("checks %v; want the defaults, then %q", names, canary.PolicyCheckName)
	}
}

func TestExpectedRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    canary.Check
		want string
	}{
		{"NaN", canary.Check{Name: "x", Metric: "x", Expected: math.NaN()}, "checks[0].expected"},
		{"infinite", canary.Check{Name: "x", Metric: "x", Expected: math.Inf(1)}, "checks[0].expected"},
		{"proportion beyond 1", canary.PolicyCheck(1.5), "a proportion can move by -1 to 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fleet(1, 5, 20)
			in.Checks = []canary.Check{tc.c}
			if _, err := canary.Judge(in, canary.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Judge: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// flipFleet returns canaries and controls deciding 400 times an
// interval, half of them denials on every host before and after the
// change at interval 20 of 40 — a change that flips as many decisions to
// deny as to allow leaves the deny share where it was — and, after the
// change, a binomial share changed of the canary hosts' decisions that
// the replaced version would have decided otherwise (the control hosts
// run the replaced version: none).
func flipFleet(seed uint64, canaries, controls int, changed float64) canary.Input {
	rng := rand.New(rand.NewPCG(seed, 11))
	const n, c, decisions = 40, 20, 400
	host := func(share float64) map[string][]float64 {
		d, x, ch := make([]float64, n), make([]float64, n), make([]float64, n)
		for t := range d {
			d[t] = decisions
			for range decisions {
				if rng.Float64() < 0.5 {
					x[t]++
				}
				if t >= c && rng.Float64() < share {
					ch[t]++
				}
			}
		}
		return map[string][]float64{canary.MetricPolicyDecisions: d, canary.MetricPolicyDenies: x, canary.MetricPolicyChanged: ch}
	}
	in := canary.Input{ChangeIndex: c, Canary: map[string]map[string][]float64{}, Control: map[string]map[string][]float64{}, Checks: []canary.Check{}}
	for i := range canaries {
		in.Canary[string(rune('a'+i))] = host(changed)
	}
	for i := range controls {
		in.Control["k"+string(rune('a'+i))] = host(0)
	}
	return in
}

// TestPolicyDisagreementCheck: a committed policy experiment's rollout
// expects the canary hosts to change the share of decisions the preview
// saw the experiment disagree on — not fewer, not more — while the deny
// share's check, expecting no change from an experiment that flips
// decisions both ways, passes whatever the canary hosts do (issue 30,
// item 4).
func TestPolicyDisagreementCheck(t *testing.T) {
	for _, tc := range []struct {
		name              string
		changed, expected float64
		want              canary.Verdict
	}{
		{"changed as previewed", 0.5, 0.5, canary.Pass},
		{"changed a quarter, as previewed", 0.25, 0.25, canary.Pass},
		{"changed within the tolerance", 0.27, 0.25, canary.Pass},
		{"nothing to change, nothing changed", 0, 0, canary.Pass},
		{"nothing changed though half was expected to", 0, 0.5, canary.Fail},
		{"changed a fifth of what was expected", 0.1, 0.5, canary.Fail},
		{"changed twice as much as previewed", 0.5, 0.25, canary.Fail},
		{"changed, nothing expected", 0.1, 0, canary.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				in := flipFleet(seed, 3, 8, tc.changed)
				in.Extra = []canary.Check{canary.PolicyCheck(0), canary.PolicyDisagreementCheck(tc.expected)}
				res, err := canary.Judge(in, canary.Options{})
				if err != nil {
					t.Fatal(err)
				}
				deny, dis := res.Checks[0], res.Checks[1]
				if deny.Name != canary.PolicyCheckName || deny.Verdict != canary.Pass {
					t.Fatalf("seed %d: %s %v: %s; want PASS, the deny share unchanged", seed, deny.Name, deny.Verdict, deny.Explanation)
				}
				if dis.Name != canary.PolicyDisagreementCheckName || dis.Verdict != tc.want {
					t.Fatalf("seed %d: %s %v (p = %.3g): %s; want %v", seed, dis.Name, dis.Verdict, dis.P, dis.Explanation, tc.want)
				}
				if res.Verdict != tc.want {
					t.Fatalf("seed %d: verdict %v: %s; want %v", seed, res.Verdict, res.Reason, tc.want)
				}
			}
		})
	}
}
