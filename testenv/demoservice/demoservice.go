// Package demoservice is the demo service of "lehr dev" and of the
// end-to-end tests: a stand-in for a real application on every host. It
// takes its configuration from a consumer subscription (Take, called from
// the subscription's callback), refuses a configuration under which it
// would fail most requests, and serves synthetic traffic shaped by the
// configuration it holds — request rate, error ratio and latency — counted
// on its own Prometheus endpoint the way an HTTP service instrumented with
// VictoriaMetrics/metrics would be, so the host's agent can scrape it.
//
// The traffic is simulated, not sent over sockets: every tick the service
// draws the tick's requests, failures and latencies from a seeded random
// source. What the agent sees on /metrics is indistinguishable from a real
// service's counters.
//
// Configuration keys (JSON numbers in the namespace):
//
//	demo.error_ratio  fraction of requests that fail with HTTP 500 (0 to MaxErrorRatio)
//	demo.latency_ms   median request latency in milliseconds (> 0)
//
// Imported by testenv/devtour (lehr dev) and tests.
package demoservice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Configuration keys and bounds.
const (
	KeyErrorRatio = "demo.error_ratio"
	KeyLatencyMS  = "demo.latency_ms"
	// MaxErrorRatio is the error ratio above which Take refuses a
	// configuration: the service would fail most of its requests.
	MaxErrorRatio = 0.5
	// DefaultLatencyMS is the median latency without demo.latency_ms.
	DefaultLatencyMS = 20
	// DefaultRate is the request rate when Options.Rate is zero.
	DefaultRate = 100
	// tick is how often the traffic is drawn.
	tick = 100 * time.Millisecond
)

// Options configure a Service. The zero value is valid.
type Options struct {
	// Rate is the synthetic requests per second; zero means DefaultRate.
	Rate int
	// Seed seeds the traffic's random source; services with the same seed
	// and configuration draw the same traffic.
	Seed uint64
}

// Config is what the service takes from its namespace.
type Config struct {
	ErrorRatio float64
	LatencyMS  float64
}

// Getter is the part of a consumer view the service reads
// (*consumer.View satisfies it).
type Getter interface {
	Get(key string) ([]byte, bool)
}

// Service is one host's demo service. Its methods are safe for concurrent
// use.
type Service struct {
	rate int
	rnd  *rand.Rand // owned by the Run goroutine

	mu  sync.Mutex
	cfg Config

	set      *metrics.Set
	ok, fail *metrics.Counter
	latency  *metrics.Histogram
}

// New returns a service holding the default configuration (no errors,
// DefaultLatencyMS). It starts nothing.
func New(opts Options) *Service {
	rate := opts.Rate
	if rate <= 0 {
		rate = DefaultRate
	}
	set := metrics.NewSet()
	return &Service{
		rate:    rate,
		rnd:     rand.New(rand.NewPCG(opts.Seed, 0x6c656872)),
		cfg:     Config{LatencyMS: DefaultLatencyMS},
		set:     set,
		ok:      set.NewCounter(`http_requests_total{code="200"}`),
		fail:    set.NewCounter(`http_requests_total{code="500"}`),
		latency: set.NewHistogram(`http_request_duration_seconds`),
	}
}

// Parse reads a configuration from a namespace view, checking it: an
// error ratio outside [0, MaxErrorRatio] or a latency that is not positive
// is refused, naming the key.
func Parse(v Getter) (Config, error) {
	cfg := Config{LatencyMS: DefaultLatencyMS}
	num := func(key string, dst *float64) error {
		raw, ok := v.Get(key)
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%s %q is not a number", key, raw)
		}
		*dst = f
		return nil
	}
	if err := errors.Join(num(KeyErrorRatio, &cfg.ErrorRatio), num(KeyLatencyMS, &cfg.LatencyMS)); err != nil {
		return Config{}, err
	}
	switch {
	case cfg.ErrorRatio < 0:
		return Config{}, fmt.Errorf("refusing %s %g: it must be between 0 and %g", KeyErrorRatio, cfg.ErrorRatio, MaxErrorRatio)
	case cfg.ErrorRatio > MaxErrorRatio:
		return Config{}, fmt.Errorf("refusing %s %g: it would fail most requests (at most %g)", KeyErrorRatio, cfg.ErrorRatio, MaxErrorRatio)
	case cfg.LatencyMS <= 0:
		return Config{}, fmt.Errorf("refusing %s %g: it must be above 0", KeyLatencyMS, cfg.LatencyMS)
	}
	return cfg, nil
}

// Take is the service taking a new configuration, as a consumer callback
// does: a configuration Parse refuses is returned as an error and the
// service keeps the one it had (the consumer library reports the error
// to the agent as a rejection).
func (s *Service) Take(v Getter) error {
	cfg, err := Parse(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	return nil
}

// Config returns the configuration the service serves with.
func (s *Service) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Run draws traffic every 100 ms until ctx ends. It returns nil when ctx
// ends; call it once.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	per := float64(s.rate) * tick.Seconds()
	carry := 0.0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		carry += per
		n := int(carry)
		carry -= float64(n)
		s.serve(n)
	}
}

// serve draws n requests under the current configuration.
func (s *Service) serve(n int) {
	cfg := s.Config()
	// Latency is lognormal around the median with a 0.3 log-sd; failed
	// requests are fast (a tenth of it), as a refused request is.
	for range n {
		lat := cfg.LatencyMS / 1000 * math.Exp(0.3*s.rnd.NormFloat64())
		if s.rnd.Float64() < cfg.ErrorRatio {
			s.fail.Inc()
			lat /= 10
		} else {
			s.ok.Inc()
		}
		s.latency.Update(lat)
	}
}

// Handler serves the service's metrics in the Prometheus text format.
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.set.WritePrometheus(w)
	})
}

// Serve serves Handler on ln at /metrics until ctx ends, then closes ln.
// It returns nil when ctx ends.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		srv.Close()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("demoservice: serve metrics: %w", err)
	}
}
