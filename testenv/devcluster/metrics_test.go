package devcluster_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/metricshttp/metricstest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// TestMetricsArePrometheusNative scrapes the /metrics of control, a
// distributor and an agent once a snapshot, a patch and a rejected publish
// have gone through (so the labelled families and the latency histograms
// have series), and checks each with "promtool check metrics" and the
// pure-Go lint (internal/metricshttp/metricstest): a HELP text and a TYPE
// line for every family, le buckets, Prometheus's naming conventions —
// and then that every metric deploy/prometheus's rules and
// deploy/grafana's dashboard name is on one of them.
func TestMetricsArePrometheusNative(t *testing.T) {
	metricshttp.ExposeMetadata() // as every daemon binary's main does
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const zone, ns = "zone-a", "app/metrics"
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync:               true, // a test cluster need not survive a machine crash
		Dir:                  t.TempDir(),
		Zones:                []string{zone},
		Domains:              []string{"app"},
		Logger:               controltest.Logger(t, slog.LevelError),
		ControlMetricsListen: "127.0.0.1:0",
		DistributorMetrics:   true,
		AgentMetrics:         true,
		// The strategist's series and the zone's reports are on control's
		// /metrics only with rollouts on and a report in.
		ReportInterval:  200 * time.Millisecond,
		Rollouts:        true,
		RolloutInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	cl, err := c.Consumer(zone, 0)
	if err != nil {
		t.Fatalf("Consumer: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	sub, err := cl.Subscribe(ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	v1, err := c.Producer().Publish(ctx, ns, []producer.Property{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	wait.For(t, "the consumer at v1", func() bool { return sub.View().Version() == v1.GetSeq() })
	// A global blast: the patch reaches every host at once, and its
	// rollout runs on the evidence.
	if _, err := c.Producer().SetRolloutPolicy(ctx, "app", &lehrpb.RolloutPolicy{GlobalBlast: true}, "metrics test", 0); err != nil {
		t.Fatalf("SetRolloutPolicy: %v", err)
	}
	v2, err := c.Producer().Patch(ctx, ns, v1.GetSeq(), producer.Patch{Set: []producer.Property{{Key: "b", Value: []byte("two")}}})
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	wait.For(t, "the consumer at v2", func() bool { return sub.View().Version() == v2.GetSeq() })
	if _, err := c.Producer().Publish(ctx, ns, []producer.Property{{Key: "../bad", Value: []byte("x")}}); err == nil {
		t.Fatal("Publish of key ../bad succeeded; want INVALID_NAME")
	}
	agent, err := c.Agent(zone, 0)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the agent's metrics listener", func() bool { return agent.MetricsAddr() != "" })

	wait.For(t, "control's series of rollouts and zone reports", func() bool {
		body := string(scrapeMetrics(t, c.ControlMetricsAddr()))
		return strings.Contains(body, `lehr_control_rollouts{state="running"}`) &&
			strings.Contains(body, `lehr_control_zone_reports_total{zone="zone-a"}`)
	})

	// Every daemon names its build (issue 33).
	build := metricshttp.BuildInfoSeries(buildinfo.Get()) + " 1\n"

	expositions := map[string][]byte{}
	for _, d := range []struct {
		daemon, addr string
		want         []string // lines or parts of lines the exposition must have
	}{
		{"control", c.ControlMetricsAddr(), []string{
			"# TYPE lehr_control_request_duration_seconds histogram",
			`lehr_control_request_duration_seconds_bucket{method="Publish",le="0.0005"} `,
			`lehr_control_etcd_duration_seconds_bucket{op="txn",le="+Inf"} `,
			`lehr_control_rejections_total{reason="INVALID_NAME"} 1`,
			`lehr_control_publishes_total{kind="patch"} 1`,
			`lehr_control_domain_max_stored_bytes{domain="app"} `,
			"# TYPE lehr_control_propagation_seconds histogram",
			`lehr_control_propagation_seconds_bucket{size_class="small",subscribers="1",le="15"} `,
			`lehr_control_propagation_objective_total{size_class="small",result="met"} `,
			`lehr_control_propagation_incomplete_total{reason="superseded"} `,
			`lehr_control_propagation_in_flight `,
			"# TYPE lehr_build_info gauge\n" + build,
		}},
		{"distributor", c.Distributors(zone)[0].MetricsAddr(), []string{
			`lehr_distributor_pushes_total{kind="snapshot"} 1`,
			`lehr_distributor_pushes_total{kind="patch"} 1`,
			"# TYPE lehr_distributor_versions_built_total counter",
			`lehr_distributor_namespace_lag{namespace="app/metrics"} 0`,
			`lehr_tls_certificate_expiry_timestamp_seconds{use="server"} `,
			"# TYPE lehr_build_info gauge\n" + build,
		}},
		{"agent", agent.MetricsAddr(), []string{
			`lehr_agent_updates_applied_total{kind="patch"} 1`,
			`lehr_agent_namespace_version{namespace="app/metrics"} 2`,
			"# TYPE go_cgo_calls_total counter",
			`lehr_tls_certificate_expiry_timestamp_seconds{use="client"} `,
			"# TYPE lehr_build_info gauge\n" + build,
		}},
	} {
		t.Run(d.daemon, func(t *testing.T) {
			body := scrapeMetrics(t, d.addr)
			expositions[d.daemon] = body
			for _, want := range d.want {
				if !strings.Contains(string(body), want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			metricstest.Check(t, body)
		})
	}

	// The alerting rules and the dashboard name only metrics these serve
	// (deploy/prometheus, deploy/grafana).
	t.Run("DashboardsAndRulesNameExportedMetrics", func(t *testing.T) {
		if len(expositions) != 3 {
			t.Skipf("scraped %d of 3 daemons", len(expositions))
		}
		checkNamesExported(t, expositions)
	})
}

func scrapeMetrics(t *testing.T, addr string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, %v", resp.StatusCode, err)
	}
	return body
}
