package canary_test

import (
	"math"
	"strings"
	"testing"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
)

// hostSeries returns n intervals of a host serving 1,000 requests with
// errs errors each, errs after from the change at c on.
func hostMetrics(n, c int, errs, after float64) map[string][]float64 {
	req, bad := make([]float64, n), make([]float64, n)
	for i := range n {
		req[i], bad[i] = 1000, errs
		if i >= c {
			bad[i] = after
		}
	}
	return map[string][]float64{canary.MetricRequests: req, canary.MetricRequestErrors: bad}
}

func TestJudgeHost(t *testing.T) {
	bound := 0.002
	ratio := canary.Check{Name: "errors", Ratio: &canary.Ratio{Numerator: canary.MetricRequestErrors, Denominator: canary.MetricRequests}}
	bounded := ratio
	bounded.Max = &bound
	for _, tc := range []struct {
		name    string
		in      canary.HostInput
		opts    canary.HostOptions
		want    canary.Verdict
		explain string // in the first check's explanation
	}{
		{"steady host passes", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 1, 1), Checks: []canary.Check{ratio}}, canary.HostOptions{}, canary.Pass, "within the host's own variation"},
		{"error ratio ×10 fails", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 2, 20), Checks: []canary.Check{ratio}}, canary.HostOptions{}, canary.Fail, "went from 0.2 % before the change to 2 % after"},
		{"errors against a zero baseline fail", canary.HostInput{ChangeIndex: 60, Metrics: hostMetrics(90, 60, 0, 3), Checks: []canary.Check{ratio}}, canary.HostOptions{}, canary.Fail, "from 0 % before"},
		{"no errors at all pass without a test", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 0, 0), Checks: []canary.Check{ratio}}, canary.HostOptions{}, canary.Pass, "no request_errors/requests before or after"},
		{"a bound fails whatever the history", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 3, 3), Checks: []canary.Check{bounded}}, canary.HostOptions{}, canary.Fail, "above the bound 0.2 %"},
		{"too short a history is NONE", canary.HostInput{ChangeIndex: 3, Metrics: hostMetrics(10, 3, 1, 20), Checks: []canary.Check{ratio}}, canary.HostOptions{}, canary.None, "at least 6 before"},
		{"a metric nobody reports is NONE", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 1, 1), Checks: []canary.Check{{Name: "x", Metric: "nope"}}}, canary.HostOptions{}, canary.None, "reported nope for 0 interval(s)"},
		{"defaults from what the host reports", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(60, 30, 2, 20)}, canary.HostOptions{}, canary.Fail, "request_errors/requests"},
		{"before the first look is NONE", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(33, 30, 2, 20), Checks: []canary.Check{ratio}}, canary.HostOptions{BakeIntervals: 30, Looks: 5}, canary.None, ""},
		{"a pass needs the last look", canary.HostInput{ChangeIndex: 30, Metrics: hostMetrics(45, 30, 1, 1), Checks: []canary.Check{ratio}}, canary.HostOptions{BakeIntervals: 30}, canary.None, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := canary.JudgeHost(tc.in, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.want {
				t.Fatalf("verdict %v (%s); want %v", r.Verdict, r.Reason, tc.want)
			}
			if tc.explain != "" && (len(r.Checks) == 0 || !strings.Contains(r.Checks[0].Explanation, tc.explain)) {
				t.Errorf("explanation %+v; want it to say %q", r.Checks, tc.explain)
			}
		})
	}
}

func TestJudgeHostRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		in   canary.HostInput
		opts canary.HostOptions
		want string
	}{
		{canary.HostInput{ChangeIndex: -1}, canary.HostOptions{}, "change index"},
		{canary.HostInput{}, canary.HostOptions{Alpha: 0.9}, "alpha"},
		{canary.HostInput{}, canary.HostOptions{BakeIntervals: -1}, "bake intervals"},
		{canary.HostInput{Metrics: map[string][]float64{"m": {math.Inf(1)}}}, canary.HostOptions{}, `metrics["m"][0]`},
		{canary.HostInput{Checks: []canary.Check{{Name: "a"}}}, canary.HostOptions{}, "exactly one of metric and ratio"},
	} {
		if _, err := canary.JudgeHost(tc.in, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("JudgeHost(%+v, %+v) = %v; want an error about %s", tc.in, tc.opts, err, tc.want)
		}
	}
}

// TestJudgeHostRates runs the host-level judge on the first canary host of
// seeded fleets: without fleet-wide incidents it must stay quiet on good
// changes at every autocorrelation level and catch the large bad changes.
// With incidents its false failures are only logged: a host alone cannot
// tell its change from the fleet's incident, which is why host-level
// verdicts are evidence beside the population judge and never decide a
// rollout (docs/canary.md).
func TestJudgeHostRates(t *testing.T) {
	if testing.Short() {
		t.Skip("200 fleets per case")
	}
	const fleets = 200
	rate := func(ch scenario.Change, phi float64, incidents bool) float64 {
		fails := 0
		for seed := range fleets {
			s := scenario.DefaultSpec(ch, 1, phi)
			s.Incidents = incidents
			in := scenario.Generate(s, uint64(seed))
			r, err := canary.JudgeHost(canary.HostInput{ChangeIndex: in.ChangeIndex, Metrics: in.Canary["canary-00"]}, canary.HostOptions{BakeIntervals: s.After})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict == canary.Fail {
				fails++
			}
		}
		return float64(fails) / fleets
	}
	for _, phi := range []float64{0, 0.5, 0.8, 0.95} {
		if r := rate(scenario.Good, phi, false); r > 0.01 {
			t.Errorf("good change, φ = %.2f, no incidents: %.1f %% false failures; want ≤ 1 %%", phi, 100*r)
		}
		t.Logf("good change, φ = %.2f, with fleet-wide incidents: %.1f %% host-level false failures", phi, 100*rate(scenario.Good, phi, true))
		for _, ch := range []scenario.Change{scenario.ErrorRatioX5, scenario.SlowMode30} {
			if r := rate(ch, phi, false); r < 0.95 {
				t.Errorf("%v, φ = %.2f: %.1f %% caught; want ≥ 95 %%", ch, phi, 100*r)
			}
		}
	}
}

func TestAR1VarianceMatchesDoubleSum(t *testing.T) {
	// Python: s2*sum(w[i]*w[j]*phi**abs(i-j) for i in range(6) for j in range(6))
	got := canary.AR1VarianceForTest([]float64{0.5, -0.25, 0, 0.75, -1.0, 0.2}, 0.7, 2)
	if math.Abs(got-1.1430080000000005) > 1e-12 {
		t.Errorf("ar1Variance = %.15g; the double sum is 1.1430080000000005", got)
	}
}
