package signals

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/proto/lehrpb"
)

// sig builds signals of one series "m" from first (Unix seconds, 10 s
// intervals) with the given versions and values.
func sig(first int64, versions []uint64, values ...float64) *lehrpb.NamespaceSignals {
	return &lehrpb.NamespaceSignals{Namespace: "demo/a", IntervalSeconds: 10, First: first, Versions: versions,
		Series: []*lehrpb.SignalSeries{{Name: "m", Values: values}}}
}

var nan = math.NaN()

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *lehrpb.NamespaceSignals
		want string
	}{
		{"valid", sig(100, []uint64{1, 1}, 1, 2), ""},
		{"no interval", &lehrpb.NamespaceSignals{}, "x.interval_seconds: 0"},
		{"unaligned", sig(105, []uint64{1}, 1), "x.first: 105 is not a multiple of interval_seconds 10"},
		{"short", sig(100, []uint64{1, 1}, 1), "x.series[0] (m): 1 values for 2 intervals"},
		{"unnamed", &lehrpb.NamespaceSignals{IntervalSeconds: 10, Series: []*lehrpb.SignalSeries{{}}}, "x.series[0].name: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate("x", tc.s)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	other := func(s *lehrpb.NamespaceSignals) *lehrpb.NamespaceSignals {
		s.Series = append(s.Series, &lehrpb.SignalSeries{Name: "n", Values: []float64{9}})
		return s
	}
	for _, tc := range []struct {
		name     string
		old, add *lehrpb.NamespaceSignals
		limit    int
		want     *lehrpb.NamespaceSignals
	}{
		{"first", nil, sig(100, []uint64{1}, 1), 10, sig(100, []uint64{1}, 1)},
		{"appended", sig(100, []uint64{1, 1}, 1, 2), sig(120, []uint64{2}, 3), 10, sig(100, []uint64{1, 1, 2}, 1, 2, 3)},
		{"overlap: the newer answer wins", sig(100, []uint64{1, 1}, 1, 2), sig(110, []uint64{2, 2}, 5, 6), 10, sig(100, []uint64{1, 2, 2}, 1, 5, 6)},
		{"a gap is missing", sig(100, []uint64{1}, 1), sig(130, []uint64{1}, 4), 10, sig(100, []uint64{1, 0, 0, 1}, 1, nan, nan, 4)},
		{"bounded to the newest", sig(100, []uint64{1, 1}, 1, 2), sig(120, []uint64{1, 1}, 3, 4), 3, sig(110, []uint64{1, 1, 1}, 2, 3, 4)},
		{"another interval replaces", &lehrpb.NamespaceSignals{IntervalSeconds: 60, First: 60, Versions: []uint64{1}, Series: []*lehrpb.SignalSeries{{Name: "m", Values: []float64{7}}}},
			sig(100, []uint64{1}, 1), 10, sig(100, []uint64{1}, 1)},
		{"a series only one side has", sig(100, []uint64{1}, 1), other(sig(110, []uint64{1}, 2)), 10,
			&lehrpb.NamespaceSignals{Namespace: "demo/a", IntervalSeconds: 10, First: 100, Versions: []uint64{1, 1},
				Series: []*lehrpb.SignalSeries{{Name: "m", Values: []float64{1, 2}}, {Name: "n", Values: []float64{nan, 9}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var oldCopy *lehrpb.NamespaceSignals
			if tc.old != nil {
				oldCopy = proto.CloneOf(tc.old)
			}
			got := Merge(tc.old, tc.add, tc.limit)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform(), cmp.Comparer(func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) })); diff != "" {
				t.Errorf("Merge (-want +got):\n%s", diff)
			}
			if tc.old != nil && !proto.Equal(oldCopy, tc.old) {
				t.Errorf("Merge modified old")
			}
		})
	}
}

func TestAnswer(t *testing.T) {
	long := func() *lehrpb.NamespaceSignals {
		var vs []uint64
		var xs []float64
		for i := range 1000 {
			vs = append(vs, 1)
			xs = append(xs, float64(i))
		}
		return sig(0, vs, xs...)
	}
	get := func(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals {
		ns := w.GetNamespace()
		if ns == "demo/a" {
			return long()
		}
		return nil
	}
	req := &lehrpb.SignalsRequest{Namespaces: []*lehrpb.SignalsWanted{{Namespace: "demo/a", Since: 9950}, {Namespace: "demo/unknown"}}}
	got := Answer(req, get, 1<<20)
	if len(got.GetNamespaces()) != 1 {
		t.Fatalf("answer has %d namespaces, want 1 (the unknown one left out)", len(got.GetNamespaces()))
	}
	// Since 9950 rounds up to the interval starting at 9950 (index 995).
	if s := got.GetNamespaces()[0]; s.GetFirst() != 9950 || len(s.GetVersions()) != 5 || s.GetSeries()[0].GetValues()[0] != 995 {
		t.Errorf("answer from %d with %d intervals, first value %v; want from 9950, 5 intervals, 995", s.GetFirst(), len(s.GetVersions()), s.GetSeries()[0].GetValues()[0])
	}
	// A small budget keeps the newest intervals only.
	all := &lehrpb.SignalsRequest{Namespaces: []*lehrpb.SignalsWanted{{Namespace: "demo/a"}}}
	small := Answer(all, get, 2000)
	if n := proto.Size(small); n > 2000 {
		t.Errorf("answer of %d bytes over a 2000-byte budget", n)
	}
	s := small.GetNamespaces()[0]
	if last := s.GetSeries()[0].GetValues()[len(s.GetVersions())-1]; last != 999 || End(s) != 10000 {
		t.Errorf("a trimmed answer ends at %d with %v; want the newest interval (999) kept", End(s), last)
	}
}

// TestCheckProtoRoundTrip: a judge's check survives the wire, expected
// change included.
func TestCheckProtoRoundTrip(t *testing.T) {
	m := 0.5
	for _, c := range []canary.Check{
		canary.PolicyCheck(0.25),
		{Name: "errors", Metric: "request_errors", Direction: canary.Decrease, Kind: canary.KindCount, Tolerance: 0.1, Max: &m},
	} {
		got, err := Checks([]*lehrpb.CanaryCheck{CheckProto(c)})
		if err != nil || len(got) != 1 {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
		if d := cmp.Diff(c, got[0]); d != "" {
			t.Errorf("round trip of %s (-sent +received):\n%s", c.Name, d)
		}
	}
	if _, err := Checks([]*lehrpb.CanaryCheck{{Name: "x", Metric: "x", Expected: math.NaN()}}); err == nil || !strings.Contains(err.Error(), "expected") {
		t.Errorf("NaN expected: %v; want an error naming expected", err)
	}
}

// Checks written as queries are control's alone: the agents get the
// others, and nil when none is left (they then run the defaults); to the
// judge they read the series control fills in.
func TestQueryChecks(t *testing.T) {
	q := &lehrpb.CanaryCheck{Name: "errors", Query: &lehrpb.CanaryQuery{Numerator: "n{$population}", Denominator: "d{$population}"}}
	v := &lehrpb.CanaryCheck{Name: "p99", Query: &lehrpb.CanaryQuery{Value: "v{$population}"}}
	m := &lehrpb.CanaryCheck{Name: "throughput", Metric: "requests"}
	if got := AgentChecks([]*lehrpb.CanaryCheck{q, m, v}); len(got) != 1 || got[0] != m {
		t.Errorf("AgentChecks = %v; want the metric check alone", got)
	}
	if got := AgentChecks([]*lehrpb.CanaryCheck{q, v}); got != nil {
		t.Errorf("AgentChecks of queries only = %v; want nil", got)
	}
	cs, err := Checks([]*lehrpb.CanaryCheck{q, v})
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Ratio == nil || cs[0].Ratio.Numerator != "errors.numerator" || cs[0].Ratio.Denominator != "errors.denominator" || cs[1].Metric != "p99.value" {
		t.Errorf("Checks = %+v; want the query series' names", cs)
	}
}
