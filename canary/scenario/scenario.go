// Package scenario generates seeded, realistic fleets of canary and
// control hosts around a change, good or bad, for testing and
// benchmarking canary judges: hosts that differ from each other,
// autocorrelated noise, traffic shared by the fleet with its trends and
// incidents, zero-error baselines, and the bad changes a judge must catch.
//
// Pure and deterministic: the same Spec and seed give the same fleet.
package scenario

import (
	"fmt"
	"math"
	"math/rand/v2"

	"lehr.dev/lehr/canary"
)

// Change is what the change does to canary hosts.
type Change int

// The changes. Good leaves canary hosts as they were; every other one is
// a bad change a judge should catch. The mild ones (Mild) come last, so a
// seed gives the same fleet for the others as before they were added.
const (
	Good         Change = iota
	ErrorRatioX5        // error ratio ×5
	NewErrors           // errors where the fleet had none (≈ 0.2 per interval per canary host)
	LatencyUp50         // latency +50 %
	CrashLoop           // the process restarts every few intervals and serves less
	LatencyVarX4        // latency variance ×4 (its swings ×2), mean unchanged
	SlowMode30          // latency ×2 in 30 % of intervals
	ErrorRatioX2        // error ratio ×2 (mild)
	LatencyUp20         // latency +20 % (mild)
)

// Changes lists every change, Good first.
var Changes = []Change{Good, ErrorRatioX5, NewErrors, LatencyUp50, CrashLoop, LatencyVarX4, SlowMode30, ErrorRatioX2, LatencyUp20}

func (c Change) String() string {
	return [...]string{"good", "error ratio ×5", "new errors", "latency +50 %", "crash loop", "latency variance ×4", "slow mode 30 %",
		"error ratio ×2", "latency +20 %"}[c]
}

// Mild reports whether c is one of the mild bad changes (error ratio ×2,
// latency +20 %), harder to catch than the others and reported apart.
func (c Change) Mild() bool { return c == ErrorRatioX2 || c == LatencyUp20 }

// Spec describes one fleet.
type Spec struct {
	Change       Change
	Canary       int     // canary hosts (1 to 10 in the bench)
	Control      int     // control hosts
	Before       int     // intervals before the change
	After        int     // intervals after the change (the bake)
	Phi          float64 // AR(1) coefficient of each host's noise, 0 to 0.95
	ZeroErrors   bool    // the fleet serves without errors (NewErrors forces it)
	Incidents    bool    // fleet-wide incidents (errors ×3, latency ×1.5 for a few intervals) may happen
	HostSpread   float64 // log-sd of host-to-host differences in rates, error ratios and latency
	RequestsMean float64 // mean requests per host per interval
}

// DefaultSpec is a fleet of 20 control hosts, 60 intervals before and 30
// after, moderate host differences and 1,000 requests per interval.
func DefaultSpec(c Change, canaries int, phi float64) Spec {
	return Spec{Change: c, Canary: canaries, Control: 20, Before: 60, After: 30, Phi: phi,
		Incidents: true, HostSpread: 0.3, RequestsMean: 1000}
}

// Generate returns the judge's input for s, drawn from seed, with no
// checks set (the judge's defaults).
func Generate(s Spec, seed uint64) canary.Input {
	rng := rand.New(rand.NewPCG(seed, 0x1e4c))
	n := s.Before + s.After
	zero := s.ZeroErrors || s.Change == NewErrors
	// What the fleet shares: a slow traffic trend and incidents.
	traffic := make([]float64, n)
	incident := make([]bool, n)
	phase := rng.Float64() * 2 * math.Pi
	for t := range traffic {
		traffic[t] = 1 + 0.2*math.Sin(phase+2*math.Pi*float64(t)/float64(4*n))
	}
	if s.Incidents && rng.Float64() < 0.5 {
		start, length := rng.IntN(n), 3+rng.IntN(10)
		for t := start; t < min(n, start+length); t++ {
			incident[t] = true
		}
	}
	in := canary.Input{Interval: 10e9, ChangeIndex: s.Before, Canary: map[string]map[string][]float64{}, Control: map[string]map[string][]float64{}}
	for i := range s.Canary + s.Control {
		isCanary := i < s.Canary
		h := host{rng: rng, spec: s, zero: zero, traffic: traffic, incident: incident}
		ms := h.generate(isCanary)
		if isCanary {
			in.Canary[fmt.Sprintf("canary-%02d", i)] = ms
		} else {
			in.Control[fmt.Sprintf("control-%02d", i-s.Canary)] = ms
		}
	}
	return in
}

type host struct {
	rng      *rand.Rand
	spec     Spec
	zero     bool
	traffic  []float64
	incident []bool
}

// ar returns an AR(1) series with coefficient phi and marginal standard
// deviation sd, innovations scaled by scale(t) from t on.
func (h host) ar(n int, sd float64, scale func(t int) float64) []float64 {
	phi := h.spec.Phi
	out := make([]float64, n)
	x := h.rng.NormFloat64() * sd
	innov := sd * math.Sqrt(1-phi*phi)
	for t := range out {
		x = phi*x + innov*scale(t)*h.rng.NormFloat64()
		out[t] = x
	}
	return out
}

func (h host) generate(isCanary bool) map[string][]float64 {
	s, rng := h.spec, h.rng
	n := s.Before + s.After
	changed := func(c Change, t int) bool { return isCanary && s.Change == c && t >= s.Before }
	one := func(int) float64 { return 1 }
	rate := s.RequestsMean * math.Exp(s.HostSpread*rng.NormFloat64())
	errRatio := 0.005 * math.Exp(2*s.HostSpread*rng.NormFloat64())
	latency := 0.05 * math.Exp(s.HostSpread*rng.NormFloat64())
	errNoise := h.ar(n, 0.3, one)
	latNoise := h.ar(n, 0.1, func(t int) float64 {
		if changed(LatencyVarX4, t) {
			return 2
		}
		return 1
	})
	reqs, errs, secs, restarts := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for t := range reqs {
		r := rate * h.traffic[t]
		if changed(CrashLoop, t) {
			r *= 0.6
			restarts[t] = float64(poisson(rng, 0.4))
		}
		reqs[t] = float64(poisson(rng, r))
		p := errRatio * math.Exp(errNoise[t])
		lat := latency * math.Exp(latNoise[t])
		if h.incident[t] {
			p *= 3
			lat *= 1.5
		}
		switch {
		case changed(ErrorRatioX5, t):
			p *= 5
		case changed(LatencyUp50, t):
			lat *= 1.5
		case changed(SlowMode30, t) && rng.Float64() < 0.3:
			lat *= 2
		case changed(ErrorRatioX2, t):
			p *= 2
		case changed(LatencyUp20, t):
			lat *= 1.2
		}
		switch {
		case changed(NewErrors, t):
			errs[t] = float64(poisson(rng, 0.2))
		case !h.zero:
			errs[t] = float64(poisson(rng, reqs[t]*min(p, 1)))
		}
		// A mean over reqs requests: sampling noise shrinks with traffic.
		secs[t] = reqs[t] * lat * math.Exp(0.3*rng.NormFloat64()/math.Sqrt(max(reqs[t], 1)))
	}
	return map[string][]float64{
		canary.MetricRequests:            reqs,
		canary.MetricRequestErrors:       errs,
		canary.MetricRequestSeconds:      secs,
		canary.MetricRequestLatencyCount: reqs,
		canary.MetricProcessRestarts:     restarts,
		canary.MetricLeaseLosses:         make([]float64, n),
		canary.MetricConsumerRejections:  make([]float64, n),
	}
}

// poisson draws from Poisson(lambda): Knuth's method for small lambda, a
// rounded normal approximation for large.
func poisson(rng *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	if lambda > 50 {
		return max(0, int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())))
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
