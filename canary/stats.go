package canary

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// spent returns the false-failure rate a one-sided O'Brien–Fleming-type
// spending function (Lan & DeMets) has spent by information fraction t of
// total alpha: almost nothing at early looks, alpha at t = 1.
func spent(alpha, t float64) float64 {
	if t <= 0 {
		return 0
	}
	if t >= 1 {
		return alpha
	}
	z := distuv.UnitNormal.Quantile(1 - alpha/2)
	return 2 * (1 - distuv.UnitNormal.CDF(z/math.Sqrt(t)))
}

// sqrtPoissonVar returns Var(√X) for X ~ Poisson(lambda): the per-interval
// variance of a count on the square-root scale when events are
// independent. It tends to 1/4 for large lambda and to lambda for small.
func sqrtPoissonVar(lambda float64) float64 {
	if lambda <= 0 {
		return 0
	}
	if lambda > 400 {
		return 0.25
	}
	p := math.Exp(-lambda)
	var m1, m2 float64
	for k := 0; k < int(lambda+12*math.Sqrt(lambda)+25); k++ {
		if k > 0 {
			p *= lambda / float64(k)
		}
		m1 += p * math.Sqrt(float64(k))
		m2 += p * float64(k)
	}
	return max(0, m2-m1*m1)
}

// tailP returns the p-value of a t statistic on df degrees of freedom:
// one-sided (upper tail) or, if twoSided, both tails.
func tailP(stat, df float64, twoSided bool) float64 {
	if math.IsNaN(stat) {
		return 1
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
	if twoSided {
		return min(1, 2*t.Survival(math.Abs(stat)))
	}
	return t.Survival(stat)
}

// median returns the median of the finite values of xs, NaN if none.
func median(xs []float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// sortedMedian returns the median of the sorted values v without the one
// at index skip (none if skip < 0); NaN if none is left.
func sortedMedian(v []float64, skip int) float64 {
	n := len(v)
	at := func(p int) float64 { // the p-th value once skip is out
		if skip >= 0 && p >= skip {
			p++
		}
		return v[p]
	}
	if skip >= 0 {
		n--
	}
	if n <= 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// meanVar returns the mean and sample variance of xs.
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// lag1 estimates the lag-1 autocorrelation of residual series over
// [0, end), each demeaned on its own, pooled over the series; clamped to
// [0, 0.98].
func lag1(rs [][]float64, end int) float64 {
	var num, den float64
	for _, r := range rs {
		var sum float64
		var n int
		for _, x := range r[:end] {
			if !math.IsNaN(x) {
				sum += x
				n++
			}
		}
		if n < 3 {
			continue
		}
		m := sum / float64(n)
		for t := 0; t < end; t++ {
			if math.IsNaN(r[t]) {
				continue
			}
			den += (r[t] - m) * (r[t] - m)
			if t > 0 && !math.IsNaN(r[t-1]) {
				num += (r[t] - m) * (r[t-1] - m)
			}
		}
	}
	if den == 0 {
		return 0
	}
	return min(0.98, max(0, num/den))
}

// shiftWeights returns weights w such that Σ w[t]·r[t] is the estimated
// shift in level of r at index c, modelling r as a level, a step at c and
// AR(1) noise with coefficient phi (Cochrane–Orcutt: ordinary least
// squares on quasi-differences r[t] − phi·r[t−1] over consecutive
// intervals that both have data). With phi = 0 it is the mean after c
// minus the mean before. ok is false when r has no data on one side.
func shiftWeights(valid []bool, c int, phi float64) (w []float64, ok bool) {
	type row struct {
		t    int
		a, b float64
	}
	var rows []row
	step := func(t int) float64 {
		if t >= c {
			return 1
		}
		return 0
	}
	for t := range valid {
		switch {
		case !valid[t]:
		case phi == 0:
			rows = append(rows, row{t, 1, step(t)})
		case t > 0 && valid[t-1]:
			rows = append(rows, row{t, 1 - phi, step(t) - phi*step(t-1)})
		}
	}
	var saa, sab, sbb float64
	for _, r := range rows {
		saa += r.a * r.a
		sab += r.a * r.b
		sbb += r.b * r.b
	}
	det := saa*sbb - sab*sab
	if len(rows) < 2 || det <= 1e-12*max(saa*sbb, 1e-300) {
		if phi != 0 {
			return shiftWeights(valid, c, 0)
		}
		return nil, false
	}
	w = make([]float64, len(valid))
	for _, r := range rows {
		g := (saa*r.b - sab*r.a) / det
		w[r.t] += g
		if phi != 0 {
			w[r.t-1] -= phi * g
		}
	}
	return w, true
}

// dot returns Σ w[t]·r[t] over the t where w is not zero.
func dot(w, r []float64) float64 {
	var s float64
	for t, x := range w {
		if x != 0 {
			s += x * r[t]
		}
	}
	return s
}

// sumSquares returns Σ w[t]².
func sumSquares(w []float64) float64 {
	var s float64
	for _, x := range w {
		s += x * x
	}
	return s
}

// innovationSpread returns the root mean square of the AR(1) innovations
// (r[t] − m) − phi·(r[t−1] − m) over consecutive intervals with data in
// [from, to), m the mean of r there, and their number. With phi = 0 it is
// the standard deviation of r; with phi near 1, of its steps.
func innovationSpread(r []float64, from, to int, phi float64) (sd float64, n int) {
	var sum float64
	var k int
	for t := from; t < to; t++ {
		if !math.IsNaN(r[t]) {
			sum += r[t]
			k++
		}
	}
	if k == 0 {
		return math.NaN(), 0
	}
	m := sum / float64(k)
	var ss float64
	for t := from; t < to; t++ {
		switch {
		case math.IsNaN(r[t]):
		case phi == 0:
			ss += (r[t] - m) * (r[t] - m)
			n++
		case t > from && !math.IsNaN(r[t-1]):
			u := (r[t] - m) - phi*(r[t-1]-m)
			ss += u * u
			n++
		}
	}
	if n < 4 {
		return math.NaN(), n
	}
	return math.Sqrt(ss / float64(n-1)), n
}
