// Package metricsource queries a Prometheus-compatible time-series
// database for the canary checks written as queries (lehrpb.CanaryQuery,
// docs/canary.md, "Sources: agent-scraped and time-series"): POST
// <url>/api/v1/query_range of Prometheus, or of VictoriaMetrics (single
// node, or vmselect under its /select/<tenant>/prometheus prefix), which
// serve the same shape. template.go checks and expands the query
// templates; source.go is the client.
//
// Like control/alerts, a small typed client rather than
// github.com/prometheus/client_golang/api/prometheus/v1: that package
// would bring json-iterator and its reflection packages into the build for
// one POST of a documented JSON document.
//
// Imported by control (which makes the Source and hands it to the service
// and the strategist as an evaluation.MetricSource), control/evaluation
// (which checks the templates and queries the source for the evaluations'
// query checks), cmd/lehr (whose lehr control --metrics-url and lehr dev
// --metrics-url check it) and testenv/devcluster (which passes a URL to
// control).
package metricsource

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/promapi"
)

// Defaults and bounds of Options and of a query.
const (
	DefaultTimeout = 10 * time.Second
	// DefaultStep is the interval of an evaluation none of whose hosts
	// reports agent signals (whose interval it otherwise takes).
	DefaultStep = 10 * time.Second
	// MaxResponseBytes bounds one answer: a larger one is an error, not
	// a truncated result.
	MaxResponseBytes = 32 << 20
	// MaxPoints bounds the points per series of one request (Prometheus
	// refuses more than 11,000): a longer range is read in pieces.
	MaxPoints = 10000
)

// APIPath is the path of the range query under the source's URL.
const APIPath = "/api/v1/query_range"

// Options configure a Source.
type Options struct {
	// URL is the base URL of Prometheus or VictoriaMetrics, e.g.
	// http://prometheus:9090 or
	// https://vmselect:8481/select/0/prometheus; the Source posts to
	// URL + APIPath (a URL already ending in APIPath is taken as is).
	// Required; http or https. Credentials in it (user:password@) are
	// sent as basic authentication and never shown (Name).
	URL string
	// TLS, if set, is the client TLS configuration of an https URL; nil
	// means the system's roots.
	TLS *tls.Config
	// Timeout bounds one request, connection included. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Step is the interval of an evaluation whose hosts report no agent
	// signals; zero means DefaultStep. Whole seconds.
	Step time.Duration
	// Metrics receives lehr_control_metrics_queries_total{result}; nil
	// means a private set.
	Metrics *metrics.Set
	// Client, if set, makes the requests (tests); nil means one with TLS
	// and Timeout.
	Client *http.Client
}

// Series is one series of a range query's answer: its labels, and its
// values at start, start+step, …, end (NaN where it has none).
type Series struct {
	Labels map[string]string
	Values []float64
}

// Source queries the time-series database. Its methods are safe for
// concurrent use.
type Source struct {
	opts   Options
	url    string // what is requested
	name   string // what is shown: without credentials
	client *http.Client
	ok     *metrics.Counter
	failed *metrics.Counter
}

// MetricsHelp is the HELP text of the metric family a Source registers
// (docs/operations.md). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_control_metrics_queries_total": "Range queries of the metrics source (lehr control --metrics-url) for canary checks written as queries, by result: ok, or error (unreachable, an error status, not a range query's answer).",
}

// New checks opts; it queries nothing.
func New(opts Options) (*Source, error) {
	ep, err := promapi.Parse("metrics source", "Prometheus or VictoriaMetrics", "posts to", opts.URL, APIPath, opts.TLS != nil)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Step <= 0 {
		opts.Step = DefaultStep
	}
	if opts.Step%time.Second != 0 {
		return nil, fmt.Errorf("metrics source: step %v: want whole seconds", opts.Step)
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	s := &Source{opts: opts, url: ep.URL, name: ep.Name, client: opts.Client,
		ok:     opts.Metrics.GetOrCreateCounter(`lehr_control_metrics_queries_total{result="ok"}`),
		failed: opts.Metrics.GetOrCreateCounter(`lehr_control_metrics_queries_total{result="error"}`)}
	if s.client == nil {
		s.client = promapi.Client(opts.TLS, opts.Timeout)
	}
	return s, nil
}

// Name is the source's URL without credentials, as reasons show it.
func (s *Source) Name() string { return s.name }

// Step is Options.Step.
func (s *Source) Step() time.Duration { return s.opts.Step }

// QueryRange runs query over [start, end] at step and returns its series,
// each with a value per step from start (NaN where it has none). A range
// of more than MaxPoints steps is read in pieces. The error says what went
// wrong without the source's URL (Name), which the caller shows.
func (s *Source) QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]Series, error) {
	if step < time.Second || end.Before(start) {
		return nil, fmt.Errorf("query_range: a step of at least 1s and an end not before the start are required (step %v, %v to %v)", step, start, end)
	}
	n := int(end.Sub(start)/step) + 1
	byKey := map[string]*Series{}
	var keys []string
	for from := 0; from < n; from += MaxPoints {
		to := min(n, from+MaxPoints) - 1
		got, err := s.query(ctx, query, start.Add(time.Duration(from)*step), start.Add(time.Duration(to)*step), step)
		if err != nil {
			s.failed.Inc()
			return nil, err
		}
		s.ok.Inc()
		for _, r := range got {
			k := labelsKey(r.Metric)
			sr := byKey[k]
			if sr == nil {
				sr = &Series{Labels: r.Metric, Values: make([]float64, n)}
				for i := range sr.Values {
					sr.Values[i] = math.NaN()
				}
				byKey[k] = sr
				keys = append(keys, k)
			}
			if err := r.fill(sr.Values, start, step); err != nil {
				s.failed.Inc()
				return nil, fmt.Errorf("POST %s: not a range query's answer: %v", APIPath, err)
			}
		}
	}
	out := make([]Series, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out, nil
}

// response is a range query's answer as Prometheus and VictoriaMetrics
// serve it; fields neither needs are left out.
type response struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      *struct {
		ResultType string   `json:"resultType"`
		Result     []matrix `json:"result"`
	} `json:"data"`
}

// matrix is one series of a range answer: [[unix seconds, "value"], …].
type matrix struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// fill puts m's values into vals at their step from start.
func (m matrix) fill(vals []float64, start time.Time, step time.Duration) error {
	for _, p := range m.Values {
		ts, ok := p[0].(float64)
		str, ok2 := p[1].(string)
		if !ok || !ok2 {
			return fmt.Errorf("a point %v is not [unix seconds, \"value\"]", p)
		}
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return fmt.Errorf("value %q: %v", str, err)
		}
		at := time.Unix(0, int64(math.Round(ts*1e3))*int64(time.Millisecond))
		i := int(math.Round(float64(at.Sub(start)) / float64(step)))
		if i >= 0 && i < len(vals) {
			vals[i] = v
		}
	}
	return nil
}

func labelsKey(m map[string]string) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

// decode reads a range query's answer: its series, or the error it
// carries. status is the HTTP status.
func decode(status int, body []byte) ([]matrix, error) {
	var r response
	jerr := json.Unmarshal(body, &r)
	switch {
	case status != http.StatusOK && jerr == nil && r.Error != "":
		return nil, fmt.Errorf("POST %s: %d %s: %s (%s)", APIPath, status, http.StatusText(status), r.Error, r.ErrorType)
	case status != http.StatusOK:
		return nil, fmt.Errorf("POST %s: %d %s", APIPath, status, http.StatusText(status))
	case jerr != nil:
		return nil, fmt.Errorf("POST %s: not a range query's answer (Prometheus's or VictoriaMetrics'): %v", APIPath, jerr)
	case r.Status != "success" || r.Data == nil:
		return nil, fmt.Errorf("POST %s: status %q, want \"success\" with data: not a range query's answer", APIPath, r.Status)
	case r.Data.ResultType != "matrix":
		return nil, fmt.Errorf("POST %s: result type %q, want \"matrix\"", APIPath, r.Data.ResultType)
	}
	return r.Data.Result, nil
}

func (s *Source) query(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]matrix, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	form := url.Values{
		"query": {query},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatInt(int64(step/time.Second), 10)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, s.describe(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", s.describe(err))
	}
	if len(body) > MaxResponseBytes {
		return nil, fmt.Errorf("POST %s: the answer is over %d MiB", APIPath, MaxResponseBytes>>20)
	}
	return decode(resp.StatusCode, body)
}

// describe makes a transport error say what happened without the
// source's URL (Name), which the caller shows once.
func (s *Source) describe(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return unreachable{fmt.Errorf("POST %s: no answer within %v", APIPath, s.opts.Timeout)}
		}
		return unreachable{fmt.Errorf("POST %s: %w", APIPath, ue.Err)}
	}
	return err
}

// unreachable is an error of a request that got no answer.
type unreachable struct{ error }

func (u unreachable) Unwrap() error { return u.error }

// Unreachable reports whether err is of a request that got no answer (the
// source is down, unreachable or too slow), rather than an answer that
// refused or did not fit the query: the caller need not send the source
// more queries now.
func Unreachable(err error) bool {
	var u unreachable
	return errors.As(err, &u)
}
