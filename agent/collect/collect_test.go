package collect_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/agent/collect"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/testenv/demoservice"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestStoreIntervals(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_003, 0)} // 3 s into an interval
	s := collect.NewStore(collect.Options{Interval: 10 * time.Second, Keep: 4, Now: c.now})
	if s.Signals("d/ns") != nil {
		t.Fatal("signals of a namespace never held")
	}
	s.Hold("d/ns", 5)
	s.Add("d/ns", canary.MetricConsumerRejections, 1)
	if got := s.Signals("d/ns"); got != nil {
		t.Fatalf("the open interval was reported: %v", got)
	}
	c.add(10 * time.Second)
	s.Add("d/ns", canary.MetricRequests, 100) // scraped: NaN before
	s.SetVersion("d/ns", 6)
	c.add(10 * time.Second)
	got := s.Signals("d/ns")
	if got.GetFirst() != 1_800_000_000 || got.GetIntervalSeconds() != 10 || fmt.Sprint(got.GetVersions()) != "[5 6]" {
		t.Fatalf("first %d, interval %d, versions %v; want 1800000000, 10, [5 6]", got.GetFirst(), got.GetIntervalSeconds(), got.GetVersions())
	}
	series := map[string][]float64{}
	for _, sr := range got.GetSeries() {
		series[sr.GetName()] = sr.GetValues()
	}
	if r := series[canary.MetricConsumerRejections]; fmt.Sprint(r) != "[1 0]" {
		t.Errorf("rejections %v; want [1 0] (own counts are 0 where nothing happened)", r)
	}
	if r := series[canary.MetricRequests]; len(r) != 2 || !math.IsNaN(r[0]) || r[1] != 100 {
		t.Errorf("requests %v; want [NaN 100] (scraped values are NaN without a scrape)", r)
	}
	// Bounded: Keep completed intervals, the oldest dropped.
	c.add(50 * time.Second)
	got = s.Signals("d/ns")
	if len(got.GetVersions()) != 4 || got.GetFirst() != 1_800_000_030 {
		t.Errorf("%d intervals from %d; want 4 from 1800000030", len(got.GetVersions()), got.GetFirst())
	}
	s.Release("d/ns")
	if s.Signals("d/ns") != nil || s.Namespaces() != 0 {
		t.Error("a released namespace still has signals")
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"http://127.0.0.1:9100/metrics", ""},
		{"http://[::1]:9100/metrics", ""},
		{"http://localhost:9100/metrics", ""},
		{"https://127.0.0.1:9100/metrics", "scheme"},
		{"http://10.0.0.1:9100/metrics", "not a loopback address"},
		{"http://example.com:80/metrics", "not a loopback address"},
		{"http://127.0.0.1/metrics", "no port"},
	} {
		err := collect.CheckURL(tc.url)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckURL(%s) = %v; want %q", tc.url, err, tc.want)
		}
	}
}

func TestParseStandardFamilies(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       collect.Totals
	}{
		{"http with a histogram", `# TYPE http_requests_total counter
http_requests_total{code="200"} 90
http_requests_total{code="503"} 7
http_requests_total{code="404"} 3
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.1"} 80
http_request_duration_seconds_bucket{le="+Inf"} 100
http_request_duration_seconds_sum 4.5
http_request_duration_seconds_count 100
process_start_time_seconds 1.7e9
`, collect.Totals{Requests: 100, Errors: 7, Seconds: 4.5, LatencyCount: 100, StartTime: 1.7e9}},
		{"grpc", `grpc_server_handled_total{grpc_code="OK",grpc_method="Get"} 50
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Get"} 2
grpc_server_handled_total{grpc_code="NotFound",grpc_method="Get"} 4
`, collect.Totals{Requests: 56, Errors: 2, Seconds: math.NaN(), LatencyCount: math.NaN(), StartTime: math.NaN()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := collect.Parse(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Parse = %+v; want %+v", got, tc.want)
			}
		})
	}
	if _, err := collect.Parse(strings.NewReader("not { metrics")); err == nil {
		t.Error("Parse of garbage: no error")
	}
}

// The scraper turns a real demo service's counters into per-interval
// increments, counts a failed scrape, and a counter going back as a
// restart.
func TestScraperDemoService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := demoservice.New(demoservice.Options{Rate: 1000})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go svc.Serve(ctx, ln)
	go svc.Run(ctx)

	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := collect.NewStore(collect.Options{Interval: time.Second, Now: c.now})
	s.Hold("d/ns", 1)
	sc := collect.NewScraper(s, 2*time.Second)
	target := collect.Target{Namespace: "d/ns", URL: "http://" + ln.Addr().String() + "/metrics"}
	if n := sc.ScrapeAll(ctx, []collect.Target{target}); n != 0 {
		t.Fatalf("%d failed scrapes of the demo service", n)
	}
	// Wait for traffic between two scrapes (the service draws every 100 ms).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.add(time.Second)
		sc.ScrapeAll(ctx, []collect.Target{target})
		sig := s.Signals("d/ns")
		var reqs float64
		for _, sr := range sig.GetSeries() {
			if sr.GetName() == canary.MetricRequests {
				for _, v := range sr.GetValues() {
					if !math.IsNaN(v) {
						reqs += v
					}
				}
			}
		}
		if reqs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no requests counted after 30 s: %v", sig)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bad := collect.Target{Namespace: "d/ns", URL: "http://127.0.0.1:1/metrics"}
	if n := sc.ScrapeAll(ctx, []collect.Target{target, bad}); n != 1 {
		t.Errorf("%d failed scrapes; want 1 (the closed port)", n)
	}

	// A counter going back is a restart.
	var total float64 = 1000
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "http_requests_total{code=\"200\"} %g\n", total)
	}))
	defer srv.Close()
	s.Hold("d/other", 1)
	other := collect.Target{Namespace: "d/other", URL: srv.URL}
	sc.ScrapeAll(ctx, []collect.Target{other})
	c.add(time.Second)
	mu.Lock()
	total = 40
	mu.Unlock()
	sc.ScrapeAll(ctx, []collect.Target{other})
	c.add(time.Second)
	got := map[string][]float64{}
	for _, sr := range s.Signals("d/other").GetSeries() {
		got[sr.GetName()] = sr.GetValues()
	}
	if r := got[canary.MetricProcessRestarts]; len(r) < 2 || r[len(r)-1] != 1 {
		t.Errorf("restarts %v; want 1 in the last interval", r)
	}
	if r := got[canary.MetricRequests]; len(r) < 2 || r[len(r)-1] != 40 {
		t.Errorf("requests %v; want 40 after the reset", r)
	}
}

// LastChange finds the latest version change among the completed
// intervals: the interval it happened in is neither side, intervals that
// held neither version are left out, and a first install is no change.
func TestLastChange(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := collect.NewStore(collect.Options{Interval: 10 * time.Second, Now: c.now})
	s.Hold("d/ns", 0)
	step := func(v uint64, rejections float64) {
		if v != 0 {
			s.SetVersion("d/ns", v)
		}
		s.Add("d/ns", canary.MetricConsumerRejections, rejections)
		c.add(10 * time.Second)
	}
	step(0, 0)
	step(1, 0) // first install during interval 1
	if _, ok := s.LastChange("d/ns"); ok {
		t.Fatal("a first install counted as a change")
	}
	step(1, 1)
	step(2, 2) // interval 3: held 2 at its end (a change from 1, then back below)
	step(3, 3) // interval 4
	step(3, 4)
	step(3, 5)
	ch, ok := s.LastChange("d/ns")
	if !ok {
		t.Fatal("no change found")
	}
	if ch.Version != 3 || ch.Previous != 2 || ch.Index != 5 || ch.Time != time.Unix(1_800_000_050, 0) || ch.Interval != 10*time.Second {
		t.Fatalf("change %+v; want 2 → 3 at index 5, 1800000050", ch)
	}
	got := fmt.Sprint(ch.Metrics[canary.MetricConsumerRejections])
	if want := "[NaN NaN NaN 2 NaN 4 5]"; got != want {
		t.Errorf("rejections around the change %s; want %s (only version 2's interval before, the change's own interval out)", got, want)
	}
}
