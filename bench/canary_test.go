package bench

import (
	"testing"

	"github.com/aclements/go-moremath/stats"

	"lehr.dev/lehr/canary/scenario"
)

// The Mann-Whitney U test of the Kayenta-style judge agrees with SciPy
// 1.10.1's scipy.stats.mannwhitneyu(x, y, alternative='two-sided'): exact
// for small samples without ties, the normal approximation (method=
// 'asymptotic', with or without continuity correction) for large ones.
func TestMannWhitneyAgainstSciPy(t *testing.T) {
	x := []float64{1.2, 3.4, 2.2, 5.1, 4.4, 3.3, 2.9}
	y := []float64{0.5, 1.1, 2.0, 1.7, 0.9, 1.4, 2.3, 1.0}
	var a, b []float64
	for i := range 60 {
		a = append(a, float64(i*37%101)/10)
		b = append(b, float64(i*53%103)/10+0.55)
	}
	for _, tc := range []struct {
		name   string
		x, y   []float64
		lo, hi float64 // SciPy's values bracket ours
	}{
		{"small, exact", x, y, 0.005905205905205905 - 1e-12, 0.005905205905205905 + 1e-12},
		{"large, asymptotic", a, b, 0.5117727476996167 - 1e-9, 0.5134626482929676 + 1e-9},
	} {
		r, err := stats.MannWhitneyUTest(tc.x, tc.y, stats.LocationDiffers)
		if err != nil {
			t.Fatal(err)
		}
		if r.P < tc.lo || r.P > tc.hi {
			t.Errorf("%s: p = %.12g; SciPy says %.12g to %.12g", tc.name, r.P, tc.lo, tc.hi)
		}
	}
}

// The Kayenta-style judge fails a fleet whose canary hosts are plainly
// worse, and passes one identical to its controls.
func TestKayentaStyleJudge(t *testing.T) {
	bad := scenario.Generate(scenario.DefaultSpec(scenario.ErrorRatioX5, 3, 0), 1)
	if !kayentaStyleFails(bad) {
		t.Error("an error ratio ×5 on 3 canary hosts passed")
	}
	same := scenario.Generate(scenario.DefaultSpec(scenario.Good, 3, 0), 1)
	same.Canary = map[string]map[string][]float64{"copy": same.Control["control-00"]}
	same.Control = map[string]map[string][]float64{"control-00": same.Control["control-00"]}
	if kayentaStyleFails(same) {
		t.Error("a canary identical to its control failed")
	}
}
