package canary_test

import (
	"math"
	"strings"
	"testing"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
)

// flat returns a host with n intervals of requests and errors per
// interval, and a latency of lat seconds, perturbed deterministically by
// i so hosts differ.
func flat(n, i int, errs, lat float64) map[string][]float64 {
	req, er, sec := make([]float64, n), make([]float64, n), make([]float64, n)
	for t := range req {
		wiggle := math.Sin(float64(7*i+3*t)) * 0.05
		req[t] = 1000
		er[t] = errs
		sec[t] = 1000 * lat * (1 + wiggle)
	}
	return map[string][]float64{canary.MetricRequests: req, canary.MetricRequestErrors: er,
		canary.MetricRequestSeconds: sec, canary.MetricRequestLatencyCount: req}
}

func fleet(canaries, controls, n int) canary.Input {
	in := canary.Input{ChangeIndex: n / 2, Canary: map[string]map[string][]float64{}, Control: map[string]map[string][]float64{}}
	for i := range canaries {
		in.Canary[string(rune('a'+i))] = flat(n, i, 0, 0.05)
	}
	for i := range controls {
		in.Control["k"+string(rune('a'+i))] = flat(n, 100+i, 0, 0.05)
	}
	return in
}

func TestJudgeRefusesBadInput(t *testing.T) {
	ok := fleet(1, 5, 20)
	bad := func(f func(in *canary.Input)) canary.Input {
		in := fleet(1, 5, 20)
		f(&in)
		return in
	}
	for _, tc := range []struct {
		name string
		in   canary.Input
		opts canary.Options
		want string
	}{
		{"alpha above 0.5", ok, canary.Options{Alpha: 0.6}, "alpha"},
		{"alpha NaN", ok, canary.Options{Alpha: math.NaN()}, "alpha"},
		{"negative bake", ok, canary.Options{BakeIntervals: -1}, "bake intervals"},
		{"too many looks", ok, canary.Options{Looks: 101}, "looks"},
		{"negative change index", bad(func(in *canary.Input) { in.ChangeIndex = -1 }), canary.Options{}, "change index"},
		{"host on both sides", bad(func(in *canary.Input) { in.Control["a"] = in.Canary["a"] }), canary.Options{}, `host "a" is also a canary host`},
		{"infinite value", bad(func(in *canary.Input) { in.Canary["a"][canary.MetricRequestErrors][3] = math.Inf(1) }), canary.Options{}, `canary["a"]["request_errors"][3]: infinite`},
		{"check without name", bad(func(in *canary.Input) { in.Checks = []canary.Check{{Metric: "x"}} }), canary.Options{}, "checks[0].name: empty"},
		{"duplicate names", bad(func(in *canary.Input) { in.Checks = []canary.Check{{Name: "x", Metric: "x"}, {Name: "x", Metric: "y"}} }), canary.Options{}, "checks[1].name"},
		{"metric and ratio", bad(func(in *canary.Input) {
			in.Checks = []canary.Check{{Name: "x", Metric: "x", Ratio: &canary.Ratio{Numerator: "a", Denominator: "b"}}}
		}), canary.Options{}, "exactly one of metric and ratio"},
		{"ratio without denominator", bad(func(in *canary.Input) { in.Checks = []canary.Check{{Name: "x", Ratio: &canary.Ratio{Numerator: "a"}}} }), canary.Options{}, "checks[0].ratio"},
		{"negative tolerance", bad(func(in *canary.Input) { in.Checks = []canary.Check{{Name: "x", Metric: "x", Tolerance: -0.1}} }), canary.Options{}, "checks[0].tolerance"},
		{"bad direction", bad(func(in *canary.Input) { in.Checks = []canary.Check{{Name: "x", Metric: "x", Direction: 7}} }), canary.Options{}, "checks[0].direction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := canary.Judge(tc.in, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Judge: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, v := range []canary.Verdict{canary.None, canary.Pass, canary.Fail} {
		b, _ := v.MarshalText()
		var w canary.Verdict
		if err := w.UnmarshalText(b); err != nil || w != v {
			t.Errorf("verdict %v: round trip gave %v, %v", v, w, err)
		}
	}
	for _, d := range []canary.Direction{canary.Increase, canary.Decrease, canary.Either} {
		var e canary.Direction
		if err := e.UnmarshalText([]byte(d.String())); err != nil || e != d {
			t.Errorf("direction %v: round trip gave %v, %v", d, e, err)
		}
	}
	for _, k := range []canary.Kind{canary.KindAuto, canary.KindCount, canary.KindProportion, canary.KindValue} {
		var e canary.Kind
		if err := e.UnmarshalText([]byte(k.String())); err != nil || e != k {
			t.Errorf("kind %v: round trip gave %v, %v", k, e, err)
		}
	}
	d := canary.Decrease
	if err := d.UnmarshalText([]byte("sideways")); err == nil || !strings.Contains(err.Error(), "increase") || d != canary.Decrease {
		t.Errorf("UnmarshalText(sideways) = %v, left %v; want an error listing the choices and no change", err, d)
	}
}

func TestJudgeVerdicts(t *testing.T) {
	max := 0.01
	for _, tc := range []struct {
		name     string
		in       func() canary.Input
		opts     canary.Options
		verdict  canary.Verdict
		check    string // a check whose verdict is asserted too
		explains string
	}{
		{"identical hosts pass", func() canary.Input { return fleet(1, 10, 40) }, canary.Options{}, canary.Pass, "latency", "within what the control hosts vary by"},
		{"the A/A calibration is shown", func() canary.Input { return fleet(1, 10, 40) }, canary.Options{}, canary.Pass, "latency", "of 20 random halvings of the control hosts differ at p < 0.05"},
		{"latency doubled fails", func() canary.Input {
			in := fleet(1, 10, 40)
			for t := 20; t < 40; t++ {
				in.Canary["a"][canary.MetricRequestSeconds][t] *= 2
			}
			return in
		}, canary.Options{}, canary.Fail, "latency", "rose more on the canary hosts"},
		{"errors out of nothing fail", func() canary.Input {
			in := fleet(1, 20, 40)
			for _, t := range []int{22, 27, 31, 35, 38} {
				in.Canary["a"][canary.MetricRequestErrors][t] = 1
			}
			return in
		}, canary.Options{}, canary.Fail, "error ratio", "0 % to"},
		{"one error out of nothing does not fail", func() canary.Input {
			in := fleet(1, 20, 40)
			in.Canary["a"][canary.MetricRequestErrors][30] = 1
			return in
		}, canary.Options{}, canary.Pass, "error ratio", "p ="},
		{"absolute bound fails", func() canary.Input {
			in := fleet(1, 5, 40)
			in.Checks = []canary.Check{{Name: "errors", Ratio: &canary.Ratio{Numerator: canary.MetricRequestErrors, Denominator: canary.MetricRequests}, Max: &max}}
			for t := 20; t < 40; t++ {
				in.Canary["a"][canary.MetricRequestErrors][t] = 20
				for h := range in.Control {
					in.Control[h][canary.MetricRequestErrors][t] = 20
				}
			}
			return in
		}, canary.Options{}, canary.Fail, "errors", "above the bound 1 %"},
		{"too few controls give no verdict", func() canary.Input { return fleet(1, 1, 40) }, canary.Options{}, canary.None, "latency", "at least 2 are needed"},
		{"no data after the change yet", func() canary.Input {
			in := fleet(1, 5, 40)
			in.ChangeIndex = 40
			return in
		}, canary.Options{}, canary.None, "", ""},
		{"before the last look no pass", func() canary.Input { return fleet(1, 10, 40) }, canary.Options{BakeIntervals: 40}, canary.None, "latency", ""},
		{"a metric nobody reports gives no verdict", func() canary.Input {
			in := fleet(1, 5, 40)
			in.Checks = []canary.Check{{Name: "queue depth", Metric: "queue_depth"}}
			return in
		}, canary.Options{}, canary.None, "queue depth", "no canary host reported queue_depth"},
		{"quiet counts pass without a test", func() canary.Input {
			in := fleet(1, 5, 40)
			in.Checks = []canary.Check{{Name: "errors", Metric: canary.MetricRequestErrors}}
			return in
		}, canary.Options{}, canary.Pass, "errors", "no host had any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := canary.Judge(tc.in(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict {
				t.Fatalf("verdict %v (%s); want %v\n%+v", res.Verdict, res.Reason, tc.verdict, res.Checks)
			}
			if tc.check == "" {
				return
			}
			for _, c := range res.Checks {
				if c.Name == tc.check {
					if !strings.Contains(c.Explanation, tc.explains) {
						t.Errorf("%s: explanation %q; want it to contain %q", c.Name, c.Explanation, tc.explains)
					}
					return
				}
			}
			t.Fatalf("no check %q in %+v", tc.check, res.Checks)
		})
	}
}

// TestJudgeSequential: a verdict taken between looks is the verdict of the
// latest look, so asking every interval gives the same answer as asking at
// the looks; and a failure at an early look stays a failure.
func TestJudgeSequential(t *testing.T) {
	full := scenario.Generate(scenario.DefaultSpec(scenario.ErrorRatioX5, 1, 0.5), 7)
	var first int
	for after := 1; after <= 30; after++ {
		in := truncate(full, full.ChangeIndex+after)
		res, err := canary.Judge(in, canary.Options{BakeIntervals: 30, Looks: 3})
		if err != nil {
			t.Fatal(err)
		}
		if first != 0 {
			if res.Verdict != canary.Fail || res.Look != first {
				t.Fatalf("after %d intervals: %v at look %d; the failure at look %d must stand", after, res.Verdict, res.Look, first)
			}
			continue
		}
		if wantLook := after * 3 / 30; res.Look != wantLook {
			t.Fatalf("after %d intervals: look %d; want %d", after, res.Look, wantLook)
		}
		if res.Verdict == canary.Fail {
			first = res.Look
		}
	}
	if first == 0 {
		t.Fatal("an error ratio ×5 never failed")
	}
}

func truncate(in canary.Input, n int) canary.Input {
	out := in
	cut := func(hosts map[string]map[string][]float64) map[string]map[string][]float64 {
		o := map[string]map[string][]float64{}
		for h, ms := range hosts {
			o[h] = map[string][]float64{}
			for m, v := range ms {
				o[h][m] = v[:n]
			}
		}
		return o
	}
	out.Canary, out.Control = cut(in.Canary), cut(in.Control)
	return out
}

// TestJudgeRates checks the judge's two promises on seeded fleets (the
// bench runs many more): few false failures on good changes with strongly
// autocorrelated noise, and bad changes caught.
func TestJudgeRates(t *testing.T) {
	const n = 150
	for _, tc := range []struct {
		change   scenario.Change
		canaries int
		phi      float64
		min, max int // failures allowed out of n
	}{
		{scenario.Good, 1, 0.95, 0, 5},
		{scenario.Good, 5, 0.8, 0, 5},
		{scenario.ErrorRatioX5, 1, 0.8, n * 95 / 100, n},
		{scenario.NewErrors, 1, 0.5, n * 95 / 100, n},
		{scenario.LatencyUp50, 1, 0.95, n * 95 / 100, n},
		{scenario.CrashLoop, 1, 0.5, n * 95 / 100, n},
		{scenario.SlowMode30, 3, 0.8, n * 95 / 100, n},
		{scenario.LatencyVarX4, 10, 0.5, n * 95 / 100, n},
		// The hard ones: a variance increase on a single canary host, and
		// the mild changes.
		{scenario.LatencyVarX4, 1, 0.5, n * 65 / 100, n},
		{scenario.ErrorRatioX2, 3, 0.5, n * 90 / 100, n},
		{scenario.LatencyUp20, 1, 0.5, n * 80 / 100, n},
	} {
		fails := 0
		for seed := range n {
			res, err := canary.Judge(scenario.Generate(scenario.DefaultSpec(tc.change, tc.canaries, tc.phi), uint64(seed)), canary.Options{BakeIntervals: 30})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict == canary.Fail {
				fails++
			}
		}
		if fails < tc.min || fails > tc.max {
			t.Errorf("%v, %d canary host(s), φ = %.2f: %d of %d failed; want %d to %d", tc.change, tc.canaries, tc.phi, fails, n, tc.min, tc.max)
		}
		if testing.Verbose() {
			t.Logf("%v, %d canary host(s), φ = %.2f: %d of %d failed", tc.change, tc.canaries, tc.phi, fails, n)
		}
	}
}

func TestInputFileRoundTrip(t *testing.T) {
	in := scenario.Generate(scenario.DefaultSpec(scenario.LatencyUp50, 2, 0.5), 9)
	in.Canary["canary-00"][canary.MetricRequests][4] = math.NaN()
	bound := 0.2
	in.Checks = []canary.Check{{Name: "slow", Ratio: &canary.Ratio{Numerator: canary.MetricRequestSeconds, Denominator: canary.MetricRequestLatencyCount}, Kind: canary.KindValue, Tolerance: 0.1, Max: &bound}}
	var b strings.Builder
	if err := canary.EncodeInput(&b, in); err != nil {
		t.Fatal(err)
	}
	got, err := canary.DecodeInput(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := canary.Judge(in, canary.Options{})
	res, _ := canary.Judge(got, canary.Options{})
	if res.Verdict != canary.Fail || res.Reason != want.Reason {
		t.Fatalf("judged from the file: %v %s; from memory: %v %s", res.Verdict, res.Reason, want.Verdict, want.Reason)
	}
	if !math.IsNaN(got.Canary["canary-00"][canary.MetricRequests][4]) || got.Interval != in.Interval || *got.Checks[0].Max != bound {
		t.Errorf("the file lost a NaN, the interval or a bound")
	}
	j, err := res.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"verdict":"FAIL"`, `"name":"slow"`, `"threshold":`} {
		if !strings.Contains(string(j), want) {
			t.Errorf("JSON %s lacks %s", j, want)
		}
	}
	if _, err := canary.DecodeInput(strings.NewReader(`{"change_idx": 3}`)); err == nil || !strings.Contains(err.Error(), "change_idx") {
		t.Errorf("a misspelt field: %v; want an error naming it", err)
	}
	if _, err := canary.DecodeInput(strings.NewReader(`{"checks": [{"name": "x", "metric": "y", "direction": "up"}]}`)); err == nil || !strings.Contains(err.Error(), "increase") {
		t.Errorf("a bad direction: %v; want an error listing the choices", err)
	}
}
