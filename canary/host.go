package canary

import (
	"fmt"
	"math"
	"time"
)

// Host-level checks: one host compared with its own history, before its
// change against after it, with no control population. The agent runs
// them every interval on the namespaces whose version it changed. Without
// control hosts a host cannot tell its change from what the whole fleet
// went through at the same time (a traffic surge, an incident), so the
// test is deliberately conservative — a stricter default alpha, the
// autocorrelation taken at the upper end of what the data allow — and
// its verdict is evidence beside the population judgement (Judge), not a
// replacement for it. Absolute bounds (Check.Max) need no comparison and
// are as strong here as there.

// DefaultHostAlpha is HostOptions.Alpha's default: the false-failure rate
// allowed per host over every check and every look.
const DefaultHostAlpha = 0.001

// MinHostBefore is the fewest intervals with data a host needs before its
// change for a host-level check to compare anything.
const MinHostBefore = 6

// HostInput is one host's series around its own change.
type HostInput struct {
	// Interval is the length of one interval; used in explanations only.
	Interval time.Duration
	// ChangeIndex is the first interval after the change.
	ChangeIndex int
	// Metrics maps a metric to its series, one value per interval (NaN:
	// no data).
	Metrics map[string][]float64
	// Checks are the checks to run. Nil means DefaultChecks() restricted to
	// the metrics the host reports.
	Checks []Check
}

// HostOptions tunes JudgeHost. The zero value is valid.
type HostOptions struct {
	// Alpha is the false-failure rate allowed over every check and look.
	// Zero means DefaultHostAlpha.
	Alpha float64
	// BakeIntervals and Looks are as in Options: the verdict is taken at
	// Looks evenly spaced looks over BakeIntervals intervals after the
	// change, with Alpha spent across them. Zero BakeIntervals judges what
	// is there once; zero Looks means one look per interval of the bake.
	BakeIntervals, Looks int
}

// HostResult is the outcome of JudgeHost.
type HostResult struct {
	// Verdict is Fail if any check failed, else None if any check lacked
	// data or the last look is not reached yet, else Pass.
	Verdict Verdict
	// Reason says in one sentence why.
	Reason string
	// Look is the look the verdict was taken at (1-based), Looks their
	// number and AfterIntervals the intervals after the change it used.
	Look, Looks, AfterIntervals int
	// Checks holds one result per check, in the order of the checks.
	Checks []HostCheckResult
}

// HostCheckResult is one host-level check with the numbers behind it.
type HostCheckResult struct {
	Name    string
	Verdict Verdict
	// Explanation says in words what the host's data showed.
	Explanation string
	// Test names the statistical test ("" for a bound or no data).
	Test string
	// Before and After are the host's level before and after the change,
	// in the check's unit (NaN: no data).
	Before, After float64
	// Effect is the change on the test's scale; Statistic, DF and P the
	// test's; Threshold the p-value this look needed to fail.
	Effect, Statistic, DF, P, Threshold float64
}

// JudgeHost decides whether one host got worse after its own change,
// compared with its own intervals before it. It returns an error only for
// input that can never be judged; too little data gives None saying what
// is missing.
func JudgeHost(in HostInput, opts HostOptions) (HostResult, error) {
	alpha := opts.Alpha
	switch {
	case math.IsNaN(alpha) || alpha < 0 || alpha > 0.5:
		return HostResult{}, fmt.Errorf("alpha: %v; want more than 0 and at most 0.5 (0 means %v)", alpha, DefaultHostAlpha)
	case opts.BakeIntervals < 0:
		return HostResult{}, fmt.Errorf("bake intervals: %d; want 0 (judge what is there once) or more", opts.BakeIntervals)
	case opts.Looks < 0:
		return HostResult{}, fmt.Errorf("looks: %d; want 0 (one per interval of the bake) or more", opts.Looks)
	case in.ChangeIndex < 0:
		return HostResult{}, fmt.Errorf("change index: %d; want ≥ 0 (the first interval after the change)", in.ChangeIndex)
	}
	if alpha == 0 {
		alpha = DefaultHostAlpha
	}
	n := 0
	for m, v := range in.Metrics {
		for i, x := range v {
			if math.IsInf(x, 0) {
				return HostResult{}, fmt.Errorf("metrics[%q][%d]: infinite; use NaN for an interval without data", m, i)
			}
		}
		n = max(n, len(v))
	}
	checks := in.Checks
	if checks == nil {
		checks = Input{Canary: map[string]map[string][]float64{"host": in.Metrics}}.reportedDefaults()
	}
	if err := validateChecks(checks); err != nil {
		return HostResult{}, err
	}
	after := max(0, n-in.ChangeIndex)
	bake, looks := opts.BakeIntervals, opts.Looks
	switch {
	case bake == 0:
		bake, looks = after, 1
	case looks == 0 || looks > bake:
		looks = bake
	}
	res := HostResult{Looks: looks, AfterIntervals: after}
	if len(checks) == 0 {
		res.Reason = "the host reports no metric a check reads: nothing to judge"
		return res, nil
	}
	end := func(j int) int { return max(1, int(math.Ceil(float64(j)*float64(bake)/float64(looks)))) }
	reached := 0
	for j := 1; j <= looks && bake > 0 && end(j) <= after; j++ {
		reached = j
	}
	if reached == 0 {
		res.Reason = fmt.Sprintf("the first look needs %d interval(s) after the change; %d so far", end(1), after)
		return res, nil
	}
	for j := 1; j <= reached; j++ {
		a := spent(alpha, float64(end(j))/float64(bake))
		if j > 1 {
			a -= spent(alpha, float64(end(j-1))/float64(bake))
		}
		res = judgeHostLook(in, checks, n, lookPlan{look: j, looks: looks, after: end(j), alpha: a, final: j == looks})
		if res.Verdict == Fail {
			break
		}
	}
	return res, nil
}

func judgeHostLook(in HostInput, checks []Check, n int, lp lookPlan) HostResult {
	stop := in.ChangeIndex + lp.after
	evals := make([]*hostEval, len(checks))
	tests := 0
	for i, c := range checks {
		evals[i] = evaluateHost(c, in, n, stop)
		tests += len(evals[i].tests)
	}
	thr := lp.alpha / float64(max(1, tests))
	res := HostResult{Look: lp.look, Looks: lp.looks, AfterIntervals: lp.after}
	var names []string
	var verdicts []Verdict
	for _, e := range evals {
		cr := e.finish(thr)
		res.Checks = append(res.Checks, cr)
		names, verdicts = append(names, cr.Name), append(verdicts, cr.Verdict)
	}
	res.Verdict, res.Reason = lp.verdict(names, verdicts, "the host got worse than it was before the change")
	return res
}

// hostEval is one host-level check at one look, before its threshold.
type hostEval struct {
	ev    evaluation // check, kind, bound, lack, quiet, format
	res   HostCheckResult
	tests []test
}

func evaluateHost(c Check, in HostInput, n, stop int) *hostEval {
	e := &hostEval{ev: evaluation{check: c}, res: HostCheckResult{Name: c.Name, Before: math.NaN(), After: math.NaN()}}
	s, _ := hostSeriesOf(c, in.Metrics, n)
	s = series{num: s.num[:stop], den: s.den[:stop]}
	c0 := in.ChangeIndex
	e.ev.kind = inferKind(c, []series{s})
	e.res.Before, e.res.After = level(s, 0, c0), level(s, c0, stop)
	if c.Max != nil && e.res.After > *c.Max {
		e.ev.bound = fmt.Sprintf("the host had %s of %s after the change, above the bound %s", c.describe(), e.ev.format(e.res.After), e.ev.format(*c.Max))
	}
	nb, na := count(s.num, 0, c0), count(s.num, c0, stop)
	switch {
	case nb < MinHostBefore || na < 1:
		e.ev.lack = fmt.Sprintf("the host reported %s for %d interval(s) before its change and %d after; at least %d before and 1 after are needed", c.describe(), nb, na, MinHostBefore)
		return e
	case e.ev.kind != KindValue && allZero([]series{s}):
		e.ev.quiet = fmt.Sprintf("the host had no %s before or after its change", c.describe())
		return e
	}
	sc := newScale(e.ev.kind, []series{s})
	z := sc.transform(s)
	phi := lag1([][]float64{z}, c0)
	// A short history underestimates autocorrelation, and with it the
	// variance of a shift: the variance uses φ at the upper end of what
	// the before window allows.
	phiHi := min(0.98, phi+2/math.Sqrt(float64(nb)))
	valid := make([]bool, len(z))
	for t, x := range z {
		valid[t] = !math.IsNaN(x)
	}
	off := sc.tolerance(c.Tolerance, c.Direction, e.res.Before)
	if w, ok := shiftWeights(valid, c0, phi); ok {
		if sd, _ := innovationSpread(z, 0, c0, phi); !math.IsNaN(sd) {
			v := max(ar1Variance(w, phiHi, sd*sd/(1-phiHi*phiHi)), sc.noise*sumSquares(w))
			t := shiftTest(dot(w, z), v, float64(nb-1), c.Direction, off)
			t.name = fmt.Sprintf("level shift on the %s scale against the host's own history, AR(1)-adjusted (φ = %.2f, variance at φ = %.2f), t on the before window", sc.name, phi, phiHi)
			if e.ev.kind != KindValue {
				h := []hostSeries{{host: "host", series: s}}
				t.p = max(t.p, exactShare(h, nil, c0, stop, e.ev.kind, c.Direction, c.Tolerance))
			}
			e.tests = append(e.tests, t)
		}
	}
	if e.ev.kind == KindValue {
		sb, kb := innovationSpread(z, 0, c0, phi)
		sa, ka := innovationSpread(z, c0, stop, phi)
		if !math.IsNaN(sb) && !math.IsNaN(sa) {
			v := 1/(2*float64(kb-1)) + 1/(2*float64(ka-1))
			t := shiftTest(math.Log((sa+1e-9)/(sb+1e-9)), v, float64(kb-1), Increase, 0)
			t.name = fmt.Sprintf("spread: log ratio of the AR(1) innovations' size after vs before on the host (%s scale, φ = %.2f)", sc.name, phi)
			e.tests = append(e.tests, t)
		}
	}
	if len(e.tests) == 0 {
		e.ev.lack = fmt.Sprintf("the host's %s has too few consecutive intervals with data to estimate a change", c.describe())
	}
	return e
}

// shiftTest tests a shift estimate of variance v against zero in
// direction d, beyond off: t on df degrees of freedom.
func shiftTest(shift, v, df float64, d Direction, off float64) test {
	t := test{effect: shift, df: df}
	switch d {
	case Decrease:
		t.stat = -shift - off
	case Either:
		t.stat = math.Abs(shift) - off
	default:
		t.stat = shift - off
	}
	switch {
	case v > 0:
		t.stat /= math.Sqrt(v)
	case t.stat > 0:
		t.stat = math.Inf(1)
	default:
		t.stat = 0
	}
	t.p = tailP(t.stat, df, d == Either)
	return t
}

// ar1Variance returns Var(Σ w[t]·x[t]) for x an AR(1) process with
// coefficient phi and marginal variance s2: s2·Σ_i Σ_j w_i w_j phi^|i−j|,
// in one pass (S_i = w_i + phi·S_{i−1}; the double sum is
// 2·Σ w_i S_i − Σ w_i²).
func ar1Variance(w []float64, phi, s2 float64) float64 {
	var acc, run float64
	for _, x := range w {
		run = x + phi*run
		acc += x * (2*run - x)
	}
	return s2 * acc
}

func (e *hostEval) finish(thr float64) HostCheckResult {
	r := e.res
	r.Threshold, r.P = thr, math.NaN()
	if len(e.tests) > 0 {
		best := e.tests[0]
		for _, t := range e.tests[1:] {
			if t.p < best.p {
				best = t
			}
		}
		r.Test, r.Effect, r.Statistic, r.DF, r.P = best.name, best.effect, best.stat, best.df, best.p
	}
	c := e.ev.check
	moved := fmt.Sprintf("%s went from %s before the change to %s after on this host", c.describe(), e.ev.format(r.Before), e.ev.format(r.After))
	switch {
	case e.ev.bound != "":
		r.Verdict, r.Explanation = Fail, e.ev.bound+"."
	case e.ev.lack != "":
		r.Verdict, r.Explanation = None, e.ev.lack+"."
	case e.ev.quiet != "":
		r.Verdict, r.Explanation = Pass, e.ev.quiet+": nothing to compare."
	case r.P < thr:
		r.Verdict = Fail
		r.Explanation = fmt.Sprintf("%s: a change this large happens by chance with p = %.3g, below the %.3g this look allows (the host compared with its own history; the whole fleet may have moved too).", moved, r.P, thr)
	default:
		r.Verdict = Pass
		r.Explanation = fmt.Sprintf("%s: within the host's own variation (p = %.3g; a failure needs p below %.3g).", moved, r.P, thr)
	}
	return r
}
