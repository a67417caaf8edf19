package distributor_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/internal/pki"
)

// Runtime profiles are served on the metrics listener only when asked
// for: the listener has no authentication.
func TestPprofServedOnlyWhenAsked(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		d, err := distributor.New(distributor.Options{
			Zone:          zone,
			ID:            "dist-pprof",
			ControlAddr:   "127.0.0.1:1", // nothing listens: the distributor keeps redialing
			Listen:        "127.0.0.1:0",
			TLS:           p.tls("distributor", pki.Server),
			MetricsListen: "127.0.0.1:0",
			Pprof:         tc.pprof,
			Logger:        quiet(),
		})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		select {
		case <-d.Ready():
		case err := <-done:
			cancel()
			t.Fatalf("Run: %v", err)
		}
		resp, err := http.Get("http://" + d.MetricsAddr().String() + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Pprof %v: GET /debug/pprof/cmdline: status %d, want %d", tc.pprof, resp.StatusCode, tc.want)
		}
		d.Close()
		<-done
		cancel()
	}
}
