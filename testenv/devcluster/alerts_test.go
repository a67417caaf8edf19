package devcluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/metricshttp/metricstest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/prombin"
	"lehr.dev/lehr/testenv/wait"
)

// The rollouts' monitoring check against a real Prometheus (issue 35): the
// test serves a gauge, Prometheus scrapes it every second and evaluates a
// rule that fires while it is above 0, and control reads Prometheus's
// /api/v1/alerts.

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// gauges is the metric the test controls: errors of checkout in a zone.
type gauges struct{ a, b atomic.Int64 }

func (g *gauges) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE lehr_test_checkout_errors gauge\n")
	fmt.Fprintf(w, "lehr_test_checkout_errors{service=\"checkout\",zone=%q} %d\n", zoneA, g.a.Load())
	fmt.Fprintf(w, "lehr_test_checkout_errors{service=\"checkout\",zone=%q} %d\n", zoneB, g.b.Load())
}

// prometheus is a Prometheus server the test started.
type prometheus struct {
	url string
	cmd *exec.Cmd
}

// startPrometheus starts Prometheus scraping target every second, with
// the alert HighErrorRate firing (for: 0s) on every series of the gauge
// above 0.
func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin := prombin.Path(t)
	dir := t.TempDir()
	rules := `groups:
  - name: checkout
    interval: 1s
    rules:
      - alert: HighErrorRate
        expr: lehr_test_checkout_errors > 0
        for: 0s
        labels: {severity: page}
`
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: checkout
    static_configs: [{targets: [%q]}]
`, filepath.Join(dir, "rules.yml"), target)
	for name, body := range map[string]string{"rules.yml": rules, "prometheus.yml": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &prometheus{url: "http://" + addr, cmd: cmd}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "prometheus.log")); err == nil {
				t.Logf("prometheus's log:\n%s", b)
			}
		}
	})
	wait.Until(t, "prometheus ready", func() error {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
	return p
}

func (p *prometheus) stop() {
	if p.cmd.Process != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// firing returns the zones of the HighErrorRate alerts Prometheus says
// fire.
func (p *prometheus) firing() (map[string]bool, error) {
	resp, err := http.Get(p.url + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range r.Data.Alerts {
		if a.State == "firing" && a.Labels["alertname"] == "HighErrorRate" {
			out[a.Labels["zone"]] = true
		}
	}
	return out, nil
}

// alertReads returns control's lehr_control_alerts_reads_total{result}.
func alertReads(t *testing.T, c *devcluster.Cluster, result string) int {
	t.Helper()
	resp, err := http.Get("http://" + c.ControlMetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	prefix := fmt.Sprintf("lehr_control_alerts_reads_total{result=%q} ", result)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s%s: %v", prefix, v, err)
			}
			return n
		}
	}
	t.Fatalf("control's /metrics lacks %s", prefix)
	return 0
}

// monitoredPolicy: a canary in zone A, zone A, then zone B (the rest),
// held while checkout's HighErrorRate fires in the zone a stage moves.
func monitoredPolicy(onSourceError string) *lehrpb.RolloutPolicy {
	st := func(name string, bake time.Duration) *lehrpb.RolloutStage {
		return &lehrpb.RolloutStage{Name: name, Bake: durationpb.New(bake), ApplyDeadline: durationpb.New(time.Minute)}
	}
	canary := st("canary", time.Second)
	canary.Target = &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1, Zones: []string{zoneA}}}
	canary.Analysis = &lehrpb.CanaryAnalysis{Disabled: true}
	first := st("first zone", time.Second)
	first.Target = &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{zoneA}}}
	return &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary, first}, Monitoring: &lehrpb.MonitoringCheck{
		OnSourceError: onSourceError,
		Alerts:        []*lehrpb.AlertSelector{{Alert: "HighErrorRate", Matchers: []string{`service="checkout"`}, ZoneLabel: "zone"}},
	}}
}

func eventsOfKind(evs []*lehrpb.RolloutEvent, kind string) []*lehrpb.RolloutEvent {
	var out []*lehrpb.RolloutEvent
	for _, e := range evs {
		if e.GetKind() == kind {
			out = append(out, e)
		}
	}
	return out
}

// A stage waits while an alert its policy names fires in a zone it moves
// — the stages of other zones go on — saying which alert, since when and
// where; it writes nothing more while it waits, keeps waiting across a
// control restart without a second event, and goes on by itself when the
// alert clears. With Prometheus gone, a policy that says wait waits,
// saying so, and one that says proceed proceeds, saying so.
func TestRolloutWaitsWhileAlertFires(t *testing.T) {
	const alertsInterval = 200 * time.Millisecond
	metricshttp.ExposeMetadata() // as every daemon binary's main does
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var g gauges
	target := &http.Server{Handler: &g}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go target.Serve(tl)
	t.Cleanup(func() { target.Close() })
	prom := startPrometheus(t, tl.Addr().String())

	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Dir: t.TempDir(), Zones: []string{zoneA, zoneB}, AgentsPerZone: 1, Domains: []string{domain},
		// Reports every 500 ms (their lease: 1.5 s), so that a loaded
		// machine does not make a zone look silent while the rollout
		// waits: a silent zone rewrites its reason (it waits for
		// evidence first), which the test would take for a rewrite of a
		// hold.
		ReportInterval: 500 * time.Millisecond, Rollouts: true, RolloutInterval: 100 * time.Millisecond,
		AlertsURL: prom.url, AlertsInterval: alertsInterval, ControlMetricsListen: "127.0.0.1:0",
		Logger: controltest.Logger(t, slog.LevelError),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	prod := c.Producer()
	ns := domain + "/checkout-flags"
	// One consumer per zone: what each host's callbacks saw.
	hosts := map[string]*host{}
	for _, z := range []string{zoneA, zoneB} {
		cl, err := c.Consumer(z, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		h := &host{zone: z}
		sub, err := cl.Subscribe(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		sub.OnChange(func(ch consumer.Change) error {
			h.mu.Lock()
			h.seen = append(h.seen, seenVersion{ch.New.Version(), ch.New.RollbackOf(), time.Now()})
			h.mu.Unlock()
			return nil
		})
		hosts[z] = h
	}
	if _, err := prod.Publish(ctx, ns, props("new_cart", "false")); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.SetRolloutPolicy(ctx, ns, monitoredPolicy(""), "hold while checkout pages", 0); err != nil {
		t.Fatal(err)
	}

	// checkout errors in zone B: the alert fires there.
	g.b.Store(3)
	wait.Until(t, "prometheus to fire HighErrorRate in "+zoneB, func() error {
		z, err := prom.firing()
		if err == nil && !z[zoneB] {
			err = fmt.Errorf("firing in %v", z)
		}
		return err
	})
	v2, err := prod.Publish(ctx, ns, props("new_cart", "true"))
	if err != nil {
		t.Fatal(err)
	}
	// The canary and zone A go on; the rest (zone B) waits, naming the
	// alert.
	var held *lehrpb.Rollout
	wait.Until(t, "the rollout to wait for the alert in "+zoneB, func() error {
		r, err := prod.RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v2.GetSeq()})
		if err != nil {
			return err
		}
		if r.GetAlertHold() == nil || r.GetStage() != 1 {
			return fmt.Errorf("stage %d, %v: %s", r.GetStage(), r.GetState(), r.GetReason())
		}
		held = r
		return nil
	})
	t.Logf("held: %s", held.GetReason())
	for _, want := range []string{`stage "first zone" passed; stage "(remaining zones)" waits: alert HighErrorRate{`, `service="checkout"`, `zone="` + zoneB + `"`, "firing since ", " in " + zoneB, "it goes on by itself once it clears"} {
		if !strings.Contains(held.GetReason(), want) {
			t.Errorf("the held rollout's reason %q lacks %q", held.GetReason(), want)
		}
	}
	if h := held.GetAlertHold(); h.GetStage() != 2 || h.GetAlertCount() != 1 || h.GetAlerts()[0].GetLabels()["zone"] != zoneB || h.GetAlerts()[0].GetActiveTime() == nil {
		t.Errorf("alert hold %v; want stage 2 held by the alert of %s", h, zoneB)
	}
	wait.For(t, "the host of "+zoneA+" to apply version 2", func() bool { _, ok := hosts[zoneA].got(v2.GetSeq()); return ok })
	if _, ok := hosts[zoneB].got(v2.GetSeq()); ok {
		t.Errorf("the host of %s applied version %d while the alert fired there", zoneB, v2.GetSeq())
	}
	evs := events(t, ctx, c, ns, v2.GetSeq())
	if h := eventsOfKind(evs, "held"); len(h) != 1 || !strings.Contains(h[0].GetMessage(), "HighErrorRate{") {
		t.Errorf("held events %v; want one naming the alert", h)
	}
	// Waiting writes nothing: after several more reads of Prometheus,
	// the rollout is as it was.
	reads := alertReads(t, c, "ok")
	wait.For(t, "control to read prometheus 5 more times", func() bool { return alertReads(t, c, "ok") >= reads+5 })
	again, err := prod.RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v2.GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetUpdateTime().AsTime().Equal(held.GetUpdateTime().AsTime()) || again.GetEventCount() != held.GetEventCount() {
		t.Errorf("a held rollout was rewritten while the alert kept firing: update time %v → %v, events %d → %d, reason now %q",
			held.GetUpdateTime().AsTime(), again.GetUpdateTime().AsTime(), held.GetEventCount(), again.GetEventCount(), again.GetReason())
	}

	// control's /metrics, with the alerts source's families, is a valid
	// exposition (promtool check metrics).
	resp, err := http.Get("http://" + c.ControlMetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exp, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(exp), "# HELP lehr_control_alerts_firing ") || !strings.Contains(string(exp), "lehr_control_alerts_firing 1") {
		t.Errorf("control's /metrics lacks lehr_control_alerts_firing 1 with its HELP")
	}
	metricstest.Check(t, exp)

	// A control restart (the next leader) finds the same hold from the
	// rollout and its own read: no second event.
	if err := c.StopControl(); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartControl(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the restarted control to read prometheus 3 times", func() bool { return alertReads(t, c, "ok") >= 3 })
	wait.Until(t, "the rollout, after the restart", func() error {
		r, err := prod.RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v2.GetSeq()})
		if err != nil {
			return err
		}
		if r.GetEventCount() != held.GetEventCount() || r.GetAlertHold() == nil {
			t.Fatalf("after a control restart: %d events (was %d), hold %v: %s", r.GetEventCount(), held.GetEventCount(), r.GetAlertHold(), r.GetReason())
		}
		return nil
	})

	// The alert clears: the rollout goes on by itself.
	g.b.Store(0)
	r := waitRollout(t, ctx, c, ns, v2.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	wait.For(t, "the host of "+zoneB+" to apply version 2", func() bool { _, ok := hosts[zoneB].got(v2.GetSeq()); return ok })
	if r.GetAlertHold() != nil {
		t.Errorf("the hold outlived the alert: %v", r.GetAlertHold())
	}
	evs = events(t, ctx, c, ns, v2.GetSeq())
	ks := strings.Join(kinds(evs), " ")
	if !strings.Contains(ks, "held cleared advanced stage") {
		t.Errorf("events %s; want held, then cleared, advanced and the last stage", ks)
	}
	if cl := eventsOfKind(evs, "cleared"); len(cl) != 1 || !strings.Contains(cl[0].GetMessage(), "HighErrorRate{") {
		t.Errorf("cleared events %v; want one naming the alert it waited on", cl)
	}

	// Prometheus gone, the policy says wait: the first stage waits,
	// saying why.
	prom.stop()
	// Control keeps a read for AlertsInterval: past it, every read is
	// fresh (a bound, not a guess: alerts.Source.Read).
	time.Sleep(alertsInterval)
	v3, err := prod.Publish(ctx, ns, props("new_cart", "false"))
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the rollout to wait for the unreachable source", func() error {
		r, err := prod.RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v3.GetSeq()})
		if err != nil {
			return err
		}
		if r.GetAlertHold().GetSourceError() == "" {
			return fmt.Errorf("%v: %s", r.GetState(), r.GetReason())
		}
		t.Logf("source down, wait: %s", r.GetReason())
		for _, want := range []string{`stage "canary" waits: the alerts source ` + prom.url + ` could not be read`, "connection refused", "says wait on a source error"} {
			if !strings.Contains(r.GetReason(), want) {
				t.Errorf("reason %q lacks %q", r.GetReason(), want)
			}
		}
		if r.GetStageStartTime() != nil {
			t.Errorf("the first stage was entered: %s", r.GetReason())
		}
		return nil
	})
	// The policy says proceed: the next version goes on unchecked, saying
	// so (and supersedes the one waiting).
	if _, err := prod.SetRolloutPolicy(ctx, ns, monitoredPolicy("proceed"), "proceed when prometheus is down", 0); err != nil {
		t.Fatal(err)
	}
	v4, err := prod.Publish(ctx, ns, props("new_cart", "true"))
	if err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, c, ns, v4.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	evs = events(t, ctx, c, ns, v4.GetSeq())
	un := eventsOfKind(evs, "unchecked")
	if len(un) != 3 { // entering each stage: the canary, the first zone, the rest
		t.Errorf("%d unchecked events %v; want one per stage entered (3)", len(un), un)
	}
	for _, e := range append(eventsOfKind(events(t, ctx, c, ns, v2.GetSeq()), "cleared"), un...) {
		t.Logf("%s: %s", e.GetKind(), e.GetMessage())
	}
	for _, e := range un {
		if !strings.Contains(e.GetMessage(), "could not be read") || !strings.Contains(e.GetMessage(), "says proceed on a source error") {
			t.Errorf("unchecked event %q: want it to say the source could not be read and the policy says proceed", e.GetMessage())
		}
	}
}
