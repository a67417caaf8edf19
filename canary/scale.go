package canary

import "math"

// scale is the variance-stabilising scale a check's values are compared
// on, and the per-interval noise independent events alone would give on
// it (the floor of a host's variance).
type scale struct {
	name  string
	kind  Kind
	log   bool
	noise float64
}

// newScale picks the scale of a kind from the data of every host:
//   - a count on the square-root scale (Poisson counts have variance ≈ 1/4
//     there whatever their rate), noise Var(√X) at the pooled rate with one
//     pseudo-event added, so a zero baseline still has a floor;
//   - a proportion on the arcsine-square-root scale, noise likewise at the
//     pooled proportion and the median denominator;
//   - a value on the log scale when every value is positive (a latency
//     going from 10 to 15 ms is the same change as from 100 to 150), else
//     as is; noise a 0.1 % change.
func newScale(k Kind, all []series) scale {
	var num, den, n float64
	var dens []float64
	positive := true
	for _, s := range all {
		for t, x := range s.num {
			if math.IsNaN(x) {
				continue
			}
			num += x
			den += s.den[t]
			n++
			dens = append(dens, s.den[t])
			positive = positive && x/s.den[t] > 0
		}
	}
	switch k {
	case KindCount:
		return scale{name: "square-root", kind: k, noise: sqrtPoissonVar((num + 1) / max(n, 1))}
	case KindProportion:
		m := max(median(dens), 1)
		pi := (num + 0.5) / (den + 1)
		return scale{name: "arcsine-square-root", kind: k, noise: sqrtPoissonVar(m*pi) / m}
	}
	if positive {
		return scale{name: "log", kind: k, log: true, noise: 1e-6}
	}
	var mags []float64
	for _, s := range all {
		for t, x := range s.num {
			if !math.IsNaN(x) {
				mags = append(mags, math.Abs(x/s.den[t]))
			}
		}
	}
	m := median(mags)
	return scale{name: "linear", kind: k, noise: 1e-6 * max(m*m, 1e-18)}
}

// of maps one value in the check's unit to the scale.
func (s scale) of(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return x
	case s.kind == KindCount:
		return math.Sqrt(max(x, 0))
	case s.kind == KindProportion:
		return math.Asin(math.Sqrt(min(max(x, 0), 1)))
	case s.log:
		return math.Log(x)
	}
	return x
}

// transform maps a host's series to the scale, interval by interval.
func (s scale) transform(h series) []float64 {
	out := make([]float64, len(h.num))
	for t := range out {
		out[t] = s.of(h.num[t] / h.den[t])
	}
	return out
}

// tolerance converts a relative tolerance into a shift on the scale, at
// the control hosts' level after the change.
func (s scale) tolerance(tol float64, d Direction, at float64) float64 {
	if tol == 0 || math.IsNaN(at) {
		return 0
	}
	if !s.log && s.kind == KindValue {
		return tol * math.Abs(at)
	}
	if d == Decrease {
		return s.of(at) - s.of(at*max(0, 1-tol))
	}
	return s.of(at*(1+tol)) - s.of(at)
}

// expectedShift converts a change expected in the check's unit into a
// shift on the scale, starting from level at (the control hosts' level
// after the change; 0 when unknown).
func (s scale) expectedShift(expected, at float64) float64 {
	if math.IsNaN(at) {
		at = 0
	}
	if s.kind == KindProportion {
		at = min(max(at, 0), 1)
	}
	return s.of(at+expected) - s.of(at)
}
