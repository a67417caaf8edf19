package canary

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// evaluation is one check at one look: everything but the verdict, which
// needs the look's threshold (known once every check has said how many
// tests it runs).
type evaluation struct {
	check  Check
	kind   Kind
	result CheckResult
	lack   string // why there is no verdict, if there is none
	tests  []test // the statistical tests run
	bound  string // set when a canary host broke the check's Max
	quiet  string // set when no host had any event: passes without a test
}

// test is one comparison of canary hosts' changes with control hosts'.
type test struct {
	name                        string
	effect, stat, df, p         float64
	canaryChange, controlChange float64 // mean per-host change, in the test's scale
	// aa is the same test on two alternating halves of the control hosts
	// (nil with fewer than 4); aaSplits random halvings of them were
	// compared too, aaDiffer of which differed at p < 0.05.
	aa                 *test
	aaSplits, aaDiffer int
}

// aaSplits is how many random halvings of the control hosts calibrate a
// test (A/A).
const aaSplits = 20

// calibrate runs t's comparison control against control: on alternating
// halves, and on aaSplits random halvings (seeded, so a judgement is
// reproducible), counting those that differ at p < 0.05 — about 1 in 20
// when the control hosts are alike.
func (t *test) calibrate(xk, fk []float64, d Direction, off float64) {
	if len(xk) < 4 {
		return
	}
	a, b, fa, fb := halves(xk, fk)
	aa, _ := compare(t.name, a, b, fa, fb, d, off, pooled{})
	t.aa = &aa
	rng := rand.New(rand.NewPCG(uint64(len(xk)), 0xaa))
	idx := make([]int, len(xk))
	for i := range idx {
		idx[i] = i
	}
	for range aaSplits {
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		x, f := make([]float64, len(xk)), make([]float64, len(xk))
		for i, k := range idx {
			x[i], f[i] = xk[k], fk[k]
		}
		h := len(x) / 2
		r, _ := compare(t.name, x[:h], x[h:], f[:h], f[h:], d, off, pooled{})
		t.aaSplits++
		if r.p < 0.05 {
			t.aaDiffer++
		}
	}
}

func evaluate(p prepared, in Input, end int) *evaluation {
	c := p.check
	e := &evaluation{check: c, result: CheckResult{Name: c.Name}}
	c0 := in.ChangeIndex
	qualified := func(hs []hostSeries) []hostSeries {
		var out []hostSeries
		for _, h := range hs {
			if count(h.num, 0, c0) >= minBefore && count(h.num, c0, end) >= 1 {
				out = append(out, hostSeries{h.host, series{h.num[:end], h.den[:end]}})
			}
		}
		return out
	}
	canary, control := qualified(p.canary), qualified(p.control)
	e.result.CanaryHosts, e.result.ControlHosts = len(canary), len(control)
	all := append(append([]series(nil), seriesOf(canary)...), seriesOf(control)...)
	e.kind = inferKind(c, all)
	e.result.CanaryBefore, e.result.CanaryAfter = levels(canary, 0, c0, end)
	e.result.ControlBefore, e.result.ControlAfter = levels(control, 0, c0, end)
	e.result.CanarySeries, e.result.ControlSeries = medians(canary, end), medians(control, end)
	e.checkBound(canary, c0, end)
	switch {
	case len(canary) == 0:
		e.lack = fmt.Sprintf("no canary host reported %s for %d intervals before the change and 1 after", c.describe(), minBefore)
		return e
	case len(control) < 2:
		e.lack = fmt.Sprintf("%d control host(s) reported %s for %d intervals before the change and 1 after; at least 2 are needed", len(control), c.describe(), minBefore)
		return e
	case e.kind != KindValue && allZero(all) && c.Expected == 0:
		// Nothing happened, and nothing was expected to. (A change that
		// was expected and did not happen is judged below: it fails.)
		e.quiet = fmt.Sprintf("no host had any %s before or after the change", c.describe())
		return e
	}

	sc := newScale(e.kind, all)
	z := func(hs []hostSeries) [][]float64 {
		out := make([][]float64, len(hs))
		for i, h := range hs {
			out[i] = sc.transform(h.series)
		}
		return out
	}
	zc, zk := z(canary), z(control)
	// Residuals against the control hosts' median interval by interval take
	// out what every host shares (traffic, incidents) before estimating
	// autocorrelation and spread. A control host's median leaves the host
	// out: a median the host is part of follows its own noise, which would
	// make control hosts look steadier than canary hosts, which are not
	// part of it.
	rc, rk := zc, zk
	col := make([]float64, 0, len(zk))
	idx := make([]int, 0, len(zk))
	for t := 0; t < end; t++ {
		col, idx = col[:0], idx[:0]
		for i := range zk {
			if x := zk[i][t]; !math.IsNaN(x) {
				idx = append(idx, i)
			}
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(zk[a][t], zk[b][t]) })
		for _, i := range idx {
			col = append(col, zk[i][t])
		}
		all := sortedMedian(col, -1)
		for i := range zc {
			zc[i][t] -= all
		}
		for rank, i := range idx {
			zk[i][t] -= sortedMedian(col, rank)
		}
	}
	// The lag-1 autocorrelation of a short series, each demeaned on its
	// own, is biased low by about (1 + 3φ)/n (Kendall); taken back, so a
	// strongly autocorrelated metric's innovations and level shifts are
	// not blurred by the part of its slow wander φ missed.
	phi := lag1(rk, c0)
	if n := float64(c0); phi > 0 && n > 3 {
		phi = min(0.98, phi+(1+3*phi)/n)
	}
	level := func(rs [][]float64) (shifts, floors []float64) {
		for _, r := range rs {
			valid := make([]bool, len(r))
			for t, x := range r {
				valid[t] = !math.IsNaN(x)
			}
			w, ok := shiftWeights(valid, c0, phi)
			if !ok {
				continue
			}
			shifts = append(shifts, dot(w, r))
			floors = append(floors, sc.noise*sumSquares(w))
		}
		return shifts, floors
	}
	sC, fC := level(rc)
	sK, fK := level(rk)
	// Replicates of a harmless change, as for the spread below: every
	// host's intervals before the change, cut the bake so far before it.
	after := end - c0
	var levelExtra pooled
	if c0-after >= after {
		var xs []float64
		for _, rs := range [][][]float64{rc, rk} {
			for _, r := range rs {
				valid := make([]bool, c0)
				for t, x := range r[:c0] {
					valid[t] = !math.IsNaN(x)
				}
				if w, ok := shiftWeights(valid, c0-after, phi); ok {
					xs = append(xs, dot(w, r[:c0]))
				}
			}
		}
		if len(xs) >= 2 {
			_, v := meanVar(xs)
			levelExtra = pooled{ss: v * float64(len(xs)-1), df: float64(len(xs) - 1)}
		}
	}
	at := e.result.ControlAfter
	name := fmt.Sprintf("level shift on the %s scale, AR(1)-adjusted (φ = %.2f), canary vs control hosts' changes, t on control hosts' spread", sc.name, phi)
	if c.Expected != 0 {
		// The canary hosts are expected to move by c.Expected more than the
		// control hosts: judge what they moved beyond that, on the scale,
		// at the level the control hosts have and the canary hosts should.
		want := sc.expectedShift(c.Expected, at)
		if math.IsNaN(want) {
			e.lack = fmt.Sprintf("the expected change of %s takes %s from the control hosts' %s to a level its scale does not have", e.format(c.Expected), c.describe(), e.format(at))
			return e
		}
		for i := range sC {
			sC[i] -= want
		}
		at += c.Expected
		name += fmt.Sprintf(", less the expected change of %+.4g (%+.4g on the scale)", c.Expected, want)
	}
	off := sc.tolerance(c.Tolerance, c.Direction, at)
	if lt, ok := compare(name, sC, sK, fC, fK, c.Direction, off, levelExtra); ok {
		lt = e.learnLevel(lt, sC, sK, fC, fK, sc, at, in, end, canary, control) // learned.go
		if e.kind != KindValue && c.Expected == 0 {
			// Few events make the normal approximation overconfident: the
			// level test is no stronger than an exact test — of the canary
			// hosts' share of every event, or of the share of their own
			// events that fell after the change (given how the control
			// hosts' rate moved), whichever is stronger. The first sees
			// errors against a zero baseline; the second is not fooled by
			// canary hosts whose own rate was below the fleet's before.
			lt.p = max(lt.p, min(exactShare(canary, control, c0, end, e.kind, c.Direction, c.Tolerance),
				exactSelf(canary, control, c0, end, e.kind, c.Direction, c.Tolerance)))
		}
		lt.calibrate(sK, fK, c.Direction, off)
		e.tests = append(e.tests, lt)
		e.result.CanaryWorse = worse(sC, sK, c.Direction)
	}
	if e.kind == KindValue {
		// Each host's innovations' log size before (b) and after (a) the
		// change. A host's after is compared with its own before only as
		// far as hosts differ in size before: a − β·b, β the share of the
		// control hosts' spread of b that is real host-to-host difference
		// rather than the noise of estimating it (empirical Bayes). Alike
		// hosts (β ≈ 0) spare the comparison the before window's noise;
		// different ones (β ≈ 1) get each host against itself.
		type sizes struct{ a, b, va, vb float64 }
		spread := func(rs [][]float64) (out []sizes) {
			for _, r := range rs {
				sb, nb := innovationSpread(r, 0, c0, phi)
				sa, na := innovationSpread(r, c0, end, phi)
				if math.IsNaN(sb) || math.IsNaN(sa) {
					continue
				}
				out = append(out, sizes{math.Log(sa + 1e-9), math.Log(sb + 1e-9), 1 / (2 * float64(na-1)), 1 / (2 * float64(nb-1))})
			}
			return out
		}
		sC, sK := spread(rc), spread(rk)
		beta := 1.0
		if len(sK) >= 2 {
			bs, vbs := make([]float64, len(sK)), make([]float64, len(sK))
			for i, x := range sK {
				bs[i], vbs[i] = x.b, x.vb
			}
			_, vb := meanVar(bs)
			noise, _ := meanVar(vbs)
			if vb > 0 {
				beta = max(0, vb-noise) / vb
			}
		}
		diffs := func(ss []sizes) (ratios, floors []float64) {
			for _, x := range ss {
				ratios = append(ratios, x.a-beta*x.b)
				floors = append(floors, x.va+beta*beta*x.vb)
			}
			return ratios, floors
		}
		vC, gC := diffs(sC)
		vK, gK := diffs(sK)
		// More replicates of a harmless change: every host's intervals
		// before the change, cut as if the change had come the bake so far
		// earlier (its innovations after that cut against those before it,
		// as above). Their spread joins the control hosts' in the variance
		// of a host's statistic. The cut's before window is shorter than
		// the real one, so a replicate varies at least as much as the real
		// statistic: the pooled variance errs on the side of passing.
		var extra pooled
		if c0-after >= after {
			var xs []float64
			for _, rs := range [][][]float64{rc, rk} {
				for _, r := range rs {
					sb, _ := innovationSpread(r, 0, c0-after, phi)
					sa, _ := innovationSpread(r, c0-after, c0, phi)
					if !math.IsNaN(sb) && !math.IsNaN(sa) {
						xs = append(xs, math.Log(sa+1e-9)-beta*math.Log(sb+1e-9))
					}
				}
			}
			if len(xs) >= 2 {
				_, v := meanVar(xs)
				extra = pooled{ss: v * float64(len(xs)-1), df: float64(len(xs) - 1)}
			}
		}
		name := fmt.Sprintf("spread: log size of the AR(1) innovations after less %.2f × before (%s scale, φ = %.2f), canary vs control hosts, t on control hosts' spread", beta, sc.name, phi)
		if st, ok := compare(name, vC, vK, gC, gK, Increase, 0, extra); ok {
			st = e.learnSpread(st, vC, vK, gC, gK, in, end) // learned.go
			st.calibrate(vK, gK, Increase, 0)
			e.tests = append(e.tests, st)
		}
	}
	if len(e.tests) == 0 {
		e.lack = fmt.Sprintf("the hosts' %s has too few consecutive intervals with data to estimate a change", c.describe())
	}
	return e
}

// compare tests whether the canary hosts' per-host changes xc are worse
// (in direction d, by more than off) than the control hosts' xk. The
// variance of one host's change is the control hosts' sample variance,
// floored by the mean of each host's floor (what independent events alone
// would give) so a control population without any variation cannot make
// any canary move significant. t on len(xk) − 1 degrees of freedom, more
// with extra replicates pooled in.
func compare(name string, xc, xk, fc, fk []float64, d Direction, off float64, extra pooled) (test, bool) {
	if len(xc) == 0 || len(xk) < 2 {
		return test{}, false
	}
	mc, _ := meanVar(xc)
	mk, vk := meanVar(xk)
	df := float64(len(xk) - 1)
	if extra.df > 0 && extra.ss > 0 {
		// Pooled unless the control hosts' changes vary significantly more
		// than the replicates (F test, 5 %): then something at the change
		// moved hosts apart that the replicates do not have, and the
		// control hosts' variance stands on its own.
		f := distuv.F{D1: df, D2: extra.df}
		if vk/(extra.ss/extra.df) <= f.Quantile(0.95) {
			vk, df = (vk*df+extra.ss)/(df+extra.df), df+extra.df
		}
	}
	mfc, _ := meanVar(fc)
	mfk, _ := meanVar(fk)
	se := math.Sqrt(max(vk*(1/float64(len(xc))+1/float64(len(xk))), mfc/float64(len(xc))+mfk/float64(len(xk))))
	t := test{name: name, canaryChange: mc, controlChange: mk, df: df}
	t.effect = mc - mk
	switch d {
	case Decrease:
		t.stat = (-t.effect - off) / se
	case Either:
		t.stat = (math.Abs(t.effect) - off) / se
	default:
		t.stat = (t.effect - off) / se
	}
	if se == 0 {
		t.stat = 0
		if t.effect != 0 {
			t.stat = math.Inf(1)
		}
	}
	t.p = tailP(t.stat, t.df, d == Either)
	if d == Either && off > 0 {
		// Either way, beyond off: under the least favourable truth (a move
		// of exactly off) the estimate lands this far out on its side, or
		// as far out on the other. (A two-sided p of the shifted statistic
		// would call an estimate well inside the tolerance significant.)
		far := math.Inf(1)
		if se > 0 {
			far = (math.Abs(t.effect) + off) / se
		}
		t.p = min(1, tailP(t.stat, t.df, false)+tailP(far, t.df, false))
	}
	return t, true
}

// pooled is more replicates of a host's statistic under a harmless change
// than the control hosts' (their sum of squares about their mean, and its
// degrees of freedom), pooled with the control hosts' in its variance.
type pooled struct{ ss, df float64 }

// exactShare returns the p-value of the canary hosts' events after the
// change under the hypothesis that every event of every host, before and
// after, fell on each host-interval in proportion to its exposure
// (intervals for a count, the denominator for a proportion): binomial,
// exact, one- or two-sided by d, the canary's share raised by tol.
func exactShare(canary, control []hostSeries, c, end int, k Kind, d Direction, tol float64) float64 {
	var x, total, exposed, exposure float64
	add := func(hs []hostSeries, isCanary bool) {
		eachExposure(hs, end, k, func(t int, n, e float64) {
			total += n
			exposure += e
			if isCanary && t >= c {
				x += n
				exposed += e
			}
		})
	}
	add(canary, true)
	add(control, false)
	if exposure == 0 || total == 0 {
		return 1
	}
	return binomialP(x, total, exposed/exposure, d, tol)
}

// exactSelf returns the p-value of the canary hosts' events after the
// change among all their own events, under the hypothesis that their rate
// moved at the change as the control hosts' did (their pooled rate after
// over before, with half an event added to each so a quiet side has one):
// binomial, exact, one- or two-sided by d, the canary's rate after raised
// by tol. Each canary host is compared with itself, so a host whose rate
// differs from the fleet's before the change is judged fairly.
func exactSelf(canary, control []hostSeries, c, end int, k Kind, d Direction, tol float64) float64 {
	sums := func(hs []hostSeries) (before, after, eb, ea float64) {
		eachExposure(hs, end, k, func(t int, n, e float64) {
			if t < c {
				before, eb = before+n, eb+e
			} else {
				after, ea = after+n, ea+e
			}
		})
		return before, after, eb, ea
	}
	b, a, eb, ea := sums(canary)
	kb, ka, keb, kea := sums(control)
	if a+b == 0 || eb == 0 || ea == 0 || keb == 0 || kea == 0 {
		return 1
	}
	rho := ((ka + 0.5) / kea) / ((kb + 0.5) / keb)
	return binomialP(a, a+b, ea*rho/(eb+ea*rho), d, tol)
}

// eachExposure calls f with every reported interval t < end of every host
// of hs: its events n and its exposure e (1 for a count, the denominator
// for a proportion).
func eachExposure(hs []hostSeries, end int, k Kind, f func(t int, n, e float64)) {
	for _, h := range hs {
		for t := 0; t < end; t++ {
			if math.IsNaN(h.num[t]) {
				continue
			}
			e := 1.0
			if k == KindProportion {
				e = h.den[t]
			}
			f(t, h.num[t], e)
		}
	}
}

// binomialP returns the p-value of x of total events falling on a share
// p0 of the exposure, that share's odds raised by tol (lowered for
// Decrease): upper tail, lower for Decrease, both for Either.
func binomialP(x, total, p0 float64, d Direction, tol float64) float64 {
	if d == Decrease {
		p0 *= max(0, 1-tol)
	} else {
		p0 = p0 * (1 + tol) / (1 + p0*tol)
	}
	b := distuv.Binomial{N: math.Round(total), P: min(p0, 1)}
	up := 1.0
	if x >= 1 {
		up = b.Survival(math.Round(x) - 1)
	}
	down := b.CDF(math.Round(x))
	switch d {
	case Decrease:
		return down
	case Either:
		return min(1, 2*min(up, down))
	}
	return up
}

// halves splits the control hosts' values into two alternating halves for
// an A/A comparison.
func halves(x, f []float64) (a, b, fa, fb []float64) {
	for i := range x {
		if i%2 == 0 {
			a, fa = append(a, x[i]), append(fa, f[i])
		} else {
			b, fb = append(b, x[i]), append(fb, f[i])
		}
	}
	return a, b, fa, fb
}

// worse counts canary changes worse than every control change.
func worse(xc, xk []float64, d Direction) int {
	sign := 1.0
	if d == Decrease {
		sign = -1
	}
	var n int
	for _, x := range xc {
		all := true
		for _, k := range xk {
			if d == Either {
				all = all && math.Abs(x) > math.Abs(k)
			} else {
				all = all && sign*x > sign*k
			}
		}
		if all {
			n++
		}
	}
	return n
}

// checkBound records the first canary host above the check's Max over the
// intervals after the change.
func (e *evaluation) checkBound(canary []hostSeries, from, to int) {
	if e.check.Max == nil {
		return
	}
	for _, h := range canary {
		if v := level(h.series, from, to); v > *e.check.Max {
			e.bound = fmt.Sprintf("canary host %s had %s of %s after the change, above the bound %s", h.host, e.check.describe(), e.format(v), e.format(*e.check.Max))
			return
		}
	}
}

// finish gives e its verdict at threshold thr and explains it.
func (e *evaluation) finish(thr float64) CheckResult {
	r := e.result
	r.Threshold = thr
	r.P = math.NaN()
	if len(e.tests) > 0 {
		best := 0
		for i, t := range e.tests {
			if t.p < e.tests[best].p {
				best = i
			}
		}
		t := e.tests[best]
		r.Test, r.Effect, r.Statistic, r.DF, r.P = t.name, t.effect, t.stat, t.df, t.p
		if a := t.aa; a != nil {
			r.AA = &CheckResult{Name: e.check.Name + " (A/A)", Verdict: Pass, Test: a.name, Effect: a.effect, Statistic: a.stat, DF: a.df, P: a.p, Threshold: thr,
				ControlHosts: int(a.df) + 1, AASplits: t.aaSplits, AADiffer: t.aaDiffer,
				Explanation: fmt.Sprintf("the control hosts against each other: alternating halves p = %.3g; %d of %d random halvings differ at p < 0.05 (about 1 expected when the control hosts are alike)",
					a.p, t.aaDiffer, t.aaSplits)}
			if a.p < thr {
				r.AA.Verdict = Fail
			}
		}
	}
	moved := e.moved()
	if x := e.check.Expected; x != 0 {
		moved += fmt.Sprintf(" (expected on the canary hosts: %s against the control hosts)", e.formatChange(x))
	}
	switch {
	case e.bound != "":
		r.Verdict = Fail
		r.Explanation = e.bound + "."
	case e.lack != "":
		r.Verdict = None
		r.Explanation = e.lack + "."
	case e.quiet != "":
		r.Verdict = Pass
		r.Explanation = e.quiet + ": nothing to compare."
	case r.P < thr && r.AA != nil && r.AA.Verdict == Fail:
		r.Verdict = None
		r.Explanation = fmt.Sprintf("%s (p = %.3g, below the %.3g this look allows), but two halves of the control hosts differ from each other as much (A/A p = %.3g): the control population is not uniform enough to trust the comparison.", moved, r.P, thr, r.AA.P)
	case r.P < thr:
		r.Verdict = Fail
		r.Explanation = fmt.Sprintf("%s: %s. A difference this large happens by chance with p = %.3g, below the %.3g this look allows.", moved, e.why(), r.P, thr)
	default:
		r.Verdict = Pass
		r.Explanation = fmt.Sprintf("%s: within what the control hosts vary by (p = %.3g; a failure needs p below %.3g).", moved, r.P, thr)
	}
	if a := r.AA; a != nil && e.lack == "" && e.quiet == "" {
		r.Explanation += fmt.Sprintf(" Control against control, %d of %d random halvings of the control hosts differ at p < 0.05 (about %d expected).",
			a.AADiffer, a.AASplits, (a.AASplits+10)/20)
	}
	e.noteLearned(&r, thr) // learned.go
	return r
}

// moved describes what the check's metric did on both populations.
func (e *evaluation) moved() string {
	r := e.result
	return fmt.Sprintf("%s went from %s to %s on %d canary host(s) and from %s to %s on %d control host(s)",
		e.check.describe(), e.format(r.CanaryBefore), e.format(r.CanaryAfter), r.CanaryHosts,
		e.format(r.ControlBefore), e.format(r.ControlAfter), r.ControlHosts)
}

// why says which test found the canary worse.
func (e *evaluation) why() string {
	if strings.HasPrefix(e.result.Test, "spread") {
		return "its interval-to-interval swings grew more on the canary hosts than on the control hosts"
	}
	w := "rose"
	switch e.check.Direction {
	case Decrease:
		w = "fell"
	case Either:
		w = "moved"
	}
	s := fmt.Sprintf("it %s more on the canary hosts than on the control hosts, each host compared with itself before the change", w)
	if x := e.check.Expected; x != 0 {
		s = fmt.Sprintf("it %s on the canary hosts by something other than the expected %s against the control hosts, each host compared with itself before the change", w, e.formatChange(x))
	}
	if e.check.Tolerance > 0 {
		s += fmt.Sprintf(", beyond the %.3g %% tolerance", 100*e.check.Tolerance)
	}
	if e.result.CanaryWorse > 0 {
		s += fmt.Sprintf("; %d canary host(s) changed more than every control host", e.result.CanaryWorse)
	}
	return s
}

// format prints a value in the check's unit.
func (e *evaluation) format(x float64) string {
	switch {
	case math.IsNaN(x):
		return "no data"
	case e.kind == KindProportion:
		return fmt.Sprintf("%.3g %%", 100*x)
	case e.kind == KindCount:
		return fmt.Sprintf("%.3g per interval", x)
	}
	return fmt.Sprintf("%.4g", x)
}

// formatChange formats a change in the check's unit, signed: a
// proportion's in percentage points.
func (e *evaluation) formatChange(x float64) string {
	if e.kind == KindProportion {
		return fmt.Sprintf("%+.3g percentage points", 100*x)
	}
	return fmt.Sprintf("%+.4g", x)
}

func seriesOf(hs []hostSeries) []series {
	out := make([]series, len(hs))
	for i, h := range hs {
		out[i] = h.series
	}
	return out
}

// count returns the intervals of xs[from:to] with data.
func count(xs []float64, from, to int) int {
	n := 0
	for _, x := range xs[from:min(to, len(xs))] {
		if !math.IsNaN(x) {
			n++
		}
	}
	return n
}

func allZero(all []series) bool {
	for _, s := range all {
		for _, x := range s.num {
			if !math.IsNaN(x) && x != 0 {
				return false
			}
		}
	}
	return true
}

// level returns a host's value over [from, to): Σ numerator / Σ
// denominator (for a plain metric, its mean per interval).
func level(s series, from, to int) float64 {
	var num, den float64
	for t := from; t < to; t++ {
		if !math.IsNaN(s.num[t]) {
			num += s.num[t]
			den += s.den[t]
		}
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// medians returns, per interval of [0, end), the median across hs of the
// interval's value (numerator over denominator); NaN where none has data.
func medians(hs []hostSeries, end int) []float64 {
	out := make([]float64, end)
	col := make([]float64, len(hs))
	for t := range out {
		for i, h := range hs {
			col[i] = h.num[t] / h.den[t]
		}
		out[t] = median(col)
	}
	return out
}

// levels returns the medians across hosts of their levels before
// [0, c) and after [c, end).
func levels(hs []hostSeries, from, c, end int) (before, after float64) {
	b, a := make([]float64, len(hs)), make([]float64, len(hs))
	for i, h := range hs {
		b[i], a[i] = level(h.series, from, c), level(h.series, c, end)
	}
	return median(b), median(a)
}
