package evaluation_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// fakeSource answers every query with one series per host its
// population's matcher names: requests 100 per second of the step, errors
// 1 % of them, 20 % on host c-1 from change on.
type fakeSource struct {
	step    time.Duration
	change  time.Time
	queries []string
}

var hostsMatcher = regexp.MustCompile(`host=~"([^"]*)"`)

func (f *fakeSource) Name() string        { return "http://fake:9090" }
func (f *fakeSource) Step() time.Duration { return f.step }
func (f *fakeSource) QueryRange(_ context.Context, q string, start, end time.Time, step time.Duration) ([]metricsource.Series, error) {
	f.queries = append(f.queries, q)
	m := hostsMatcher.FindStringSubmatch(q)
	if m == nil {
		return nil, fmt.Errorf("no host matcher in %s", q)
	}
	var out []metricsource.Series
	for _, h := range strings.Split(m[1], "|") {
		sr := metricsource.Series{Labels: map[string]string{"host": h, "zone": "zone-a"}}
		for t := start; !t.After(end); t = t.Add(step) {
			reqs := 100 * step.Seconds()
			v := reqs
			if strings.Contains(q, "errors") {
				v = 0.01 * reqs
				if h == "c-1" && t.After(f.change) {
					v = 0.2 * reqs
				}
			}
			sr.Values = append(sr.Values, v)
		}
		out = append(out, sr)
	}
	return out, nil
}

// The interval of an evaluation whose checks are all queries is the
// source's step, whatever the agents report at; one that also reads the
// agents' metrics takes the agents' interval, and judges both kinds of
// check on the same intervals.
func TestQueryChecksBesideAgentSignals(t *testing.T) {
	const agentIv = 1
	t0 := time.Unix(1_800_000_000, 0)
	change := t0.Add(120 * time.Second)
	now := change.Add(40 * time.Second)
	hosts := []string{"c-1", "k-1", "k-2", "k-3", "k-4", "k-5", "k-6"}
	// What the agents report: 160 one-second intervals of requests.
	var hs []*lehrpb.HostSignals
	for _, h := range hosts {
		sig := &lehrpb.NamespaceSignals{Namespace: "d/ns", IntervalSeconds: agentIv, First: t0.Unix()}
		var reqs []float64
		for i := 0; i < 160; i++ {
			v := uint64(6)
			if h == "c-1" && t0.Add(time.Duration(i)*time.Second).Compare(change) >= 0 {
				v = 7
			}
			sig.Versions = append(sig.Versions, v)
			reqs = append(reqs, 100)
		}
		sig.Series = []*lehrpb.SignalSeries{{Name: "requests", Values: reqs}}
		hs = append(hs, &lehrpb.HostSignals{HostId: h, Cohort: h == "c-1", Signals: sig})
	}
	query := &lehrpb.CanaryCheck{Name: "errors", Kind: "proportion", Query: &lehrpb.CanaryQuery{
		Numerator:   `sum by (host) (increase(errors_total{$population}[$interval]))`,
		Denominator: `sum by (host) (increase(requests_total{$population}[$interval]))`}}
	agentCheck := &lehrpb.CanaryCheck{Name: "throughput", Metric: "requests", Kind: "count", Direction: "decrease", Tolerance: 0.2}
	for _, tc := range []struct {
		name   string
		checks []*lehrpb.CanaryCheck
		iv     uint32
		window string
	}{
		{"only queries: the source's step", []*lehrpb.CanaryCheck{query}, 5, "[5s]"},
		{"queries and agent metrics: the agents' interval", []*lehrpb.CanaryCheck{query, agentCheck}, agentIv, "[1s]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeSource{step: 5 * time.Second, change: change}
			st := newFakeStore()
			st.zones["zone-a"] = []*lehrpb.DistributorStatus{{Signals: hs}}
			svc, err := evaluation.New(evaluation.Options{Store: st, Source: src, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := svc.Create(context.Background(), &lehrpb.CanaryEvaluation{
				Id: "d/ns@7/x", Namespace: "d/ns", Version: 7, Trials: []*lehrpb.CanaryTrial{{Zone: "zone-a"}},
				Config:     &lehrpb.CanaryAnalysis{Checks: tc.checks},
				ChangeTime: timestamppb.New(change), Bake: durationpb.New(30 * time.Second),
			})
			if err != nil {
				t.Fatal(err)
			}
			if ev, err = svc.Step(context.Background(), store.Guard{}, ev); err != nil {
				t.Fatal(err)
			}
			res := ev.GetResult()
			if res.GetIntervalSeconds() != tc.iv || res.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || len(res.GetChecks()) != len(tc.checks) {
				t.Fatalf("%d s intervals, %s; want %d s and FAIL on %d checks", res.GetIntervalSeconds(), evaluation.Explain(ev), tc.iv, len(tc.checks))
			}
			if c := res.GetChecks()[0]; c.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || math.Abs(c.GetCanaryAfter()-0.2) > 1e-9 || c.GetControlHosts() != 6 {
				t.Errorf("errors: %v %s (canary after %v, %d control hosts); want FAIL at 20 %% against 6 control hosts", c.GetVerdict(), c.GetExplanation(), c.GetCanaryAfter(), c.GetControlHosts())
			}
			if len(tc.checks) > 1 {
				if c := res.GetChecks()[1]; c.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS || c.GetCanaryHosts() != 1 {
					t.Errorf("throughput: %v %s; want PASS on the agents' data", c.GetVerdict(), c.GetExplanation())
				}
			}
			// One query per part and population, with the population's
			// hosts and the interval filled in.
			want := []string{`host=~"c-1",zone="zone-a"`, `host=~"k-1|k-2|k-3|k-4|k-5|k-6",zone="zone-a"`}
			if len(src.queries) != 4 || !strings.Contains(src.queries[0], want[0]) || !strings.Contains(src.queries[2], want[1]) || !strings.Contains(src.queries[0], tc.window) {
				t.Errorf("queries %q; want 4, for %q then %q, windows %s", src.queries, want[0], want[1], tc.window)
			}
			// Judged again in the same interval: no new query.
			if _, err := svc.Step(context.Background(), store.Guard{}, ev); err != nil {
				t.Fatal(err)
			}
			if len(src.queries) != 4 {
				t.Errorf("%d queries after a second look in the same interval; want the 4 of the first", len(src.queries))
			}
		})
	}
}
