package bench

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(samples)
	want := Summary{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize(1..100 ms) mismatch (-want +got):\n%s", diff)
	}
	if samples[0] != 100*time.Millisecond {
		t.Errorf("Summarize modified its input: samples[0] = %v", samples[0])
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"single", []time.Duration{7}, 99, 7},
		{"p50 of two", []time.Duration{1, 2}, 50, 1},
		{"p99 of ten is max", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of ten", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{"tiny p", []time.Duration{1, 2, 3}, 0.001, 1},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(%v, %v) = %v, want %v", tt.name, tt.sorted, tt.p, got, tt.want)
		}
	}
}

func TestMedianSummary(t *testing.T) {
	reps := []Summary{
		{N: 10, P50: 1, P90: 5, P99: 9, Max: 100, Mean: 2},
		{N: 10, P50: 3, P90: 6, P99: 7, Max: 10, Mean: 4},
		{N: 10, P50: 2, P90: 4, P99: 8, Max: 20, Mean: 3},
	}
	got := MedianSummary(reps)
	want := Summary{N: 30, P50: 2, P90: 5, P99: 8, Max: 20, Mean: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MedianSummary mismatch (-want +got):\n%s", diff)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median(4,1,3,2) = %v, want 2.5", got)
	}
}
