package collect

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"lehr.dev/lehr/canary"
)

// CheckURL checks a consumer's metrics URL: http, on a loopback address
// (127.0.0.0/8, ::1 or localhost) with a port. The agent scrapes only its
// own host, never something a consumer points it at elsewhere.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("metrics_url %q: %w", raw, err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("metrics_url %q: scheme %q; want http (the endpoint is on this host)", raw, u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		return fmt.Errorf("metrics_url %q: no port; want http://127.0.0.1:PORT/metrics", raw)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("metrics_url %q: host %q is not a loopback address; the agent scrapes only this host (127.0.0.1, ::1 or localhost)", raw, host)
	}
	return nil
}

// Totals are the cumulative values a scrape found, NaN for what the
// endpoint does not expose.
type Totals struct {
	Requests, Errors, Seconds, LatencyCount, StartTime float64
}

// request counters and latency histograms discovered by name, like CAS's
// autoconfiguration: HTTP status or gRPC code labels tell errors apart.
var (
	requestFamilies = []string{"http_requests_total", "http_server_requests_total", "http_server_requests_seconds_count", "grpc_server_handled_total"}
	latencyFamilies = []string{"http_request_duration_seconds", "http_server_request_duration_seconds", "grpc_server_handling_seconds"}
	grpcServerFault = map[string]bool{"Unknown": true, "DeadlineExceeded": true, "Unimplemented": true, "Internal": true, "Unavailable": true, "DataLoss": true}
)

// Parse reads the Prometheus text exposition format (with
// github.com/prometheus/common/expfmt) and sums the standard families.
func Parse(r io.Reader) (Totals, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Totals{}, fmt.Errorf("parse metrics: %w", err)
	}
	t := Totals{Requests: math.NaN(), Errors: math.NaN(), Seconds: math.NaN(), LatencyCount: math.NaN(), StartTime: math.NaN()}
	for _, name := range requestFamilies {
		f := fams[name]
		if f == nil {
			continue
		}
		t.Requests, t.Errors = 0, 0
		for _, m := range f.GetMetric() {
			v := value(m)
			t.Requests += v
			if isError(m) {
				t.Errors += v
			}
		}
		break
	}
	for _, name := range latencyFamilies {
		if f := fams[name]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
			t.Seconds, t.LatencyCount = 0, 0
			for _, m := range f.GetMetric() {
				t.Seconds += m.GetHistogram().GetSampleSum()
				t.LatencyCount += float64(m.GetHistogram().GetSampleCount())
			}
			break
		}
		// Without a TYPE line (VictoriaMetrics' histograms, for one) the
		// parts come as separate untyped families.
		sum, count := fams[name+"_sum"], fams[name+"_count"]
		if sum != nil && count != nil {
			t.Seconds, t.LatencyCount = sumOf(sum), sumOf(count)
			break
		}
	}
	if f := fams["process_start_time_seconds"]; f != nil && len(f.GetMetric()) > 0 {
		t.StartTime = value(f.GetMetric()[0])
	}
	return t, nil
}

func sumOf(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += value(m)
	}
	return s
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// isError reports whether a request sample is a server fault: an HTTP
// status 5xx, or a gRPC code that means the server failed.
func isError(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "code", "status", "status_code", "http_status_code":
			if strings.HasPrefix(l.GetValue(), "5") {
				return true
			}
		case "grpc_code":
			if grpcServerFault[l.GetValue()] {
				return true
			}
		}
	}
	return false
}

// Target is one consumer process's metrics endpoint, for one namespace.
type Target struct {
	Namespace, URL string
}

// Scraper reads targets' endpoints and records what changed since the
// previous scrape into a Store: request, error and latency increments, a
// restart when the process start time moved or a counter went back, a
// scrape failure when the endpoint did not answer. Safe for concurrent
// use; ScrapeAll is called by its owner's loop.
type Scraper struct {
	store  *Store
	client *http.Client

	mu   sync.Mutex
	last map[Target]Totals // the previous successful scrape of each target
}

// NewScraper returns a scraper recording into store; each scrape gives up
// after timeout.
func NewScraper(store *Store, timeout time.Duration) *Scraper {
	return &Scraper{store: store, client: &http.Client{Timeout: timeout}, last: map[Target]Totals{}}
}

// ScrapeAll scrapes every target once, one after another, and forgets
// the state of targets no longer listed. It returns the number that
// failed.
func (s *Scraper) ScrapeAll(ctx context.Context, targets []Target) (failed int) {
	s.mu.Lock()
	for t := range s.last {
		keep := false
		for _, u := range targets {
			keep = keep || u == t
		}
		if !keep {
			delete(s.last, t)
		}
	}
	s.mu.Unlock()
	for _, t := range targets {
		if ctx.Err() != nil {
			return failed
		}
		if err := s.scrape(ctx, t); err != nil {
			failed++
			s.store.Add(t.Namespace, canary.MetricScrapeFailures, 1)
		}
	}
	return failed
}

func (s *Scraper) scrape(ctx context.Context, t Target) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", t.URL, resp.Status)
	}
	cur, err := Parse(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	s.mu.Lock()
	prev, seen := s.last[t]
	s.last[t] = cur
	s.mu.Unlock()
	if !seen {
		return nil // the first scrape only sets the baseline
	}
	restarted := !math.IsNaN(cur.StartTime) && !math.IsNaN(prev.StartTime) && cur.StartTime != prev.StartTime
	for _, c := range []struct{ prev, cur float64 }{{prev.Requests, cur.Requests}, {prev.LatencyCount, cur.LatencyCount}} {
		restarted = restarted || c.cur < c.prev
	}
	if restarted {
		s.store.Add(t.Namespace, canary.MetricProcessRestarts, 1)
	} else if !math.IsNaN(cur.StartTime) || !math.IsNaN(cur.Requests) {
		s.store.Add(t.Namespace, canary.MetricProcessRestarts, 0)
	}
	for _, m := range []struct {
		name      string
		prev, cur float64
	}{
		{canary.MetricRequests, prev.Requests, cur.Requests},
		{canary.MetricRequestErrors, prev.Errors, cur.Errors},
		{canary.MetricRequestSeconds, prev.Seconds, cur.Seconds},
		{canary.MetricRequestLatencyCount, prev.LatencyCount, cur.LatencyCount},
	} {
		if math.IsNaN(m.cur) {
			continue
		}
		d := m.cur - m.prev
		if restarted || math.IsNaN(m.prev) || d < 0 {
			d = m.cur // counters start again from zero after a restart
		}
		s.store.Add(t.Namespace, m.name, d)
	}
	return nil
}
