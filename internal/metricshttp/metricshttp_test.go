package metricshttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func TestServerServesSetAndProcessMetrics(t *testing.T) {
	set := metrics.NewSet()
	set.NewCounter("lehr_test_total").Add(3)
	srv := httptest.NewServer(Server(set, map[string]http.Handler{
		"GET /healthz": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }),
	}).Handler)
	defer srv.Close()
	get := func(path string) (string, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(b)
	}
	ct, body := get("/metrics")
	if ct != ContentType || !strings.Contains(body, "lehr_test_total 3\n") || !strings.Contains(body, "go_goroutines ") {
		t.Errorf("/metrics: content type %q, body lacks the set's counter or go_goroutines:\n%s", ct, body)
	}
	if _, body := get("/healthz"); body != "ok\n" {
		t.Errorf("/healthz = %q, want ok", body)
	}
}
