package evaluation

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// Checks written as queries (lehrpb.CanaryQuery): control reads their data
// from its metrics source (lehr control --metrics-url), per trial and
// population, and lays it beside what the agents report, under the names
// signals.QuerySeries gives them; the same judge then decides
// (docs/canary.md, "Sources: agent-scraped and time-series").

// MetricSource is control's metrics source (*metricsource.Source).
type MetricSource interface {
	// Name is the source's URL without credentials.
	Name() string
	// Step is the interval of an evaluation none of whose hosts reports
	// agent signals.
	Step() time.Duration
	// QueryRange runs a query over [start, end] at step.
	QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]metricsource.Series, error)
}

// checkQueries validates the query checks of a (templates, label names)
// under prefix.
func checkQueries(prefix string, a *lehrpb.CanaryAnalysis) error {
	if err := metricsource.CheckLabel(a.GetHostLabel(), false); err != nil {
		return fieldErr(prefix+".host_label", "%v", err)
	}
	if err := metricsource.CheckLabel(a.GetZoneLabel(), true); err != nil {
		return fieldErr(prefix+".zone_label", "%v", err)
	}
	for i, c := range a.GetChecks() {
		q := c.GetQuery()
		if q == nil {
			continue
		}
		for part, tmpl := range map[string]string{"value": q.GetValue(), "numerator": q.GetNumerator(), "denominator": q.GetDenominator()} {
			if tmpl == "" {
				continue
			}
			if err := metricsource.CheckTemplate(tmpl); err != nil {
				return fieldErr(fmt.Sprintf("%s.checks[%d].query.%s", prefix, i, part), "%v", err)
			}
		}
	}
	return nil
}

// QueryField returns the field of a's first check written as a query
// ("checks[2].query"), or "" if none is: such an analysis needs control to
// have a metrics source.
func QueryField(a *lehrpb.CanaryAnalysis) string {
	for i, c := range a.GetChecks() {
		if c.GetQuery() != nil {
			return fmt.Sprintf("checks[%d].query", i)
		}
	}
	return ""
}

// NoSourceMessage says why an analysis with query checks is refused by a
// control without a metrics source.
const NoSourceMessage = "control has no metrics source to run this query against: start it with --metrics-url (a Prometheus-compatible query_range API; docs/operations.md, \"The metrics source\"), or check a metric the agents report instead"

// queryPart is one query of a check: its name in the data and its
// template.
type queryPart struct{ series, tmpl string }

func queryParts(c *lehrpb.CanaryCheck) []queryPart {
	q := c.GetQuery()
	if q.GetValue() != "" {
		return []queryPart{{signals.QuerySeries(c.GetName(), "value"), q.GetValue()}}
	}
	return []queryPart{{signals.QuerySeries(c.GetName(), "numerator"), q.GetNumerator()},
		{signals.QuerySeries(c.GetName(), "denominator"), q.GetDenominator()}}
}

// Failed says, per check written as a query, why its source could not give
// its data: the check is then NONE with that reason, never PASS.
type Failed map[string]string

// queried is one read of an evaluation's query checks.
type queried struct {
	key    string                                     // what was asked: the range and populations
	series map[string]map[string]map[string][]float64 // zone → host → series name → values from first
	failed Failed
}

// queryCache keeps each evaluation's latest read, so that an evaluation
// judged every round is queried once per interval.
type queryCache struct {
	mu   sync.Mutex
	byEv map[string]*queried
}

// query reads ev's query checks from the metrics source and merges their
// series into data, per trial zone and host. Hosts that report agent
// signals keep them (and the versions they report); a host that reports
// none is taken to hold what its population says from the change on (the
// change time is when every canary host held the version).
func (s *Service) query(ctx context.Context, ev *lehrpb.CanaryEvaluation, data Data) Failed {
	var checks []*lehrpb.CanaryCheck
	for _, c := range append(slices.Clone(ev.GetConfig().GetChecks()), ev.GetExpectedChecks()...) {
		if c.GetQuery() != nil {
			checks = append(checks, c)
		}
	}
	if len(checks) == 0 {
		return nil
	}
	failed := Failed{}
	if s.src == nil {
		for _, c := range checks {
			failed[c.GetName()] = NoSourceMessage
		}
		return failed
	}
	pops := populations(ev, data)
	// The interval: the source's step when every check is a query, else
	// the agents' (the judge compares one interval across checks).
	step := s.src.Step()
	onlyQueries := len(ev.GetConfig().GetChecks()) > 0 && len(checks) == len(ev.GetConfig().GetChecks())+len(ev.GetExpectedChecks())
	for _, p := range pops {
		if onlyQueries {
			break
		}
		for _, h := range data[p.zone] {
			if iv := h.GetSignals().GetIntervalSeconds(); iv > 0 && (slices.Contains(p.canary, h.GetHostId()) || slices.Contains(p.control, h.GetHostId())) {
				step = time.Duration(iv) * time.Second
				break
			}
		}
	}
	iv := int64(step / time.Second)
	changeStart := (ev.GetChangeTime().AsTime().Unix() + iv - 1) / iv * iv
	first := changeStart - BeforeIntervals*iv
	end := s.now().Unix() / iv * iv // the end of the newest whole interval
	n := int((end - first) / iv)
	if n <= 0 {
		return nil
	}
	key := fmt.Sprint(first, end, iv, pops)
	q := s.cached(ev.GetId(), key)
	if q == nil {
		q = s.read(ctx, ev, checks, pops, first, n, iv)
		if ctx.Err() != nil {
			return q.failed // the caller gave up: not the source's failure to keep
		}
		q.key = key
		s.cache.mu.Lock()
		s.cache.byEv[ev.GetId()] = q
		s.cache.mu.Unlock()
	}
	if onlyQueries {
		// What the agents report is read by no check: their intervals
		// must not set the evaluation's.
		for z, hs := range data {
			for i, h := range hs {
				if h.GetSignals().GetIntervalSeconds() != uint32(iv) {
					hs[i] = &lehrpb.HostSignals{HostId: h.GetHostId(), Cohort: h.GetCohort(),
						Signals: &lehrpb.NamespaceSignals{Namespace: ev.GetNamespace(), IntervalSeconds: uint32(iv), First: first}}
				}
			}
			data[z] = hs
		}
	}
	merge(ev, data, pops, q.series, first, n, iv)
	return q.failed
}

func (s *Service) cached(id, key string) *queried {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if q := s.cache.byEv[id]; q != nil && q.key == key {
		return q
	}
	return nil
}

// forget drops the cached reads of evaluations not in keep.
func (s *Service) forget(keep map[string]bool) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	for id := range s.cache.byEv {
		if !keep[id] {
			delete(s.cache.byEv, id)
		}
	}
}

// read queries every part of every check for every population: n
// intervals from first, the point at each interval's end standing for the
// interval.
func (s *Service) read(ctx context.Context, ev *lehrpb.CanaryEvaluation, checks []*lehrpb.CanaryCheck, pops []population, first int64, n int, iv int64) *queried {
	q := &queried{series: map[string]map[string]map[string][]float64{}, failed: Failed{}}
	cfg := ev.GetConfig()
	start, end, step := time.Unix(first+iv, 0), time.Unix(first+int64(n)*iv, 0), time.Duration(iv)*time.Second
	var down error // the source got no answer: no more queries now
	for _, c := range checks {
		got := map[string]map[string]map[string][]float64{} // zone → host → series
		var missing []string
		err := func() error {
			if down != nil {
				return down
			}
			for _, p := range pops {
				for _, side := range []struct {
					name  string
					hosts []string
				}{{"canary", p.canary}, {"control", p.control}} {
					if len(side.hosts) == 0 {
						continue
					}
					sel := metricsource.Selection{HostLabel: cfg.GetHostLabel(), ZoneLabel: cfg.GetZoneLabel(), Zone: p.zone, Hosts: side.hosts}
					found := map[string]bool{}
					for _, part := range queryParts(c) {
						res, err := s.src.QueryRange(ctx, metricsource.Expand(part.tmpl, sel, step), start, end, step)
						if err != nil {
							if metricsource.Unreachable(err) {
								down = err
							}
							return err
						}
						label := sel.HostLabelName()
						for _, sr := range res {
							h, ok := sr.Labels[label]
							if !ok {
								return fmt.Errorf("the %s query returned a series without the host label %q (%s): aggregate by it, e.g. sum by (%s) (…)", part.series, label, labelsText(sr.Labels), label)
							}
							if !slices.Contains(side.hosts, h) {
								continue
							}
							if got[p.zone] == nil {
								got[p.zone] = map[string]map[string][]float64{}
							}
							if got[p.zone][h] == nil {
								got[p.zone][h] = map[string][]float64{}
							}
							if _, dup := got[p.zone][h][part.series]; dup {
								return fmt.Errorf("the %s query returned more than one series for host %s/%s: it must return one per host, e.g. sum by (%s) (…)", part.series, p.zone, h, label)
							}
							got[p.zone][h][part.series] = sr.Values
							found[h] = true
						}
					}
					if len(found) == 0 {
						missing = append(missing, fmt.Sprintf("the %s hosts of %s (%s)", side.name, p.zone, hostList(side.hosts)))
					}
				}
			}
			return nil
		}()
		switch {
		case err != nil:
			q.failed[c.GetName()] = fmt.Sprintf("metrics source %s: %v", s.src.Name(), err)
		case len(missing) > 0:
			labels := "the labels " + metricsource.Selection{HostLabel: cfg.GetHostLabel()}.HostLabelName() + " and " + zoneLabelName(cfg.GetZoneLabel()) + " with the hosts' ids and zone"
			if cfg.GetZoneLabel() == metricsource.NoZoneLabel {
				labels = "the label " + metricsource.Selection{HostLabel: cfg.GetHostLabel()}.HostLabelName() + " with the hosts' ids"
			}
			q.failed[c.GetName()] = fmt.Sprintf("metrics source %s: the query returned no series for %s: do its series carry %s (the analysis's host_label and zone_label)?",
				s.src.Name(), strings.Join(missing, ", nor for "), labels)
		default:
			for z, hs := range got {
				for h, ss := range hs {
					if q.series[z] == nil {
						q.series[z] = map[string]map[string][]float64{}
					}
					if q.series[z][h] == nil {
						q.series[z][h] = map[string][]float64{}
					}
					maps.Copy(q.series[z][h], ss)
				}
			}
		}
	}
	return q
}

func zoneLabelName(l string) string {
	if l == "" {
		return metricsource.DefaultZoneLabel
	}
	return l
}

func hostList(hs []string) string {
	if len(hs) > 5 {
		return strings.Join(hs[:5], ", ") + fmt.Sprintf(" and %d more", len(hs)-5)
	}
	return strings.Join(hs, ", ")
}

func labelsText(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// merge lays the queried series over data: n intervals from first.
func merge(ev *lehrpb.CanaryEvaluation, data Data, pops []population, series map[string]map[string]map[string][]float64, first int64, n int, iv int64) {
	changeStart := (ev.GetChangeTime().AsTime().Unix() + iv - 1) / iv * iv
	for _, p := range pops {
		for _, side := range []struct {
			canary bool
			hosts  []string
		}{{true, p.canary}, {false, p.control}} {
			for _, h := range side.hosts {
				ss := series[p.zone][h]
				if len(ss) == 0 {
					continue
				}
				add := &lehrpb.NamespaceSignals{Namespace: ev.GetNamespace(), IntervalSeconds: uint32(iv), First: first, Versions: make([]uint64, n)}
				if side.canary {
					for i := range add.Versions {
						if first+int64(i)*iv >= changeStart {
							add.Versions[i] = ev.GetVersion()
						}
					}
				}
				for _, name := range slices.Sorted(maps.Keys(ss)) {
					vals := slices.Clone(ss[name])
					for i, v := range vals {
						if math.IsInf(v, 0) {
							vals[i] = math.NaN()
						}
					}
					add.Series = append(add.Series, &lehrpb.SignalSeries{Name: name, Values: vals})
				}
				i := slices.IndexFunc(data[p.zone], func(x *lehrpb.HostSignals) bool { return x.GetHostId() == h })
				if i < 0 {
					data[p.zone] = append(data[p.zone], &lehrpb.HostSignals{HostId: h, Cohort: side.canary, Signals: add})
					continue
				}
				old := data[p.zone][i]
				sig := add
				if old.GetSignals().GetIntervalSeconds() == uint32(iv) {
					// The agent's intervals (and versions) win where
					// both have one; its series and the queried ones
					// have different names.
					sig = signals.Merge(add, old.GetSignals(), int(math.MaxInt32))
				}
				data[p.zone][i] = &lehrpb.HostSignals{HostId: h, Cohort: old.GetCohort(), Signals: sig}
			}
		}
	}
}

// noteSource says, in the explanation of every check of res written as a
// query that had its data, where the data came from: evidence that
// decides a rollout names its source (docs/operations.md, "Security
// model").
func (s *Service) noteSource(ev *lehrpb.CanaryEvaluation, res *lehrpb.CanaryResult, failed Failed) {
	if s.src == nil {
		return
	}
	for _, c := range append(slices.Clone(ev.GetConfig().GetChecks()), ev.GetExpectedChecks()...) {
		if c.GetQuery() == nil || failed[c.GetName()] != "" {
			continue
		}
		for _, r := range res.GetChecks() {
			if r.GetName() == c.GetName() && r.GetExplanation() != "" {
				r.Explanation += " (Data: metrics source " + s.src.Name() + ".)"
			}
		}
	}
}

// applyFailed makes every check of res that failed at the source NONE,
// with the source's reason, and the verdict NONE if it was PASS: a check
// whose data could not be read never passes.
func applyFailed(res *lehrpb.CanaryResult, failed Failed) {
	if len(failed) == 0 {
		return
	}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		names = append(names, name)
		i := slices.IndexFunc(res.GetChecks(), func(c *lehrpb.CanaryCheckResult) bool { return c.GetName() == name })
		if i < 0 {
			res.Checks = append(res.Checks, &lehrpb.CanaryCheckResult{Name: name})
			i = len(res.Checks) - 1
		}
		c := res.Checks[i]
		c.Verdict, c.Explanation = lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, "no data: "+failed[name]
	}
	first := names[0]
	why := fmt.Sprintf("check %q has no data: %s", first, failed[first])
	if len(names) > 1 {
		why += fmt.Sprintf(" (and %d more check(s) written as queries)", len(names)-1)
	}
	switch res.GetVerdict() {
	case lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL:
	case lehrpb.CanaryVerdict_CANARY_VERDICT_NONE:
		if res.GetIntervalSeconds() > 0 { // else no host had data: the source's failure says why
			res.Reason = why + "; " + res.GetReason()
		} else {
			res.Reason = why
		}
	default:
		res.Verdict, res.Reason = lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, why
	}
}
