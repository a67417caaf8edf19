package demoservice

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type view map[string]string

func (v view) Get(k string) ([]byte, bool) {
	s, ok := v[k]
	return []byte(s), ok
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      view
		want    Config
		wantErr string
	}{
		{"defaults", view{}, Config{LatencyMS: DefaultLatencyMS}, ""},
		{"both", view{KeyErrorRatio: "0.2", KeyLatencyMS: " 35 "}, Config{ErrorRatio: 0.2, LatencyMS: 35}, ""},
		{"at the bound", view{KeyErrorRatio: "0.5"}, Config{ErrorRatio: 0.5, LatencyMS: DefaultLatencyMS}, ""},
		{"above the bound", view{KeyErrorRatio: "0.9"}, Config{}, "refusing demo.error_ratio 0.9: it would fail most requests"},
		{"negative ratio", view{KeyErrorRatio: "-0.1"}, Config{}, "refusing demo.error_ratio -0.1: it must be between 0 and 0.5"},
		{"not a number", view{KeyErrorRatio: `"high"`}, Config{}, `demo.error_ratio "\"high\"" is not a number`},
		{"zero latency", view{KeyLatencyMS: "0"}, Config{}, "refusing demo.latency_ms 0: it must be above 0"},
		{"NaN latency", view{KeyLatencyMS: "NaN"}, Config{}, `demo.latency_ms "NaN" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%v) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%v): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%v) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestTakeKeepsTheOldConfigOnRefusal(t *testing.T) {
	s := New(Options{})
	if err := s.Take(view{KeyErrorRatio: "0.05"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Take(view{KeyErrorRatio: "0.9"}); err == nil {
		t.Fatal("Take accepted an error ratio of 0.9")
	}
	if got := s.Config().ErrorRatio; got != 0.05 {
		t.Errorf("error ratio after a refused config = %g, want 0.05 (the one it held)", got)
	}
}

// TestTrafficFollowsTheConfig draws traffic under two configurations and
// checks the counters the agent would scrape.
func TestTrafficFollowsTheConfig(t *testing.T) {
	s := New(Options{Seed: 1})
	if err := s.Take(view{KeyErrorRatio: "0.1", KeyLatencyMS: "50"}); err != nil {
		t.Fatal(err)
	}
	s.serve(10000)
	ok, fail := s.ok.Get(), s.fail.Get()
	if ok+fail != 10000 {
		t.Fatalf("ok %d + failed %d requests, want 10000", ok, fail)
	}
	// 10,000 draws at 10 %: a binomial standard deviation is 30.
	if fail < 850 || fail > 1150 {
		t.Errorf("%d of 10000 requests failed at error ratio 0.1, want about 1000", fail)
	}
	var b strings.Builder
	s.set.WritePrometheus(&b)
	var sum float64
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "http_request_duration_seconds_sum "); ok {
			if _, err := fmt.Sscan(v, &sum); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
	mean := sum / 10000 // seconds
	// Successes: median 50 ms, lognormal sd 0.3 → mean ≈ 52 ms; failures a tenth.
	if mean < 0.040 || mean > 0.055 {
		t.Errorf("mean latency %.4f s, want about 0.048 s", mean)
	}
}

func TestServeExposesPrometheusText(t *testing.T) {
	s := New(Options{Seed: 2})
	s.serve(100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`http_requests_total{code="200"} 100`, "http_request_duration_seconds_count 100", "http_request_duration_seconds_sum "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
