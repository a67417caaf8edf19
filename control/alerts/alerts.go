// Package alerts reads which alerts fire from a Prometheus-compatible
// alerts API, for the rollout strategist's monitoring check
// (control/rollout, alerts.go): GET <url>/api/v1/alerts of Prometheus, or
// of VictoriaMetrics' vmalert, which serves the same shape (as does a
// VictoriaMetrics single node or vmselect with -vmalert.proxyURL).
// Alertmanager's /api/v2/alerts is not supported: it lists notifications
// (silenced and inhibited ones too), not the rules' state.
//
// A Source is read at most once per Interval, whoever asks: every domain
// loop of the strategist's leader shares one read. It is a small typed
// client rather than github.com/prometheus/client_golang/api/prometheus/v1,
// whose module Lehr already requires: that package would bring
// json-iterator and its reflection packages into the build, and register
// global JSON codecs, for one GET of a documented JSON document.
//
// Imported by control (which makes the Source), control/strategist
// (which reads it when a stage is due), cmd/lehr (whose lehr control
// --alerts-url checks it) and testenv/devcluster (which passes a test's
// source to control).
package alerts

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/promapi"
)

// Defaults of Options.
const (
	DefaultTimeout  = 5 * time.Second
	DefaultInterval = 10 * time.Second
	// MaxResponseBytes bounds what a read takes in: an alerts list larger
	// than this is an error, not a truncated list.
	MaxResponseBytes = 16 << 20
)

// APIPath is the path of the alerts list under the source's URL.
const APIPath = "/api/v1/alerts"

// Options configure a Source.
type Options struct {
	// URL is the base URL of Prometheus or vmalert, e.g.
	// http://prometheus:9090 or https://vmalert.example:8880/prefix; the
	// Source reads URL + APIPath (a URL already ending in APIPath is taken
	// as is). Required; http or https. Credentials in it (user:password@)
	// are sent as basic authentication and never shown (Name).
	URL string
	// TLS, if set, is the client TLS configuration of an https URL (the
	// CA to trust, a client certificate); nil means the system's roots.
	TLS *tls.Config
	// Timeout bounds one read, connection included. Zero means
	// DefaultTimeout (5 s).
	Timeout time.Duration
	// Interval is the least time between two reads: a Read sooner returns
	// the last result. Zero means DefaultInterval (10 s).
	Interval time.Duration
	// Metrics receives lehr_control_alerts_reads_total{result} and
	// lehr_control_alerts_firing; nil means a private set.
	Metrics *metrics.Set
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Client, if set, makes the requests (tests); nil means one with TLS
	// and Timeout.
	Client *http.Client
}

// Alert is an alert in state firing.
type Alert struct {
	// Labels, alertname among them.
	Labels map[string]string
	// ActiveAt is when it became active (pending, then firing).
	ActiveAt time.Time
}

// Result is one read of the source.
type Result struct {
	// Firing are the alerts firing (pending ones are not); nil when Err
	// is set.
	Firing []Alert
	// Err says why the source could not be read.
	Err error
	// Time is when the read began.
	Time time.Time
}

// Source reads the alerts that fire. Its methods are safe for concurrent
// use.
type Source struct {
	opts   Options
	url    string // what is requested
	name   string // what is shown: without credentials
	client *http.Client
	reads  map[string]*metrics.Counter
	firing atomic.Int64 // at the last successful read

	mu   sync.Mutex // held during a read: concurrent callers share it
	last Result
}

// MetricsHelp is the HELP text of the metric families a Source registers
// (docs/operations.md, "The monitoring check"). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_control_alerts_reads_total": "Reads of the alerts source (lehr control --alerts-url) by the strategist's leader, by result: ok, or error (unreachable, an error status, not an alerts list).",
	"lehr_control_alerts_firing":      "Alerts firing at the alerts source's last successful read (every alert, whether a policy names it or not).",
}

// New checks opts; it reads nothing.
func New(opts Options) (*Source, error) {
	ep, err := promapi.Parse("alerts", "Prometheus or vmalert", "reads", opts.URL, APIPath, opts.TLS != nil)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	s := &Source{opts: opts, url: ep.URL, name: ep.Name, client: opts.Client, reads: map[string]*metrics.Counter{}}
	if s.client == nil {
		s.client = promapi.Client(opts.TLS, opts.Timeout)
	}
	for _, r := range []string{"ok", "error"} {
		s.reads[r] = opts.Metrics.GetOrCreateCounter(fmt.Sprintf(`lehr_control_alerts_reads_total{result=%q}`, r))
	}
	opts.Metrics.GetOrCreateGauge(`lehr_control_alerts_firing`, func() float64 { return float64(s.firing.Load()) })
	return s, nil
}

// Name is the source's URL without credentials, as reasons show it.
func (s *Source) Name() string { return s.name }

// Read returns the alerts firing: the last result if it is younger than
// Interval, else a new read (which concurrent callers wait for and share).
// ctx bounds the wait; a read is bounded by Timeout.
func (s *Source) Read(ctx context.Context) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	if !s.last.Time.IsZero() && now.Sub(s.last.Time) < s.opts.Interval && now.Sub(s.last.Time) >= 0 {
		return s.last
	}
	res := s.read(ctx, now)
	if ctx.Err() != nil {
		// The caller gave up (its leadership or control ended): what
		// the source would have said is unknown, and no later caller
		// may take the caller's cancellation for the source's.
		return res
	}
	s.last = res
	if res.Err != nil {
		s.reads["error"].Inc()
	} else {
		s.reads["ok"].Inc()
		s.firing.Store(int64(len(res.Firing)))
	}
	return res
}

// response is the alerts list as Prometheus and vmalert serve it; fields
// neither needs are left out.
type response struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      *struct {
		Alerts []struct {
			Labels   map[string]string `json:"labels"`
			State    string            `json:"state"`
			ActiveAt *time.Time        `json:"activeAt"`
			// Name is vmalert's; Prometheus has only the alertname label.
			Name string `json:"name"`
		} `json:"alerts"`
	} `json:"data"`
}

func (s *Source) read(ctx context.Context, now time.Time) Result {
	res := Result{Time: now}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		res.Err = err
		return res
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		res.Err = s.describe(err)
		return res
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		res.Err = fmt.Errorf("reading the answer: %w", s.describe(err))
		return res
	}
	if len(body) > MaxResponseBytes {
		res.Err = fmt.Errorf("GET %s: the answer is over %d MiB", APIPath, MaxResponseBytes>>20)
		return res
	}
	var r response
	jerr := json.Unmarshal(body, &r)
	switch {
	case resp.StatusCode != http.StatusOK && jerr == nil && r.Error != "":
		res.Err = fmt.Errorf("GET %s: %s: %s (%s)", APIPath, resp.Status, r.Error, r.ErrorType)
		return res
	case resp.StatusCode != http.StatusOK:
		res.Err = fmt.Errorf("GET %s: %s", APIPath, resp.Status)
		return res
	case jerr != nil:
		res.Err = fmt.Errorf("GET %s: not an alerts list (Prometheus's or vmalert's): %v", APIPath, jerr)
		return res
	case r.Status != "success" || r.Data == nil:
		res.Err = fmt.Errorf("GET %s: status %q, want \"success\" with data.alerts: not Prometheus's or vmalert's alerts list", APIPath, r.Status)
		return res
	}
	res.Firing = []Alert{}
	for _, a := range r.Data.Alerts {
		if a.State != "firing" {
			continue // pending: not firing yet
		}
		labels := a.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		if labels["alertname"] == "" && a.Name != "" {
			labels["alertname"] = a.Name
		}
		al := Alert{Labels: labels}
		if a.ActiveAt != nil {
			al.ActiveAt = *a.ActiveAt
		}
		res.Firing = append(res.Firing, al)
	}
	return res
}

// describe makes a transport error say what happened without what varies
// from one read to the next, so that a rollout waiting on it is not
// rewritten for every read, nor the source's URL (Name), which the
// caller shows once.
func (s *Source) describe(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("GET %s: no answer within %v", APIPath, s.opts.Timeout)
		}
		return fmt.Errorf("GET %s: %w", APIPath, ue.Err)
	}
	return err
}
