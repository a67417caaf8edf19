package canary

// Learning from history (docs/canary.md, "Learning from history"): what
// past evaluations of changes that were kept say about a check in a
// namespace, and how a judgement uses it. Control keeps the history
// (control/store, canaryhist.go); the judge only reads it, from
// Input.History.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// Bounds of learning.
const (
	// MaxHistory is the most samples a check's history keeps: the
	// newest MaxHistory kept evaluations.
	MaxHistory = 64
	// MinHistory is the fewest samples a check's history needs before
	// the judge uses it.
	MinHistory = 20
	// MaxLearnedTolerance caps a learned tolerance of a check configured
	// without one, or with a small one: a learned tolerance is never above
	// the larger of twice the configured tolerance and this (5 %).
	MaxLearnedTolerance = 0.05
	// NoiseGrowthP is the p-value below which the control hosts' spread
	// of changes now is "well above" the learned one: the judge then says
	// so and uses this evaluation's control hosts alone.
	NoiseGrowthP = 0.01
)

// History is what a namespace's kept evaluations say about one check, at
// one bake: the samples their last looks contributed, oldest first. The
// judge uses it only at the look that judges After intervals after the
// change (the last look of a bake of that length), with at least
// MinHistory samples.
type History struct {
	After   int
	Samples []Sample
}

// Sample is what one judgement contributes to its check's history, taken
// at the look that judged After intervals after the change.
type Sample struct {
	After int
	// Effect is the canary hosts' move against the control hosts',
	// relative to the control hosts' level (0.01: 1 % higher on the
	// canary hosts); NaN when the level test did not run or the level is 0.
	Effect float64
	// LevelVar is the control hosts' sample variance of their level
	// shifts on the check's scale, SpreadVar of their log spread ratios
	// (values only; NaN otherwise); DF their degrees of freedom (control
	// hosts − 1).
	LevelVar, SpreadVar float64
	DF                  int
}

// Learned says how a check's history was used in a judgement.
type Learned struct {
	// Evaluations is the number of samples the history had; Used whether
	// it had enough (MinHistory) at this look's bake to be used.
	Evaluations int
	Used        bool
	// Typical is the move of the canary hosts against the control hosts
	// that 90 % of the kept changes stayed within, relative (0.003:
	// ±0.3 %), and Mean their mean move.
	Typical, Mean float64
	// Tolerance is the relative tolerance the judge used when history
	// raised it above the configured one (capped), else 0.
	Tolerance float64
	// NoiseRatio is the control hosts' variance of their changes now over
	// the learned one (level test); NoiseGrown says it is well above it
	// (p < NoiseGrowthP), so history's variance was not pooled.
	NoiseRatio float64
	NoiseGrown bool
	// PooledDF is the degrees of freedom history added to the level
	// test's variance (0 when none).
	PooledDF float64
	// PConfigured is the level test's p-value with the configured
	// tolerance (history's variance still pooled), PAlone with no history
	// at all: what the verdict would rest on without learning.
	PConfigured, PAlone float64
	// ChangedVerdict says the verdict differs from the one without
	// history (finish fills it).
	ChangedVerdict bool
}

// learnedPool is a learned variance: the mean of the samples' variances
// weighted by their degrees of freedom, and the degrees of freedom it is
// worth, estimated from how much the samples' variances differ beyond
// their sampling noise (an empirical-Bayes prior, as limma's moderated t):
// evaluations whose control hosts varied alike give many, evaluations
// that differ (incidents, traffic) few; at most the samples' total.
func learnedPool(vs []float64, dfs []int) (v, df float64) {
	var sw, swv, sdf float64
	var k float64
	for i, x := range vs {
		if math.IsNaN(x) || x < 0 || dfs[i] < 1 {
			continue
		}
		w := float64(dfs[i])
		sw, swv, sdf, k = sw+w, swv+w*x, sdf+w, k+1
	}
	if k < MinHistory || swv <= 0 {
		return math.NaN(), 0
	}
	v = swv / sw
	// CV² of the variances: 2/d0 (the prior's) + 2/df (sampling).
	var ss float64
	for i, x := range vs {
		if math.IsNaN(x) || x < 0 || dfs[i] < 1 {
			continue
		}
		ss += (x - v) * (x - v)
	}
	cv2 := ss / (k - 1) / (v * v)
	excess := cv2 - 2/(sdf/k)
	df = sdf
	if excess > 2/sdf {
		df = 2 / excess
	}
	return v, df
}

// learnLevel is the level test's hook: it records this judgement's sample
// and, with enough history at this bake, judges t again with the learned
// variance pooled into the control hosts' and the tolerance history
// allows (never below the configured one, never above the cap).
func (e *evaluation) learnLevel(t test, xc, xk, fc, fk []float64, sc scale, at float64, in Input, end int, canary, control []hostSeries) test {
	c := e.check
	after := end - in.ChangeIndex
	_, vk := meanVar(xk)
	s := Sample{After: after, Effect: sc.relative(t.effect, at), LevelVar: vk, SpreadVar: math.NaN(), DF: len(xk) - 1}
	if e.result.Sample != nil {
		s.SpreadVar = e.result.Sample.SpreadVar
	}
	e.result.Sample = &s
	h, ok := in.History[c.Name]
	if !ok {
		return t
	}
	u := &Learned{Evaluations: len(h.Samples), PAlone: t.p, PConfigured: t.p}
	e.result.Learned = u
	if h.After != after || len(h.Samples) < MinHistory {
		return t
	}
	u.Used = true
	var eff []float64
	vs, dfs := make([]float64, len(h.Samples)), make([]int, len(h.Samples))
	for i, x := range h.Samples {
		vs[i], dfs[i] = x.LevelVar, x.DF
		if !math.IsNaN(x.Effect) && !math.IsInf(x.Effect, 0) {
			eff = append(eff, x.Effect)
		}
	}
	v, df := e.pool(u, vs, dfs, vk, len(xk)-1)
	tol := c.Tolerance
	exact := func(tol float64) float64 {
		if e.kind != KindValue && c.Expected == 0 {
			return exactShare(canary, control, in.ChangeIndex, end, e.kind, c.Direction, tol)
		}
		return 0
	}
	u.PAlone = max(t.p, exact(c.Tolerance))
	if len(eff) >= MinHistory {
		mean, variance := meanVar(eff)
		abs := make([]float64, len(eff))
		for i, x := range eff {
			abs[i] = math.Abs(x)
		}
		slices.Sort(abs)
		u.Mean, u.Typical = mean, abs[min(len(abs)-1, int(math.Ceil(0.9*float64(len(abs))))-1)]
		// The systematic move of kept changes in the bad direction, when
		// they do move it (its 95 % confidence interval excludes 0), at the
		// interval's upper bound: what a harmless change here does.
		bad := mean
		switch c.Direction {
		case Decrease:
			bad = -mean
		case Either:
			bad = math.Abs(mean)
		}
		half := 1.96 * math.Sqrt(variance/float64(len(eff)))
		if learned := bad + half; bad-half > 0 && learned > tol {
			u.Tolerance = min(learned, max(2*c.Tolerance, MaxLearnedTolerance))
			tol = max(tol, u.Tolerance)
			if u.Tolerance <= c.Tolerance {
				u.Tolerance = 0
			}
		}
	}
	if df > 0 || u.Tolerance > 0 {
		if df == 0 {
			v, df = vk, float64(len(xk)-1)
		}
		se := learnedSE(v, xc, xk, fc, fk)
		conf := sc.tolerance(c.Tolerance, c.Direction, at)
		u.PConfigured = max(tailOf(t.effect, conf, se, df, c.Direction), exact(c.Tolerance))
		t.stat = statOf(t.effect, sc.tolerance(tol, c.Direction, at), se, c.Direction)
		t.p = max(tailOf(t.effect, sc.tolerance(tol, c.Direction, at), se, df, c.Direction), exact(tol))
		t.df = df
		if u.PooledDF > 0 {
			t.name += fmt.Sprintf("; variance pooled with %d past evaluations' control hosts (%.0f more degrees of freedom)", len(h.Samples), u.PooledDF)
		}
		if u.Tolerance > 0 {
			t.name += fmt.Sprintf("; learned tolerance %.3g %%", 100*u.Tolerance)
		}
	}
	return t
}

// learnSpread is the spread test's hook: it records the sample's spread
// variance and, with enough history, pools it as learnLevel does (no
// tolerance: the spread test has none).
func (e *evaluation) learnSpread(t test, xc, xk, fc, fk []float64, in Input, end int) test {
	_, vk := meanVar(xk)
	if e.result.Sample == nil {
		e.result.Sample = &Sample{After: end - in.ChangeIndex, Effect: math.NaN(), LevelVar: math.NaN(), DF: len(xk) - 1}
	}
	e.result.Sample.SpreadVar = vk
	h, ok := in.History[e.check.Name]
	if !ok || h.After != end-in.ChangeIndex || len(h.Samples) < MinHistory {
		return t
	}
	vs, dfs := make([]float64, len(h.Samples)), make([]int, len(h.Samples))
	for i, x := range h.Samples {
		vs[i], dfs[i] = x.SpreadVar, x.DF
	}
	u := e.result.Learned
	if u == nil {
		u = &Learned{Evaluations: len(h.Samples), Used: true, PAlone: t.p, PConfigured: t.p}
		e.result.Learned = u
	}
	var scratch Learned
	v, df := e.pool(&scratch, vs, dfs, vk, len(xk)-1)
	if df == 0 {
		return t
	}
	se := learnedSE(v, xc, xk, fc, fk)
	p := tailOf(t.effect, 0, se, df, Increase)
	u.PAlone = min(u.PAlone, t.p)
	t.stat, t.p, t.df = statOf(t.effect, 0, se, Increase), p, df
	t.name += fmt.Sprintf("; variance pooled with %d past evaluations' control hosts", len(h.Samples))
	return t
}

// pool returns the variance of one host's change to test with: the
// learned one pooled with the control hosts' vk (on dk degrees of
// freedom), never below vk, and its degrees of freedom; df 0 when history
// is not used
// (too few samples, or the control hosts vary well beyond what was
// learned, which u records).
func (e *evaluation) pool(u *Learned, vs []float64, dfs []int, vk float64, dk int) (v, df float64) {
	v0, d0 := learnedPool(vs, dfs)
	if d0 == 0 || dk < 1 {
		return 0, 0
	}
	u.NoiseRatio = vk / v0
	f := distuv.F{D1: float64(dk), D2: d0}
	if u.NoiseRatio > 1 && f.Survival(u.NoiseRatio) < NoiseGrowthP {
		u.NoiseGrown = true
		return 0, 0
	}
	// Never below the control hosts' own variance: history lends degrees
	// of freedom and lifts a variance that is low by chance, but never
	// says the hosts vary less than they do now.
	u.PooledDF = d0
	return max(vk, (d0*v0+float64(dk)*vk)/(d0+float64(dk))), d0 + float64(dk)
}

// learnedSE is compare's standard error with variance v for one host's
// change, floored as compare floors it.
func learnedSE(v float64, xc, xk, fc, fk []float64) float64 {
	mfc, _ := meanVar(fc)
	mfk, _ := meanVar(fk)
	nc, nk := float64(len(xc)), float64(len(xk))
	return math.Sqrt(max(v*(1/nc+1/nk), mfc/nc+mfk/nk))
}

// statOf and tailOf are compare's statistic and p-value of an effect
// beyond off with standard error se.
func statOf(effect, off, se float64, d Direction) float64 {
	var s float64
	switch d {
	case Decrease:
		s = -effect - off
	case Either:
		s = math.Abs(effect) - off
	default:
		s = effect - off
	}
	if se == 0 {
		if effect != 0 {
			return math.Inf(1)
		}
		return 0
	}
	return s / se
}

func tailOf(effect, off, se, df float64, d Direction) float64 {
	st := statOf(effect, off, se, d)
	p := tailP(st, df, d == Either)
	if d == Either && off > 0 {
		far := math.Inf(1)
		if se > 0 {
			far = (math.Abs(effect) + off) / se
		}
		p = min(1, tailP(st, df, false)+tailP(far, df, false))
	}
	return p
}

// relative maps a move on the scale at level at back to a relative change
// of the check's value: (value after the move) / at − 1. NaN when at is
// not a positive level.
func (s scale) relative(move, at float64) float64 {
	if math.IsNaN(move) || math.IsNaN(at) || at == 0 {
		return math.NaN()
	}
	y := s.of(at) + move
	var x float64
	switch {
	case s.kind == KindCount:
		x = max(y, 0) * max(y, 0)
	case s.kind == KindProportion:
		x = math.Pow(math.Sin(min(max(y, 0), math.Pi/2)), 2)
	case s.log:
		x = math.Exp(y)
	default:
		return move / math.Abs(at)
	}
	return x/at - 1
}

// noteLearned adds to r's explanation what history said and did, at
// threshold thr: a learned tolerance that turned a failure into a pass
// says so — and does not, for a clear failure (p below a hundredth of
// the threshold with the configured tolerance), which fails whatever was
// learned — and so does pooled variance that turned a pass into a
// failure.
func (e *evaluation) noteLearned(r *CheckResult, thr float64) {
	u := r.Learned
	if u == nil || e.lack != "" || e.quiet != "" || e.bound != "" {
		return
	}
	if !u.Used {
		r.Explanation += fmt.Sprintf(" History: %d kept evaluation(s) at this bake so far; %d are needed before the judge uses them.", u.Evaluations, MinHistory)
		return
	}
	var b []string
	if u.Typical > 0 || u.Mean != 0 {
		b = append(b, fmt.Sprintf("this check normally moves by ±%.3g %% here (mean %+.3g %%), learned from %d evaluations", 100*u.Typical, 100*u.Mean, u.Evaluations))
	}
	if u.NoiseGrown {
		b = append(b, fmt.Sprintf("the control hosts' changes vary %.3g× as much as learned: the noise has grown, so only this evaluation's control hosts count", u.NoiseRatio))
	} else if u.PooledDF > 0 {
		b = append(b, fmt.Sprintf("the control hosts' spread (%.3g× the learned one) is pooled with history's", u.NoiseRatio))
	}
	if u.Tolerance > 0 {
		b = append(b, fmt.Sprintf("kept changes move it by %+.3g %% on average, so the judge allowed %.3g %% instead of the configured %.3g %%", 100*u.Mean, 100*u.Tolerance, 100*e.check.Tolerance))
	}
	if u.Tolerance > 0 {
		switch {
		case r.Verdict == Pass && u.PConfigured < thr && u.PConfigured < thr/100:
			r.Verdict = Fail
			u.ChangedVerdict = false
			b = append(b, fmt.Sprintf("with the configured tolerance p = %.3g, a clear failure the learned tolerance does not excuse: FAIL", u.PConfigured))
		case r.Verdict == Pass && u.PConfigured < thr:
			u.ChangedVerdict = true
			b = append(b, fmt.Sprintf("the learned tolerance changed the verdict: with the configured %.3g %% it would have failed (p = %.3g)", 100*e.check.Tolerance, u.PConfigured))
		}
	}
	if r.Verdict == Fail && !(u.PAlone < thr) && !u.NoiseGrown {
		u.ChangedVerdict = true
		b = append(b, fmt.Sprintf("history changed the verdict: this evaluation's control hosts alone give p = %.3g, not below %.3g", u.PAlone, thr))
	}
	if len(b) > 0 {
		r.Explanation += " History: " + strings.Join(b, "; ") + "."
	}
}
