package agent

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/metricshttp"
)

// metricsHelp is the HELP text of every metric family an agent serves: its
// own, its certificate's and the upstream client's (docs/operations.md, "Metrics").
var metricsHelp = metricshttp.MergeHelp(upstream.MetricsHelp, metricshttp.TLSHelp, metricshttp.Help{
	"lehr_agent_apply_errors_total":      "Updates that could not be applied, or whose namespace file could not be written.",
	"lehr_agent_cache_bytes":             "Size of the agent's Badger cache on disk, in bytes.",
	"lehr_agent_cache_corruptions_total": "Cached namespaces found corrupt, dropped and fetched again as a snapshot.",
	"lehr_agent_cache_evictions_total":   "Namespaces evicted from the cache after --cache-retention unwanted.",
	"lehr_agent_cache_quarantines_total": "Caches Badger could not open, moved aside at start.",
	"lehr_agent_file_repairs_total":      "Namespace files changed or removed outside the agent and written again.",
	"lehr_agent_host_checks_failing":     "Namespaces whose host-level canary checks fail: the host got worse after its latest change, against its own history.",
	"lehr_agent_leases":                  "Leases consumers hold on namespaces.",
	"lehr_agent_namespace_version":       "The version of the namespace the agent holds, by namespace.",
	"lehr_agent_preview_reports_total":   "Policy-preview count reports received from consumers.",
	"lehr_agent_scrapes_total":           "Scrapes of consumers' metrics endpoints, by result: ok or failed.",
	"lehr_agent_signal_namespaces":       "Namespaces the agent keeps canary signals for.",
	"lehr_agent_subscriptions":           "Namespaces the agent subscribes to at its distributor.",
	"lehr_agent_updates_applied_total":   "Updates applied, by kind: snapshot or patch.",
})

// agentMetrics are the agent's own series. The upstream client adds
// lehr_agent_connected, lehr_agent_failovers_total and
// lehr_agent_bytes_received_total{kind} to the same set.
type agentMetrics struct {
	set             *metrics.Set
	appliedSnapshot *metrics.Counter
	appliedPatch    *metrics.Counter
	applyErrors     *metrics.Counter
	corruptions     *metrics.Counter
	evictions       *metrics.Counter
	quarantines     *metrics.Counter
	fileRepairs     *metrics.Counter
	scrapesOK       *metrics.Counter
	scrapesFailed   *metrics.Counter
	previewReports  *metrics.Counter

	mu       sync.Mutex
	versions map[string]*metrics.Gauge
}

func newAgentMetrics(set *metrics.Set, a *Agent) *agentMetrics {
	m := &agentMetrics{
		set:             set,
		appliedSnapshot: set.GetOrCreateCounter(`lehr_agent_updates_applied_total{kind="snapshot"}`),
		appliedPatch:    set.GetOrCreateCounter(`lehr_agent_updates_applied_total{kind="patch"}`),
		applyErrors:     set.GetOrCreateCounter(`lehr_agent_apply_errors_total`),
		corruptions:     set.GetOrCreateCounter(`lehr_agent_cache_corruptions_total`),
		evictions:       set.GetOrCreateCounter(`lehr_agent_cache_evictions_total`),
		quarantines:     set.GetOrCreateCounter(`lehr_agent_cache_quarantines_total`),
		fileRepairs:     set.GetOrCreateCounter(`lehr_agent_file_repairs_total`),
		scrapesOK:       set.GetOrCreateCounter(`lehr_agent_scrapes_total{result="ok"}`),
		scrapesFailed:   set.GetOrCreateCounter(`lehr_agent_scrapes_total{result="failed"}`),
		previewReports:  set.GetOrCreateCounter(`lehr_agent_preview_reports_total`),
		versions:        map[string]*metrics.Gauge{},
	}
	set.GetOrCreateGauge(`lehr_agent_cache_bytes`, func() float64 {
		c := a.cacheRef.Load()
		if c == nil {
			return 0
		}
		n, err := c.Size()
		if err != nil {
			return 0
		}
		return float64(n)
	})
	set.GetOrCreateGauge(`lehr_agent_subscriptions`, func() float64 {
		if a.up == nil {
			return 0
		}
		return float64(len(a.up.Subscriptions()))
	})
	set.GetOrCreateGauge(`lehr_agent_leases`, func() float64 { return float64(a.leases.Len()) })
	set.GetOrCreateGauge(`lehr_agent_signal_namespaces`, func() float64 { return float64(a.sig.store.Namespaces()) })
	set.GetOrCreateGauge(`lehr_agent_host_checks_failing`, func() float64 { return float64(a.sig.host.failingCount()) })
	return m
}

// scrapes counts scrapes of consumers' metrics endpoints.
func (m *agentMetrics) scrapes(ok, failed int) {
	m.scrapesOK.Add(ok)
	m.scrapesFailed.Add(failed)
}

func (m *agentMetrics) applied(snapshot bool) {
	if snapshot {
		m.appliedSnapshot.Inc()
	} else {
		m.appliedPatch.Inc()
	}
}

// setVersion sets lehr_agent_namespace_version{namespace}; 0 removes it.
func (m *agentMetrics) setVersion(ns string, v uint64) {
	name := fmt.Sprintf(`lehr_agent_namespace_version{namespace=%s}`, strconv.Quote(ns))
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.versions[ns]
	if v == 0 {
		if g != nil {
			m.set.UnregisterMetric(name)
			delete(m.versions, ns)
		}
		return
	}
	if g == nil {
		g = m.set.GetOrCreateGauge(name, nil)
		m.versions[ns] = g
	}
	g.Set(float64(v))
}
