package devtour

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The Prometheus "lehr dev" starts scrapes every demo service it is told
// of, labelled with the service's host and zone, as query checks expect.
func TestPrometheusScrapesTheServices(t *testing.T) {
	bin := os.Getenv("LEHR_PROMETHEUS")
	if bin == "" {
		if p, err := filepath.Abs(filepath.Join("..", "..", "bin", "prometheus")); err == nil {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		if p, err := exec.LookPath("prometheus"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no prometheus in bin/ or on $PATH: run scripts/deps.sh")
		}
		t.Skip("no prometheus in bin/ or on $PATH (nor $LEHR_PROMETHEUS): run scripts/deps.sh")
	}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE http_requests_total counter\nhttp_requests_total{code=\"200\"} 7\n")
	}))
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := startPrometheus(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if err := p.writeTargets([]*hostService{{zone: "zone-a", host: "zone-a-host-0", metrics: svc.URL + "/metrics"}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(`http_requests_total{host="zone-a-host-0",zone="zone-a",code="200"}`))
		if err == nil {
			var r struct {
				Data struct {
					Result []json.RawMessage `json:"result"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err == nil && len(r.Data.Result) == 1 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus did not scrape the service with its host and zone labels within a minute (%v)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
