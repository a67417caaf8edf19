package canary_test

import (
	"math"
	"strings"
	"testing"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
)

// learn judges k good changes of spec (seeds from base) and returns the
// history control would keep of those that passed.
func learn(t *testing.T, spec scenario.Spec, k int, base uint64) map[string]canary.History {
	t.Helper()
	spec.Change = scenario.Good
	hist := map[string]canary.History{}
	for i := range k {
		r, err := canary.Judge(scenario.Generate(spec, base+uint64(i)), canary.Options{BakeIntervals: spec.After})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != canary.Pass {
			continue
		}
		for _, c := range r.Checks {
			if c.Sample != nil {
				h := hist[c.Name]
				h.After, h.Samples = c.Sample.After, append(h.Samples, *c.Sample)
				hist[c.Name] = h
			}
		}
	}
	return hist
}

func check(r canary.Result, name string) canary.CheckResult {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return canary.CheckResult{}
}

func TestLearnedHistoryIsUsedAndSaysSo(t *testing.T) {
	spec := scenario.DefaultSpec(scenario.Good, 3, 0.5)
	hist := learn(t, spec, 30, 1<<30)
	if n := len(hist["latency"].Samples); n < canary.MinHistory {
		t.Fatalf("latency history has %d samples; want ≥ %d", n, canary.MinHistory)
	}
	in := scenario.Generate(spec, 7)
	in.History = hist
	r, err := canary.Judge(in, canary.Options{BakeIntervals: spec.After})
	if err != nil {
		t.Fatal(err)
	}
	c := check(r, "latency")
	if c.Learned == nil || !c.Learned.Used || c.Learned.Evaluations != len(hist["latency"].Samples) {
		t.Fatalf("latency learned = %+v; want used, %d evaluations", c.Learned, len(hist["latency"].Samples))
	}
	if !strings.Contains(c.Explanation, "learned from") || !strings.Contains(c.Explanation, "normally moves by ±") {
		t.Errorf("explanation does not say what was learned: %s", c.Explanation)
	}
	if c.Sample == nil || c.Sample.After != spec.After || math.IsNaN(c.Sample.LevelVar) {
		t.Errorf("sample = %+v; want one at the last look", c.Sample)
	}

	// Too little history: said, not used.
	short := map[string]canary.History{"latency": {After: spec.After, Samples: hist["latency"].Samples[:5]}}
	in.History = short
	r, _ = canary.Judge(in, canary.Options{BakeIntervals: spec.After})
	if c := check(r, "latency"); c.Learned == nil || c.Learned.Used || !strings.Contains(c.Explanation, "are needed") {
		t.Errorf("5 samples: learned = %+v, explanation %q; want unused, saying so", c.Learned, c.Explanation)
	}
}

// A history of kept changes that all moved error ratio up by 30 % would
// allow 30 % — but the learned tolerance is capped, and a clear failure
// still fails, saying why.
func TestLearnedToleranceIsCappedAndNeverExcusesAClearFailure(t *testing.T) {
	spec := scenario.DefaultSpec(scenario.Good, 3, 0)
	hist := learn(t, spec, 30, 1<<31)
	h := hist["error ratio"]
	for i := range h.Samples {
		h.Samples[i].Effect = 0.3
	}
	hist["error ratio"] = h
	bad := spec
	bad.Change = scenario.ErrorRatioX5
	in := scenario.Generate(bad, 3)
	in.History = hist
	// One look, the last: an earlier one would fail first, without history.
	r, err := canary.Judge(in, canary.Options{BakeIntervals: spec.After, Looks: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := check(r, "error ratio")
	if c.Verdict != canary.Fail {
		t.Fatalf("error ratio ×5 with a learned tolerance: %v; want FAIL: %s", c.Verdict, c.Explanation)
	}
	if c.Learned == nil || c.Learned.Tolerance != canary.MaxLearnedTolerance {
		t.Errorf("learned tolerance = %+v; want capped at %v", c.Learned, canary.MaxLearnedTolerance)
	}
}

// Control hosts that vary far more than history says: the judge says the
// noise has grown and does not pool.
func TestLearnedNoiseGrowth(t *testing.T) {
	spec := scenario.DefaultSpec(scenario.Good, 3, 0)
	spec.Incidents = false
	hist := learn(t, spec, 30, 1<<32)
	h := hist["latency"]
	for i := range h.Samples {
		h.Samples[i].LevelVar /= 50
	}
	hist["latency"] = h
	in := scenario.Generate(spec, 11)
	in.History = hist
	r, err := canary.Judge(in, canary.Options{BakeIntervals: spec.After})
	if err != nil {
		t.Fatal(err)
	}
	c := check(r, "latency")
	if c.Learned == nil || !c.Learned.NoiseGrown || !strings.Contains(c.Explanation, "noise has grown") {
		t.Errorf("learned = %+v; explanation %q; want the noise growth said", c.Learned, c.Explanation)
	}
	if c.Verdict == canary.Fail {
		t.Errorf("a good change failed when the noise grew: %s", c.Explanation)
	}
}

// Kept changes that all raise latency by about 3 %: the judge learns that
// as normal (a capped tolerance) and, where that turns a failure into a
// pass, says so.
func TestLearnedToleranceChangesAVerdictAndSaysSo(t *testing.T) {
	spec := scenario.DefaultSpec(scenario.Good, 10, 0)
	spec.Incidents = false
	hist := learn(t, spec, 30, 1<<33)
	h := hist["latency"]
	for i := range h.Samples {
		h.Samples[i].Effect = 0.03 + 0.002*float64(i%5-2)
	}
	hist["latency"] = h
	changed := 0
	for seed := range uint64(20) {
		in := scenario.Generate(spec, 100+seed)
		for host, ms := range in.Canary {
			for i := in.ChangeIndex; i < len(ms[canary.MetricRequestSeconds]); i++ {
				ms[canary.MetricRequestSeconds][i] *= 1.035
			}
			in.Canary[host] = ms
		}
		in.History = hist
		r, err := canary.Judge(in, canary.Options{BakeIntervals: spec.After, Looks: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := check(r, "latency")
		if c.Learned == nil || c.Learned.Tolerance <= 0.03 || c.Learned.Tolerance > canary.MaxLearnedTolerance {
			t.Fatalf("learned = %+v; want a tolerance above 3 %%, at most the cap", c.Learned)
		}
		if c.Learned.ChangedVerdict {
			changed++
			if c.Verdict != canary.Pass || !strings.Contains(c.Explanation, "the learned tolerance changed the verdict") {
				t.Errorf("verdict %v, explanation %q; want PASS saying the learned tolerance changed it", c.Verdict, c.Explanation)
			}
		}
	}
	t.Logf("the learned tolerance changed %d of 20 verdicts", changed)
	if changed == 0 {
		t.Errorf("the learned tolerance changed no verdict of a +3.5 %% latency move learned as normal")
	}
}

// The file format carries a history ("history"), NaN as null, so "lehr
// canary judge" replays a judgement with what was learned.
func TestHistoryFileRoundTrip(t *testing.T) {
	spec := scenario.DefaultSpec(scenario.Good, 3, 0.5)
	in := scenario.Generate(spec, 5)
	in.History = learn(t, spec, 25, 1<<34)
	var b strings.Builder
	if err := canary.EncodeInput(&b, in); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"spread_variance":null`) {
		t.Errorf("a sample without a spread variance is not written as null")
	}
	back, err := canary.DecodeInput(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range in.History {
		g := back.History[name]
		if g.After != h.After || len(g.Samples) != len(h.Samples) {
			t.Fatalf("%s: read back %d samples at %d; wrote %d at %d", name, len(g.Samples), g.After, len(h.Samples), h.After)
		}
		for i, s := range h.Samples {
			same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
			if x := g.Samples[i]; !same(x.Effect, s.Effect) || !same(x.LevelVar, s.LevelVar) || !same(x.SpreadVar, s.SpreadVar) || x.DF != s.DF {
				t.Errorf("%s[%d]: read back %+v; wrote %+v", name, i, x, s)
			}
		}
	}
	r1, _ := canary.Judge(in, canary.Options{BakeIntervals: spec.After})
	r2, _ := canary.Judge(back, canary.Options{BakeIntervals: spec.After})
	if r1.Reason != r2.Reason || check(r1, "latency").Explanation != check(r2, "latency").Explanation {
		t.Errorf("judged from the file: %q; from memory: %q", check(r2, "latency").Explanation, check(r1, "latency").Explanation)
	}
}
