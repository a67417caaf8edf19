package fanout

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/metricshttp"
)

// MetricsHelp is the HELP text of the metric families a Server registers
// on Options.Metrics (docs/operations.md, "Metrics"). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_distributor_abandoned_handshakes_total": "Connections admitted whose handshake never completed; each held a place at the admission bound until the handshake timeout.",
	"lehr_distributor_ack_timeouts_total":         "Updates an agent left unanswered for 30 s, re-planned as snapshots.",
	"lehr_distributor_stalled_pushes_total":       "Updates an agent took no bytes of for 30 s (no stream credit or no reads); each closed that agent's connection.",
	"lehr_distributor_acks_total":                 "Updates agents acknowledged as applied.",
	"lehr_distributor_admitting_agents":           "Connections being admitted now (first packet to Welcome), at most the admission bound.",
	"lehr_distributor_bytes_total":                "Bytes of updates sent to agents, by kind: snapshot or patch.",
	"lehr_distributor_connected_agents":           "Agents connected now.",
	"lehr_distributor_handshakes_total":           "Completed handshakes, by TLS: full, or resumed (a TLS session ticket).",
	"lehr_distributor_namespace_lag":              "Connected agents subscribed to the namespace that do not hold their goal version of it, by namespace.",
	"lehr_distributor_protocol_errors_total":      "Agent connections closed for protocol violations (a malformed Hello included).",
	"lehr_distributor_pushes_total":               "Updates sent to agents, by kind: snapshot or patch.",
	"lehr_distributor_keepalive_interval_seconds": "The keepalive interval agents are told: agents connected divided by the keepalive rate, whole seconds up to 10; 0 while agents keep their own.",
	"lehr_distributor_redial_advice_total":        "Advice frames sent to agents with a new redial spread or keepalive interval.",
	"lehr_distributor_redial_spread_seconds":      "The redial spread agents are told: agents connected divided by the redial rate, in seconds.",
	"lehr_distributor_refused_handshakes_total":   "First packets refused at the handshake admission bound.",
	"lehr_distributor_refused_updates_total":      "Updates agents refused (the next attempt is a snapshot, after a backoff).",
	"lehr_distributor_resyncs_total":              "Snapshots agents asked for (Resync).",
	"lehr_distributor_stray_acks_total":           "Acknowledgements for no update in flight (late answers).",
	"lehr_distributor_throttled_pushes_total":     "Pushes that waited for the domain's outbound byte rate, by domain.",
	"lehr_distributor_throttled_seconds_total":    "Time pushes waited for the domain's outbound byte rate, in seconds, by domain.",
	"lehr_distributor_unheard_agents_total":       "Connections closed because nothing arrived from the agent for three of its silence timeouts.",
	"lehr_distributor_unavailable_total":          "Unavailable answers sent to agents (a namespace with no goal in the zone, or not fetched yet).",
}

// serverMetrics are the fanout's lehr_distributor_* series.
type serverMetrics struct {
	set *metrics.Set
	srv *Server

	pushSnapshot, pushPatch   *metrics.Counter
	bytesSnapshot, bytesPatch *metrics.Counter
	acks, refusals, resyncs   *metrics.Counter
	protocolErrors            *metrics.Counter
	unavailable               *metrics.Counter
	refusedHandshakes         *metrics.Counter
	abandonedHandshakes       *metrics.Counter
	fullHandshakes            *metrics.Counter // completed, full
	resumedHandshakes         *metrics.Counter // completed, TLS session resumed
	ackTimeouts, strayAcks    *metrics.Counter
	stalledPushes             *metrics.Counter
	advice                    *metrics.Counter
	unheard                   *metrics.Counter

	lagMu sync.Mutex
	lag   map[string]bool
	// lags is the last Server.Lags, taken at lagsAt: the lag gauges of
	// one scrape share it (lagsMaxAge).
	lagsMu sync.Mutex
	lags   map[string]int
	lagsAt time.Time
}

func newServerMetrics(set *metrics.Set, srv *Server) *serverMetrics {
	m := &serverMetrics{
		set:                 set,
		srv:                 srv,
		pushSnapshot:        set.NewCounter(`lehr_distributor_pushes_total{kind="snapshot"}`),
		pushPatch:           set.NewCounter(`lehr_distributor_pushes_total{kind="patch"}`),
		bytesSnapshot:       set.NewCounter(`lehr_distributor_bytes_total{kind="snapshot"}`),
		bytesPatch:          set.NewCounter(`lehr_distributor_bytes_total{kind="patch"}`),
		acks:                set.NewCounter(`lehr_distributor_acks_total`),
		refusals:            set.NewCounter(`lehr_distributor_refused_updates_total`),
		resyncs:             set.NewCounter(`lehr_distributor_resyncs_total`),
		protocolErrors:      set.NewCounter(`lehr_distributor_protocol_errors_total`),
		unavailable:         set.NewCounter(`lehr_distributor_unavailable_total`),
		refusedHandshakes:   set.NewCounter(`lehr_distributor_refused_handshakes_total`),
		abandonedHandshakes: set.NewCounter(`lehr_distributor_abandoned_handshakes_total`),
		fullHandshakes:      set.NewCounter(`lehr_distributor_handshakes_total{tls="full"}`),
		resumedHandshakes:   set.NewCounter(`lehr_distributor_handshakes_total{tls="resumed"}`),
		ackTimeouts:         set.NewCounter(`lehr_distributor_ack_timeouts_total`),
		strayAcks:           set.NewCounter(`lehr_distributor_stray_acks_total`),
		stalledPushes:       set.NewCounter(`lehr_distributor_stalled_pushes_total`),
		advice:              set.NewCounter(`lehr_distributor_redial_advice_total`),
		unheard:             set.NewCounter(`lehr_distributor_unheard_agents_total`),
		lag:                 map[string]bool{},
	}
	set.NewGauge(`lehr_distributor_connected_agents`, func() float64 {
		return float64(srv.connected())
	})
	set.NewGauge(`lehr_distributor_admitting_agents`, func() float64 {
		return float64(srv.handshakes.Load())
	})
	set.NewGauge(`lehr_distributor_redial_spread_seconds`, func() float64 {
		return srv.redialSpread(srv.connected()).Seconds()
	})
	set.NewGauge(`lehr_distributor_keepalive_interval_seconds`, func() float64 {
		return srv.keepaliveInterval(srv.connected()).Seconds()
	})
	return m
}

// dropLag unregisters the lag gauge of ns (its goal is gone).
func (m *serverMetrics) dropLag(ns string) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	if m.lag[ns] {
		delete(m.lag, ns)
		m.set.UnregisterMetric(fmt.Sprintf(`lehr_distributor_namespace_lag{namespace=%s}`, strconv.Quote(ns)))
	}
}

// ensureLag registers the lag gauge of ns once.
func (m *serverMetrics) ensureLag(ns string) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	if m.lag[ns] {
		return
	}
	m.lag[ns] = true
	name := fmt.Sprintf(`lehr_distributor_namespace_lag{namespace=%s}`, strconv.Quote(ns))
	m.set.GetOrCreateGauge(name, func() float64 { return float64(m.lagOf(ns)) })
}

// lagsMaxAge is how long one Server.Lags serves the lag gauges: a scrape
// writes them all within it.
const lagsMaxAge = 250 * time.Millisecond

// lagOf is ns's lag from a Server.Lags at most lagsMaxAge old.
func (m *serverMetrics) lagOf(ns string) int {
	m.lagsMu.Lock()
	defer m.lagsMu.Unlock()
	if now := time.Now(); m.lags == nil || now.Sub(m.lagsAt) > lagsMaxAge {
		m.lags, m.lagsAt = m.srv.Lags(), now
	}
	return m.lags[ns]
}

func (m *serverMetrics) pushed(snapshot bool, n int) {
	if snapshot {
		m.pushSnapshot.Inc()
		m.bytesSnapshot.Add(n)
	} else {
		m.pushPatch.Inc()
		m.bytesPatch.Add(n)
	}
}

// throttled counts a push of domain that waited for its outbound limit,
// and how long (lehr_distributor_throttled_pushes_total{domain},
// lehr_distributor_throttled_seconds_total{domain}).
func (m *serverMetrics) throttled(domain string, waited time.Duration) {
	m.set.GetOrCreateCounter(fmt.Sprintf(`lehr_distributor_throttled_pushes_total{domain=%q}`, domain)).Inc()
	m.set.GetOrCreateFloatCounter(fmt.Sprintf(`lehr_distributor_throttled_seconds_total{domain=%q}`, domain)).Add(waited.Seconds())
}
