// Package metricshttp is the one /metrics handler of Lehr's daemons: the
// daemon's own metric set and the process's go_* and process_* series (read
// from the Go runtime and /proc; no global metric set is involved), in the
// Prometheus text exposition format.
//
// It imports nothing of Lehr's; the daemons import it.
package metricshttp

import (
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// ContentType is the Prometheus text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ReadHeaderTimeout bounds how long a metrics client may take to send its
// request headers.
const ReadHeaderTimeout = 10 * time.Second

// Handler serves set, then the process metrics.
func Handler(set *metrics.Set) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		set.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	})
}

// Server returns an HTTP server serving Handler(set) on /metrics, plus any
// extra routes (pattern → handler, as http.ServeMux takes them). The caller
// serves it on its listener and closes it.
func Server(set *metrics.Set, extra map[string]http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(set))
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: ReadHeaderTimeout}
}
