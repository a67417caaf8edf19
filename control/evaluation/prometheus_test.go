package evaluation_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/prombin"
)

// Checks written as queries, judged on a real Prometheus's data alone
// (issue 36): the test serves one small HTTP endpoint per host, each
// exposing that host's request and error counters, and Prometheus scrapes
// them every second with static labels host and zone (as an operator's
// relabelling would give them). No agent reports anything: the zones'
// status is empty, and the evaluations name their hosts.
//
// Small servers in the test rather than the dev cluster's demo services:
// the point is the source and the judge, and a whole cluster (control,
// distributors, agents, their canary rollout) would add a minute of CPU on
// a shared machine without exercising anything more of them; the
// counters being functions of the time of the scrape also makes the data,
// and so the verdicts, the same on every run.

// host is one host's endpoint: 100 requests a second since start, of
// which ratio fail — after from change on, when set.
type host struct {
	id           string
	start        time.Time
	ratio, after float64
	change       time.Time
}

func (h *host) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	secs := func(t time.Time) float64 { return math.Max(0, t.Sub(h.start).Seconds()) }
	reqs := 100 * secs(now)
	errs := h.ratio * reqs
	if h.after > 0 && now.After(h.change) {
		before := 100 * secs(h.change)
		errs = h.ratio*before + h.after*(reqs-before)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE shop_requests_total counter\nshop_requests_total %d\n", int64(reqs))
	fmt.Fprintf(w, "# TYPE shop_request_errors_total counter\nshop_request_errors_total %d\n", int64(errs))
}

// until calls f every 200 ms until it returns nil, failing the test with
// its last error after timeout.
func until(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestQueryChecksOnPrometheus(t *testing.T) {
	bin := prombin.Path(t)
	const zone = "zone-a"
	const iv = 2 * time.Second
	start := time.Now()
	// The change, on an interval boundary 12 s (6 intervals) ahead: the
	// time the hosts' history takes to fill the judge's before window.
	change := time.Unix((start.Add(12*time.Second).Unix()+1)/2*2, 0)
	hosts := []*host{{id: "a-1", ratio: 0.010, after: 0.20}} // the bad canary: 1 % → 20 % errors
	for i := 2; i <= 8; i++ {
		hosts = append(hosts, &host{id: fmt.Sprintf("a-%d", i), ratio: 0.008 + 0.001*float64(i%4)})
	}
	var targets []string
	for _, h := range hosts {
		h.start, h.change = start, change
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		targets = append(targets, fmt.Sprintf("{targets: [%q], labels: {host: %q, zone: %q}}", l.Addr().String(), h.id, zone))
	}

	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: shop\n    static_configs: [%s]\n", strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "prometheus.log")); err == nil {
				t.Logf("prometheus's log:\n%s", b)
			}
		}
	})

	set := metrics.NewSet()
	src, err := metricsource.New(metricsource.Options{URL: "http://lehr:secret@" + addr, Step: iv, Timeout: 5 * time.Second, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	// Ready: every host's series is in Prometheus.
	until(t, "prometheus scrapes every host", 30*time.Second, func() error {
		now := time.Now()
		res, err := src.QueryRange(context.Background(), `shop_requests_total`, now.Add(-time.Second), now, time.Second)
		if err != nil {
			return err
		}
		if len(res) != len(hosts) {
			return fmt.Errorf("%d series of %d hosts", len(res), len(hosts))
		}
		return nil
	})

	st := newFakeStore()
	svc, err := evaluation.New(evaluation.Options{Store: st, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	errorsCheck := &lehrpb.CanaryCheck{Name: "errors", Kind: "proportion", Query: &lehrpb.CanaryQuery{
		Numerator:   `sum by (host) (increase(shop_request_errors_total{job="shop",$population}[$interval]))`,
		Denominator: `sum by (host) (increase(shop_requests_total{job="shop",$population}[$interval]))`,
	}}
	evaluate := func(name string, canaries []string, cfg *lehrpb.CanaryAnalysis) *lehrpb.CanaryEvaluation {
		t.Helper()
		var controls []string
		for _, h := range hosts[1:] {
			if h.id != canaries[0] {
				controls = append(controls, h.id)
			}
		}
		if cfg == nil {
			cfg = &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{errorsCheck}}
		}
		ev, err := svc.Create(context.Background(), &lehrpb.CanaryEvaluation{
			Id: "shop/app@2/" + name, Namespace: "shop/app", Version: 2,
			Trials:     []*lehrpb.CanaryTrial{{Zone: zone, CanaryHosts: canaries, ControlHosts: controls}},
			Config:     cfg,
			ChangeTime: timestamppb.New(change), Bake: durationpb.New(4 * iv),
		})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	bad := evaluate("bad", []string{"a-1"}, nil)
	good := evaluate("good", []string{"a-2"}, nil)
	wrongZone := evaluate("wrong-zone-label", []string{"a-2"}, &lehrpb.CanaryAnalysis{ZoneLabel: "az", Checks: []*lehrpb.CanaryCheck{errorsCheck}})

	// Every running evaluation is judged at every look, as the
	// strategist's leader does, until both are DONE: the last look is 4
	// intervals after the change.
	until(t, "the evaluations end", 60*time.Second, func() error {
		if err := svc.StepAll(context.Background(), store.Guard{}); err != nil {
			return err
		}
		for _, ev := range []*lehrpb.CanaryEvaluation{bad, good} {
			got, _ := st.Evaluation(context.Background(), ev.GetId())
			if got.GetState() != lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE {
				return fmt.Errorf("%s: %s", got.GetId(), evaluation.Explain(got))
			}
		}
		return nil
	})
	got, _ := st.Evaluation(context.Background(), bad.GetId())
	res := got.GetResult()
	t.Logf("bad canary: %s", evaluation.Explain(got))
	if res.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || len(res.GetChecks()) != 1 {
		t.Fatalf("bad canary: %s; want FAIL on the one check", evaluation.Explain(got))
	}
	c := res.GetChecks()[0]
	for _, want := range []string{"errors.numerator/errors.denominator went from", "on 1 canary host(s)", "on 7 control host(s)", "rose more on the canary hosts than on the control hosts", "(Data: metrics source http://" + addr + ".)"} {
		if !strings.Contains(c.GetExplanation(), want) {
			t.Errorf("bad canary's explanation %q; want it to say %q", c.GetExplanation(), want)
		}
	}
	if c.GetCanaryAfter() < 0.15 || c.GetControlAfter() > 0.02 {
		t.Errorf("bad canary: canary after %v, control after %v; want about 0.2 and 0.01", c.GetCanaryAfter(), c.GetControlAfter())
	}
	got, _ = st.Evaluation(context.Background(), good.GetId())
	t.Logf("good canary: %s", evaluation.Explain(got))
	if v := got.GetResult().GetVerdict(); v != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS {
		t.Errorf("good canary: %s; want PASS", evaluation.Explain(got))
	}

	// A zone label the series lack: no series for the population, so
	// NONE saying so.
	got, _ = st.Evaluation(context.Background(), wrongZone.GetId())
	if r := got.GetResult(); r.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_NONE || !strings.Contains(r.GetReason(), `returned no series for the canary hosts of zone-a (a-2)`) || !strings.Contains(r.GetReason(), "the labels host and az") {
		t.Errorf("wrong zone label: %s; want NONE: no series, naming the labels", evaluation.Explain(got))
	}

	// The source down: NONE, with the reason, never PASS; its URL shown
	// without the credentials. The first query that gets no answer is the
	// last: the other check fails with it.
	stop()
	requests := &lehrpb.CanaryCheck{Name: "requests", Kind: "count", Direction: "decrease", Query: &lehrpb.CanaryQuery{
		Value: `sum by (host) (increase(shop_requests_total{$population}[$interval]))`}}
	down := evaluate("source-down", []string{"a-2"}, &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{errorsCheck, requests}})
	failedBefore := set.GetOrCreateCounter(`lehr_control_metrics_queries_total{result="error"}`).Get()
	ev, err := svc.Step(context.Background(), store.Guard{}, down)
	if err != nil {
		t.Fatal(err)
	}
	r := ev.GetResult()
	t.Logf("source down: %s", evaluation.Explain(ev))
	// The pooled connection of the last query may be the one that
	// finds Prometheus gone: EOF then, connection refused otherwise.
	unreachable := func(s string) bool { return strings.Contains(s, "connection refused") || strings.Contains(s, ": EOF") }
	if r.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_NONE || !strings.Contains(r.GetReason(), `check "errors" has no data: metrics source http://`+addr+`: POST /api/v1/query_range:`) ||
		!unreachable(r.GetReason()) || strings.Contains(r.GetReason(), "secret") {
		t.Errorf("source down: %s; want NONE saying the source is unreachable, without its credentials", evaluation.Explain(ev))
	}
	if cs := r.GetChecks(); len(cs) != 2 || cs[0].GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_NONE || !unreachable(cs[0].GetExplanation()) ||
		cs[1].GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_NONE || !unreachable(cs[1].GetExplanation()) {
		t.Errorf("source down: checks %v; want both checks NONE with the source's error", cs)
	}
	if n := set.GetOrCreateCounter(`lehr_control_metrics_queries_total{result="error"}`).Get() - failedBefore; n != 1 {
		t.Errorf("%d failed queries of a source down; want 1", n)
	}
}
