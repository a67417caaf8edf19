package propagation

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/metricshttp"
)

// MetricsHelp is the HELP text of the metric families Metrics registers
// (docs/operations.md, "Propagation"). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_control_propagation_seconds":          "Time from a publish to every subscribed host holding the version (or a later one), as the distributors' reports show it, by size class and subscriber bucket, in seconds (on the strategist's leader).",
	"lehr_control_propagation_objective_total":  "Updates judged against their size class's propagation objective, by size class and result (met, missed), on the strategist's leader.",
	"lehr_control_propagation_incomplete_total": "Updates no longer tracked before every subscribed host held them, by reason: superseded, timeout, evicted (the in-flight bound), unsubscribed.",
	"lehr_control_propagation_in_flight":        "Updates tracked now: published, not yet on every subscribed host (on the strategist's leader; 0 on the others).",
}

// secondsBuckets are the upper bounds of lehr_control_propagation_seconds:
// around the objectives (15 s, 1 min, 5 min) and the report interval
// (10 s), to the tracker's timeout (1 h).
var secondsBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1800, 3600}

// Metrics counts Results into a metrics.Set.
type Metrics struct{ set *metrics.Set }

// NewMetrics registers every series in set at 0 (every class × bucket,
// every objective result, every incomplete reason), so that the first
// update is an increase and dashboards see every series.
func NewMetrics(set *metrics.Set, inFlight func() float64) *Metrics {
	m := &Metrics{set: set}
	for _, c := range Classes {
		for _, b := range Buckets {
			m.histogram(c.Name, b.Label)
		}
		for _, r := range []string{"met", "missed"} {
			set.GetOrCreateCounter(fmt.Sprintf(`lehr_control_propagation_objective_total{size_class=%q,result=%q}`, c.Name, r))
		}
	}
	for _, o := range []Outcome{Superseded, TimedOut, Evicted, Unsubscribed} {
		set.GetOrCreateCounter(fmt.Sprintf(`lehr_control_propagation_incomplete_total{reason=%q}`, o))
	}
	set.GetOrCreateGauge(`lehr_control_propagation_in_flight`, inFlight)
	return m
}

func (m *Metrics) histogram(class, bucket string) *metrics.PrometheusHistogram {
	return m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`lehr_control_propagation_seconds{size_class=%q,subscribers=%q}`, class, bucket), secondsBuckets)
}

// Record counts r: a complete one in the histogram, and met or missed
// when known; an incomplete one by its reason.
func (m *Metrics) Record(r Result) {
	if r.Outcome == Complete {
		m.histogram(r.Class.Name, r.Bucket).Update(r.Propagation().Seconds())
	} else {
		m.set.GetOrCreateCounter(fmt.Sprintf(`lehr_control_propagation_incomplete_total{reason=%q}`, r.Outcome)).Inc()
	}
	switch {
	case r.Met():
		m.set.GetOrCreateCounter(fmt.Sprintf(`lehr_control_propagation_objective_total{size_class=%q,result="met"}`, r.Class.Name)).Inc()
	case r.Missed():
		m.set.GetOrCreateCounter(fmt.Sprintf(`lehr_control_propagation_objective_total{size_class=%q,result="missed"}`, r.Class.Name)).Inc()
	}
}
