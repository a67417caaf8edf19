package evaluation_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

const (
	iv      = 10 // seconds per interval
	version = 7
)

// reported turns a generated fleet into what the distributors of one zone
// report: each host's signals from t0, the canary hosts at the version
// from the change on, everyone else at version 6.
func reported(in canary.Input, t0 int64) evaluation.Data {
	var hs []*lehrpb.HostSignals
	add := func(hosts map[string]map[string][]float64, cohort bool) {
		for _, h := range slices.Sorted(maps.Keys(hosts)) {
			sig := &lehrpb.NamespaceSignals{Namespace: "d/ns", IntervalSeconds: iv, First: t0}
			for _, m := range slices.Sorted(maps.Keys(hosts[h])) {
				sig.Series = append(sig.Series, &lehrpb.SignalSeries{Name: m, Values: hosts[h][m]})
			}
			for i := range hosts[h][canary.MetricRequests] {
				v := uint64(version - 1)
				if cohort && i >= in.ChangeIndex {
					v = version
				}
				sig.Versions = append(sig.Versions, v)
			}
			hs = append(hs, &lehrpb.HostSignals{HostId: h, Cohort: cohort, Signals: sig})
		}
	}
	add(in.Canary, true)
	add(in.Control, false)
	return evaluation.Data{"zone-a": hs}
}

func TestJudgeReportedSignals(t *testing.T) {
	const t0 = 1_800_000_000 // a multiple of iv
	bake := 30 * iv * time.Second
	for _, tc := range []struct {
		name    string
		change  scenario.Change
		changed int64 // change time after the change interval's start, seconds
		want    lehrpb.CanaryVerdict
		explain string
	}{
		{"good change passes", scenario.Good, 0, lehrpb.CanaryVerdict_CANARY_VERDICT_PASS, "passed at the last look"},
		{"error ratio ×5 fails", scenario.ErrorRatioX5, 0, lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, `"error ratio"`},
		{"latency +50 % fails with the change mid-interval", scenario.LatencyUp50, -3, lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, `"latency"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := scenario.Generate(scenario.DefaultSpec(tc.change, 2, 0.5), 3)
			data := reported(in, t0)
			ev := &lehrpb.CanaryEvaluation{
				Id: "d/ns@7/stage-1", Namespace: "d/ns", Version: version,
				Trials:     []*lehrpb.CanaryTrial{{Zone: "zone-a"}},
				Config:     &lehrpb.CanaryAnalysis{},
				ChangeTime: timestamppb.New(time.Unix(t0+int64(in.ChangeIndex)*iv+tc.changed, 0)),
				Bake:       durationpb.New(bake),
			}
			res := evaluation.Judge(ev, data, time.Unix(t0+int64(len(in.Canary["canary-00"][canary.MetricRequests]))*iv, 0))
			if res.GetVerdict() != tc.want || !strings.Contains(res.GetReason(), tc.explain) {
				t.Fatalf("verdict %v: %s; want %v mentioning %s", res.GetVerdict(), res.GetReason(), tc.want, tc.explain)
			}
			if res.GetCanaryHosts() != 2 || res.GetControlHosts() != 20 || res.GetLooks() != evaluation.Looks {
				t.Errorf("hosts %d canary, %d control, %d looks; want 2, 20, %d", res.GetCanaryHosts(), res.GetControlHosts(), res.GetLooks(), evaluation.Looks)
			}
			// The series, framed on the change: at most BeforeIntervals
			// before it, the intervals the last look judged after it.
			if res.GetSeriesStep() != 1 || res.GetSeriesChangeIndex() != int32(min(in.ChangeIndex, evaluation.BeforeIntervals)) ||
				len(res.GetLookEnds()) != evaluation.Looks || res.GetLookEnds()[evaluation.Looks-1] != 30 {
				t.Errorf("series step %d, change at point %d, look ends %v; want 1, %d, 4 looks ending at 30",
					res.GetSeriesStep(), res.GetSeriesChangeIndex(), res.GetLookEnds(), min(in.ChangeIndex, evaluation.BeforeIntervals))
			}
			start := ev.GetChangeTime().AsTime().Add(-time.Duration(res.GetSeriesChangeIndex()) * iv * time.Second).Truncate(iv * time.Second)
			if got := res.GetSeriesStartTime().AsTime(); !got.Equal(start) && !got.Equal(start.Add(iv*time.Second)) {
				t.Errorf("series start %v, want %d intervals before the change at %v", got, res.GetSeriesChangeIndex(), ev.GetChangeTime().AsTime())
			}
			for _, c := range res.GetChecks() {
				if n := int(res.GetSeriesChangeIndex() + res.GetAfterIntervals()); len(c.GetCanarySeries()) != n || len(c.GetControlSeries()) != n {
					t.Errorf("check %s: series of %d and %d points, want %d", c.GetName(), len(c.GetCanarySeries()), len(c.GetControlSeries()), n)
				}
				if h := c.GetLookHistory(); len(h) != int(res.GetLook()) || h[len(h)-1].GetVerdict() != c.GetVerdict() {
					t.Errorf("check %s: look history %v; want one per look to %d, the last its verdict %v", c.GetName(), h, res.GetLook(), c.GetVerdict())
				}
				for _, x := range []float64{c.GetP(), c.GetStatistic(), c.GetCanaryAfter()} {
					if math.IsNaN(x) || math.IsInf(x, 0) {
						t.Errorf("check %s carries %v: the wire cannot", c.GetName(), x)
					}
				}
			}
		})
	}
}

// A canary host that reports the new version before the change (it moved
// early) or the old one after it has those intervals left out, never mixed
// into the wrong side.
func TestInputDropsIntervalsOnTheWrongSide(t *testing.T) {
	in := scenario.Generate(scenario.DefaultSpec(scenario.Good, 1, 0), 1)
	data := reported(in, 0)
	sig := data["zone-a"][0].GetSignals()
	sig.Versions[in.ChangeIndex-1] = version // early
	sig.Versions[in.ChangeIndex+2] = 3       // not at the version after the change
	ev := &lehrpb.CanaryEvaluation{Namespace: "d/ns", Version: version, Trials: []*lehrpb.CanaryTrial{{Zone: "zone-a"}},
		ChangeTime: timestamppb.New(time.Unix(int64(in.ChangeIndex)*iv, 0)), Bake: durationpb.New(time.Minute)}
	got, _, err := evaluation.Input(ev, data)
	if err != nil {
		t.Fatal(err)
	}
	reqs := got.Canary["zone-a/canary-00"][canary.MetricRequests]
	for i, want := range map[int]bool{got.ChangeIndex - 1: true, got.ChangeIndex + 2: true, got.ChangeIndex: false, got.ChangeIndex - 2: false} {
		if math.IsNaN(reqs[i]) != want {
			t.Errorf("interval %d (change at %d): NaN = %v; want %v", i, got.ChangeIndex, math.IsNaN(reqs[i]), want)
		}
	}
	if len(got.Control) != 20 {
		t.Errorf("%d control hosts; want 20", len(got.Control))
	}
}

const (
	qErrors   = `sum by (host) (increase(errors_total{$population}[$interval]))`
	qRequests = `sum by (host) (increase(requests_total{$population}[$interval]))`
)

func TestCheckAnalysis(t *testing.T) {
	bound := 0.05
	nan := math.NaN()
	check := func(mod func(c *lehrpb.CanaryCheck)) *lehrpb.CanaryAnalysis {
		c := &lehrpb.CanaryCheck{Name: "errors", Ratio: &lehrpb.CanaryRatio{Numerator: "request_errors", Denominator: "requests"},
			Direction: "increase", Kind: "proportion", Tolerance: 0.1, Max: &bound}
		mod(c)
		return &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{c}}
	}
	for _, tc := range []struct {
		name  string
		a     *lehrpb.CanaryAnalysis
		field string // "" for valid
	}{
		{"none", nil, ""},
		{"defaults", &lehrpb.CanaryAnalysis{}, ""},
		{"a full check", check(func(*lehrpb.CanaryCheck) {}), ""},
		{"alpha above the bound", &lehrpb.CanaryAnalysis{Alpha: 0.9}, "analysis.alpha"},
		{"unknown on_no_verdict", &lehrpb.CanaryAnalysis{OnNoVerdict: "shrug"}, "analysis.on_no_verdict"},
		{"too many control hosts", &lehrpb.CanaryAnalysis{ControlHosts: 1 << 20}, "analysis.control_hosts"},
		{"check without a name", check(func(c *lehrpb.CanaryCheck) { c.Name = "" }), "analysis.checks[0].name"},
		{"metric and ratio", check(func(c *lehrpb.CanaryCheck) { c.Metric = "requests" }), "analysis.checks[0]"},
		{"half a ratio", check(func(c *lehrpb.CanaryCheck) { c.Ratio.Denominator = "" }), "analysis.checks[0].ratio"},
		{"unknown direction", check(func(c *lehrpb.CanaryCheck) { c.Direction = "up" }), "analysis.checks[0].direction"},
		{"unknown kind", check(func(c *lehrpb.CanaryCheck) { c.Kind = "ratio" }), "analysis.checks[0].kind"},
		{"negative tolerance", check(func(c *lehrpb.CanaryCheck) { c.Tolerance = -1 }), "analysis.checks[0].tolerance"},
		{"bound not a number", check(func(c *lehrpb.CanaryCheck) { c.Max = &nan }), "analysis.checks[0].max"},
		{"a query ratio", check(func(c *lehrpb.CanaryCheck) {
			c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Numerator: qErrors, Denominator: qRequests}
		}), ""},
		{"a query value", check(func(c *lehrpb.CanaryCheck) { c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Value: qRequests} }), ""},
		{"ratio and query", check(func(c *lehrpb.CanaryCheck) { c.Query = &lehrpb.CanaryQuery{Value: qRequests} }), "analysis.checks[0]"},
		{"value and numerator", check(func(c *lehrpb.CanaryCheck) {
			c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Value: qRequests, Numerator: qErrors, Denominator: qRequests}
		}), "analysis.checks[0].query"},
		{"half a query ratio", check(func(c *lehrpb.CanaryCheck) { c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Numerator: qErrors} }), "analysis.checks[0].query"},
		{"a template without $population", check(func(c *lehrpb.CanaryCheck) {
			c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Numerator: qErrors, Denominator: `sum by (host) (rate(requests_total[1m]))`}
		}), "analysis.checks[0].query.denominator"},
		{"a misspelt placeholder", check(func(c *lehrpb.CanaryCheck) { c.Ratio, c.Query = nil, &lehrpb.CanaryQuery{Value: `x{$hosts}`} }), "analysis.checks[0].query.value"},
		{"a host label that is none", &lehrpb.CanaryAnalysis{HostLabel: "host name"}, "analysis.host_label"},
		{"no zone label", &lehrpb.CanaryAnalysis{ZoneLabel: "-"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := evaluation.CheckAnalysis("analysis", tc.a)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("CheckAnalysis: %v", err)
				}
				return
			}
			var fe *evaluation.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("CheckAnalysis: %v; want an error on %s", err, tc.field)
			}
		})
	}
	// A valid check reaches the judge as written.
	cs, err := signals.Checks(check(func(*lehrpb.CanaryCheck) {}).GetChecks())
	if err != nil || len(cs) != 1 || cs[0].Kind != canary.KindProportion || cs[0].Direction != canary.Increase || *cs[0].Max != bound || cs[0].Tolerance != 0.1 {
		t.Errorf("Checks = %+v, %v", cs, err)
	}
}

// An evaluation whose data never comes is given up after its bake plus
// the bake again (at least 5 minutes), so none is judged forever.
func TestGiveUpTime(t *testing.T) {
	change := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		bake time.Duration
		want time.Time
	}{
		{10 * time.Second, change.Add(10*time.Second + 5*time.Minute)},
		{time.Hour, change.Add(2 * time.Hour)},
	} {
		ev := &lehrpb.CanaryEvaluation{ChangeTime: timestamppb.New(change), Bake: durationpb.New(tc.bake)}
		if got := evaluation.GiveUpTime(ev); !got.Equal(tc.want) {
			t.Errorf("bake %v: gives up at %v; want %v", tc.bake, got, tc.want)
		}
	}
}

// HostChecks sums the canary hosts' own host-level checks of the
// evaluated version per check; other versions' and control hosts' reports
// do not count, and Explain names a check that failed on canary hosts.
func TestHostChecks(t *testing.T) {
	fail, pass := lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, lehrpb.CanaryVerdict_CANARY_VERDICT_PASS
	report := func(v uint64, errs lehrpb.CanaryVerdict) *lehrpb.NamespaceReport {
		return &lehrpb.NamespaceReport{Namespace: "d/app", Version: v, HostChecks: &lehrpb.HostChecks{Version: v, PreviousVersion: v - 1, Verdict: errs,
			Checks: []*lehrpb.HostCheckResult{{Name: "error ratio", Verdict: errs, Explanation: "rose on this host"}, {Name: "crashes", Verdict: pass}}}}
	}
	ev := &lehrpb.CanaryEvaluation{Namespace: "d/app", Version: 7, Trials: []*lehrpb.CanaryTrial{
		{Zone: "zone-a", CanaryHosts: []string{"a1", "a2", "a3"}},
		{Zone: "zone-b"}, // no named hosts: every reporting host with checks of version 7
	}}
	reports := evaluation.Reports{
		"zone-a": {"a1": report(7, fail), "a2": report(7, pass), "a3": report(6, fail), "a9": report(7, fail)},
		"zone-b": {"b1": report(7, fail), "b2": report(5, fail)},
	}
	got := evaluation.HostChecks(ev, reports)
	if len(got) != 2 {
		t.Fatalf("host checks %v; want error ratio and crashes", got)
	}
	errs := got[0]
	if errs.GetName() != "error ratio" || errs.GetHosts() != 3 || errs.GetFailed() != 2 ||
		!slices.Equal(errs.GetFailedHosts(), []string{"zone-a/a1", "zone-b/b1"}) || errs.GetExplanation() != "zone-a/a1: rose on this host" {
		t.Errorf("error ratio: %v; want failed on zone-a/a1 and zone-b/b1 of 3 hosts (a3 reports another version, a9 is not a canary host)", errs)
	}
	if c := got[1]; c.GetName() != "crashes" || c.GetHosts() != 3 || c.GetFailed() != 0 {
		t.Errorf("crashes: %v; want passed on 3 hosts", c)
	}
	ev.Result = &lehrpb.CanaryResult{Verdict: pass, Looks: 4, Look: 4, HostChecks: got}
	if s := evaluation.Explain(ev); !strings.Contains(s, "host-level error ratio failed on 2 of the 3 canary host(s)") {
		t.Errorf("Explain: %s; want the host-level failure named", s)
	}
}

// An evaluation with a check written as a query is refused by a control
// without a metrics source, saying to give it one.
func TestCreateWithoutSource(t *testing.T) {
	svc, err := evaluation.New(evaluation.Options{Store: newFakeStore()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(context.Background(), &lehrpb.CanaryEvaluation{
		Id: "d/ns@7/x", Namespace: "d/ns", Version: 7, Trials: []*lehrpb.CanaryTrial{{Zone: "zone-a"}},
		Config:     &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{{Name: "q", Query: &lehrpb.CanaryQuery{Value: qRequests}}}},
		ChangeTime: timestamppb.Now(), Bake: durationpb.New(time.Minute),
	})
	var fe *evaluation.FieldError
	if !errors.As(err, &fe) || fe.Field != "config.checks[0].query" || !strings.Contains(fe.Message, "--metrics-url") {
		t.Fatalf("Create: %v; want config.checks[0].query refused, naming --metrics-url", err)
	}
}
