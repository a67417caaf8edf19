package evaluation

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// thin keeps a series as it is at step 1, and otherwise averages step
// intervals per point, the first point padded so the change falls on a
// point's boundary; an interval without data does not count, a point
// without any is NaN.
func TestThin(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name      string
		xs        []float64
		step, pad int
		want      []float64
	}{
		{"step 1", []float64{1, nan, 3}, 1, 0, []float64{1, nan, 3}},
		{"pairs", []float64{1, 3, 5, 7}, 2, 0, []float64{2, 6}},
		{"padded", []float64{1, 3, 5, 7}, 2, 1, []float64{1, 4, 7}},
		{"gaps", []float64{nan, nan, 2, nan, 4}, 2, 0, []float64{nan, 2, 4}},
	} {
		if got := thin(tc.xs, tc.step, tc.pad); !cmp.Equal(got, tc.want, cmpopts.EquateNaNs()) {
			t.Errorf("%s: thin(%v, %d, %d) = %v, want %v", tc.name, tc.xs, tc.step, tc.pad, got, tc.want)
		}
	}
}
