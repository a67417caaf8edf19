package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of one repetition's samples.
type Summary struct {
	// N is the number of samples.
	N int `json:"n"`
	// P50, P90, P99 and Max are nearest-rank percentiles.
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// Mean is the arithmetic mean.
	Mean time.Duration `json:"mean_ns"`
}

// Summarize returns the summary of samples; it does not modify samples.
// An empty slice gives the zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Summary{
		N:    len(s),
		P50:  Percentile(s, 50),
		P90:  Percentile(s, 90),
		P99:  Percentile(s, 99),
		Max:  s[len(s)-1],
		Mean: sum / time.Duration(len(s)),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest sample such that at least p% of the samples are at
// or below it. sorted must be sorted ascending and non-empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// MedianSummary combines the summaries of several repetitions: each field is
// the median of that field across reps (N is the total sample count). This
// is what the harness reports, so one noisy repetition moves no figure.
func MedianSummary(reps []Summary) Summary {
	if len(reps) == 0 {
		return Summary{}
	}
	pick := func(f func(Summary) time.Duration) time.Duration {
		v := make([]time.Duration, len(reps))
		for i, r := range reps {
			v[i] = f(r)
		}
		return MedianDuration(v)
	}
	out := Summary{
		P50:  pick(func(s Summary) time.Duration { return s.P50 }),
		P90:  pick(func(s Summary) time.Duration { return s.P90 }),
		P99:  pick(func(s Summary) time.Duration { return s.P99 }),
		Max:  pick(func(s Summary) time.Duration { return s.Max }),
		Mean: pick(func(s Summary) time.Duration { return s.Mean }),
	}
	for _, r := range reps {
		out.N += r.N
	}
	return out
}

// MedianDuration returns the median of v (the mean of the two middle values
// for an even count); 0 for an empty slice.
func MedianDuration(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Median returns the median of v (the mean of the two middle values for an
// even count); 0 for an empty slice.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
