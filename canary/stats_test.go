package canary

import (
	"math"
	"testing"
)

// Reference values recorded from SciPy 1.10.1 (Debian python3-scipy):
// scipy.stats.t.sf, scipy.stats.norm, scipy.stats.binom and numpy's least
// squares, as in the comment of each case.

func near(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.10g; SciPy says %.10g", what, got, want)
	}
}

func TestTailPAgainstSciPy(t *testing.T) {
	for _, tc := range []struct{ stat, df, want float64 }{
		{2.5, 3, 0.04385332350403277},   // t.sf(2.5, 3)
		{3.1, 19, 0.002947560473945373}, // t.sf(3.1, 19)
		{-0.5, 5, 0.6808505641795355},   // t.sf(-0.5, 5)
		{10, 1, 0.03172551743055356},    // t.sf(10, 1)
	} {
		near(t, "tailP", tailP(tc.stat, tc.df, false), tc.want, 1e-9)
	}
	near(t, "two-sided tailP", tailP(-2.5, 3, true), 2*0.04385332350403277, 1e-9)
}

func TestSpentAgainstSciPy(t *testing.T) {
	// 2*(1 - norm.cdf(norm.ppf(1 - 0.01/2) / sqrt(t)))
	for _, tc := range []struct{ t, want float64 }{
		{0.25, 2.5819272964078266e-07},
		{0.5, 0.00026971695663147166},
		{0.75, 0.0029364682744434933},
		{1, 0.01},
	} {
		near(t, "spent", spent(0.01, tc.t), tc.want, 1e-6)
	}
}

func TestSqrtPoissonVarAgainstSciPy(t *testing.T) {
	// Σ poisson.pmf(k, λ)·k − (Σ poisson.pmf(k, λ)·√k)²
	for _, tc := range []struct{ lambda, want float64 }{
		{0.1, 0.09056171726915355},
		{1, 0.4021731161211436},
		{5, 0.2860894021847784},
		{50, 0.2519308287920765},
	} {
		near(t, "sqrtPoissonVar", sqrtPoissonVar(tc.lambda), tc.want, 1e-9)
	}
}

func TestExactShareAgainstSciPy(t *testing.T) {
	// 5 events in all, all on the canary host after the change, which is
	// 30 of 1,890 host-intervals: binom.sf(4, 5, 30/1890).
	canary := []hostSeries{{host: "c", series: series{num: make([]float64, 90), den: ones(90)}}}
	for _, i := range []int{61, 65, 70, 80, 89} {
		canary[0].num[i] = 1
	}
	var control []hostSeries
	for range 20 {
		control = append(control, hostSeries{host: "k", series: series{num: make([]float64, 90), den: ones(90)}})
	}
	near(t, "exactShare", exactShare(canary, control, 60, 90, KindCount, Increase, 0), 1.0076210988534706e-09, 1e-7)
	// Decrease: 40 events, 5 of them in the canary-after share of 3 of 10
	// intervals: binom.cdf(5, 40, 0.3).
	few := []hostSeries{{host: "c", series: series{num: []float64{35, 0, 0, 0, 0, 0, 0, 5, 0, 0}, den: ones(10)}}}
	near(t, "exactShare decrease", exactShare(few, nil, 7, 10, KindCount, Decrease, 0), 0.008618053311374194, 1e-9)
}

func ones(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func TestShiftWeightsAgainstLeastSquares(t *testing.T) {
	// numpy.linalg.lstsq on the quasi-differences r[t] − 0.6·r[t−1]
	// against [1 − 0.6, step(t) − 0.6·step(t−1)], step at index 6: the
	// step's coefficient.
	r := []float64{0.1, 0.3, -0.2, 0.05, 0.4, 0.2, 1.1, 0.9, 1.3, 1.0, 0.8}
	valid := make([]bool, len(r))
	for i := range valid {
		valid[i] = true
	}
	w, ok := shiftWeights(valid, 6, 0.6)
	if !ok {
		t.Fatal("no weights")
	}
	near(t, "level shift", dot(w, r), 0.8614107883817429, 1e-9)
	// With phi = 0 it is the difference of means.
	w, _ = shiftWeights(valid, 6, 0)
	near(t, "difference of means", dot(w, r), (1.1+0.9+1.3+1.0+0.8)/5-(0.1+0.3-0.2+0.05+0.4+0.2)/6, 1e-12)
}

func TestExactSelf(t *testing.T) {
	// One canary host: 10 events in 60 intervals before, 15 in 30 after;
	// the control host's rate moved from 60/60 to 30/30, so with half an
	// event on each side ρ = (30.5/30)/(60.5/60) and the share after is
	// 30ρ/(60 + 30ρ): sum(comb(25, k)·p^k·(1−p)^(25−k) for k ≥ 15), by
	// Python's exact integers.
	num := make([]float64, 90)
	for i := range 10 {
		num[i*6] = 1
	}
	for i := range 15 {
		num[60+i*2] = 1
	}
	canary := []hostSeries{{host: "c", series: series{num: num, den: ones(90)}}}
	control := []hostSeries{{host: "k", series: series{num: ones(90), den: ones(90)}}}
	near(t, "exactSelf", exactSelf(canary, control, 60, 90, KindCount, Increase, 0), 0.005933825648706598, 1e-7)
}

func TestSortedMedian(t *testing.T) {
	v := []float64{1, 2, 4, 8, 16}
	for _, tc := range []struct {
		skip int
		want float64
	}{{-1, 4}, {0, 6}, {2, 5}, {4, 3}} {
		if got := sortedMedian(v, tc.skip); got != tc.want {
			t.Errorf("sortedMedian(%v, %d) = %v; want %v", v, tc.skip, got, tc.want)
		}
	}
	if !math.IsNaN(sortedMedian([]float64{3}, 0)) {
		t.Error("the median of nothing is not NaN")
	}
}
