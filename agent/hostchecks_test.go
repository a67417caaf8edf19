package agent_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/demoservice"
	"lehr.dev/lehr/testenv/wait"
)

// props is a namespace view for the demo service.
type props map[string]string

func (p props) Get(k string) ([]byte, bool) {
	v, ok := p[k]
	return []byte(v), ok
}

// A host whose service serves far more errors after its configuration
// changed fails its own host-level check — against its own history, with
// the numbers — shows it in the agent's status and metrics, and the
// distributor sends the failing host's report up to control's zone
// status.
func TestHostChecks(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/hostcheck"
	good := props{demoservice.KeyErrorRatio: "0.01", demoservice.KeyLatencyMS: "5"}
	v1 := h.publish(ns, good)
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) { o.SignalsInterval = time.Second })

	svc, metricsURL := startDemo(t, demoservice.Options{Rate: 200})
	if err := svc.Take(good); err != nil {
		t.Fatal(err)
	}
	sub, err := r.api.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "demo@1", MetricsUrl: metricsURL})
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string(good))

	// The host's history before the change: intervals at version 1 with
	// requests (a scrape's first interval has none: counters need two).
	wait.For(t, "10 intervals of requests at version 1", func() bool {
		resp, err := r.api.Signals(ctx(t), &lehrpb.AgentSignalsRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		sig, n := resp.GetSignals(), 0
		for _, sr := range sig.GetSeries() {
			if sr.GetName() == canary.MetricRequests {
				for i, v := range sr.GetValues() {
					if v > 0 && sig.GetVersions()[i] == v1.GetSeq() {
						n++
					}
				}
			}
		}
		return n >= 10
	})
	if hc := status(t, r, ns).GetHostChecks(); hc != nil {
		t.Fatalf("host checks before any change: %v", hc)
	}

	bad := props{demoservice.KeyErrorRatio: "0.4", demoservice.KeyLatencyMS: "5"}
	v2 := h.patch(ns, v1.GetSeq(), bad)
	waitFile(t, sub.GetPath(), v2.GetSeq(), map[string]string(bad))
	if err := svc.Take(bad); err != nil {
		t.Fatal(err)
	}
	var hc *lehrpb.HostChecks
	wait.For(t, "the host-level checks failing", func() bool {
		hc = status(t, r, ns).GetHostChecks()
		return hc.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
	})
	if hc.GetVersion() != v2.GetSeq() || hc.GetPreviousVersion() != v1.GetSeq() || hc.GetLooks() != agent.HostBake {
		t.Errorf("host checks of %d → %d over %d looks; want %d → %d over %d", hc.GetPreviousVersion(), hc.GetVersion(), hc.GetLooks(), v1.GetSeq(), v2.GetSeq(), agent.HostBake)
	}
	var errs *lehrpb.HostCheckResult
	for _, c := range hc.GetChecks() {
		if c.GetName() == "error ratio" {
			errs = c
		}
	}
	if errs.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || !(errs.GetBefore() < 0.05 && errs.GetAfter() > 0.2) ||
		!strings.Contains(errs.GetExplanation(), "went from") {
		t.Errorf("error ratio host check %v; want FAIL from about 1 %% to about 40 %%, explained", errs)
	}
	if got := r.a.Metrics().GetOrCreateGauge("lehr_agent_host_checks_failing", nil).Get(); got != 1 {
		t.Errorf("lehr_agent_host_checks_failing = %v; want 1", got)
	}

	// Up the report path: the distributor sends a failing host's report
	// to control even though no rollout names the host.
	wait.For(t, "control's zone status showing the failing host", func() bool {
		st, err := h.ctl.Client.GetZoneStatus(ctx(t), &lehrpb.GetZoneStatusRequest{Zone: zone})
		if err != nil {
			t.Fatal(err)
		}
		for _, hr := range st.GetHosts() {
			if hr.GetHostId() == host && hr.GetReport().GetHostChecks().GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
				return true
			}
		}
		return false
	})
}

func status(t *testing.T, r *runningAgent, ns string) *lehrpb.NamespaceStatus {
	t.Helper()
	st, err := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.GetNamespaces() {
		if s.GetNamespace() == ns {
			return s
		}
	}
	t.Fatalf("status lacks %s: %v", ns, st)
	return nil
}

// startDemo runs a demo service with synthetic traffic until the test
// ends and returns it with its metrics endpoint's URL.
func startDemo(t *testing.T, opts demoservice.Options) (*demoservice.Service, string) {
	t.Helper()
	svcCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc := demoservice.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go svc.Serve(svcCtx, ln)
	go svc.Run(svcCtx)
	return svc, "http://" + ln.Addr().String() + "/metrics"
}
