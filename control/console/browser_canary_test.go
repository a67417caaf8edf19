package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/demoservice"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// The demo's bad change in the browser: every host of a dev cluster runs
// the demo service (as lehr dev does), whose metrics its agent scrapes; a
// change the services accept but serve a fifth of their requests badly
// under is failed by the canary analysis of its first stage. The rollout
// page links the evaluation; the evaluation's page shows the verdict and
// every check as GetCanaryEvaluation answers them, with the error ratio's
// plot (screenshot canary-failed.png). With -console.readme-shots DIR it
// also writes the README's pictures of the two pages.
func TestBrowserCanaryFailed(t *testing.T) {
	b := newBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Zones: []string{"zone-a", "zone-b"}, AgentsPerZone: 5, Domains: []string{"shop"},
		ControlHTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 100 * time.Millisecond, ReportInterval: 200 * time.Millisecond,
		NoSync: true, Dir: t.TempDir(), Logger: controltest.Logger(t, slog.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.ControlHTTPAddr()
	prod := c.Producer()
	api := prod.RPC()
	// One canary host of ten, the other nine its control hosts.
	stage := &lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(12 * time.Second), ApplyDeadline: durationpb.New(time.Minute),
		Target:   &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
		Analysis: &lehrpb.CanaryAnalysis{Alpha: 0.001}}
	if _, err := prod.SetRolloutPolicy(ctx, "shop", &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{stage}}, "canary first", 0); err != nil {
		t.Fatal(err)
	}
	ns := "shop/svc"
	svcCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	var agents []*devcluster.AgentHandle
	for _, z := range c.Zones() {
		for i := range 5 {
			svc := demoservice.New(demoservice.Options{Seed: uint64(len(agents))})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go svc.Serve(svcCtx, ln)
			go svc.Run(svcCtx)
			cl, err := c.Consumer(z, i, func(o *consumer.Options) { o.MetricsURL = "http://" + ln.Addr().String() + "/metrics" })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			sub.OnChange(func(ch consumer.Change) error { return svc.Take(ch.New) })
			a, _ := c.Agent(z, i)
			agents = append(agents, a)
		}
	}
	props := func(errRatio string) []producer.Property {
		return []producer.Property{{Key: demoservice.KeyErrorRatio, Value: []byte(errRatio)}, {Key: demoservice.KeyLatencyMS, Value: []byte("20")}}
	}
	if _, err := prod.Publish(ctx, ns, props("0.01")); err != nil {
		t.Fatal(err)
	}
	// Each host's history before the change: some scraped intervals.
	for _, a := range agents {
		wait.For(t, a.HostID+" keeping 8 intervals of requests", func() bool {
			resp, err := a.Local().Signals(ctx, &lehrpb.AgentSignalsRequest{Namespace: ns})
			if err != nil {
				return false
			}
			n := 0
			for _, sr := range resp.GetSignals().GetSeries() {
				if sr.GetName() == "requests" {
					for _, v := range sr.GetValues() {
						if v > 0 {
							n++
						}
					}
				}
			}
			return n >= 8
		})
	}
	bad, err := prod.Publish(ctx, ns, props("0.2"))
	if err != nil {
		t.Fatal(err)
	}
	var r *lehrpb.Rollout
	wait.For(t, "the bad change's rollout to fail", func() bool {
		r, err = prod.GetRollout(ctx, ns, bad.GetSeq())
		return err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_FAILED
	})
	if r.GetEvaluationId() == "" {
		t.Fatalf("the failed rollout names no evaluation: %v", r)
	}
	ev, err := api.GetCanaryEvaluation(ctx, &lehrpb.GetCanaryEvaluationRequest{Id: r.GetEvaluationId()})
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetResult().GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
		t.Fatalf("the bad change's evaluation: %v (its rollout: %s)", ev.GetResult(), r.GetReason())
	}

	// From the rollout's page to its evaluation's.
	b.open(fmt.Sprintf("%s/console/rollouts/shop/svc/%d", base, bad.GetSeq()), "canary-rollout-failed")
	b.readmeShot("console-rollout", "main", "")
	b.run("follow the evaluation's link", chromedp.Click(chromedp.CSS("a#evaluation")), chromedp.WaitVisible(chromedp.CSS("#verdict")))
	b.noErrors("the evaluation page")
	b.shot("canary-failed")
	b.shotOf("canary-failed-plot", `article.check[data-check="error ratio"]`)
	b.readmeShot("console-canary", "main", `article.check[data-check="error ratio"]`)
	if got := b.text("#verdict"); got != "FAIL" {
		t.Errorf("evaluation page's verdict %q, want FAIL", got)
	}
	if got, want := b.text("#look"), evaluation.LookLine(ev.GetResult()); got != want {
		t.Errorf("evaluation page's look:\n%s\nGetCanaryEvaluation's, in lehr canary show's words:\n%s", got, want)
	}
	if got, want := b.count("article.check"), len(ev.GetResult().GetChecks()); got != want {
		t.Errorf("evaluation page shows %d checks; GetCanaryEvaluation has %d", got, want)
	}
	plotted := 0
	for _, ch := range ev.GetResult().GetChecks() {
		art := `article.check[data-check="` + ch.GetName() + `"] `
		if got, want := b.text(art+`[data-field="verdict"]`), evaluation.VerdictWord(ch.GetVerdict()); got != want {
			t.Errorf("check %s: verdict %q on the page, %q from the API", ch.GetName(), got, want)
		}
		if got := b.text(art + `[data-field="explanation"]`); got != ch.GetExplanation() {
			t.Errorf("check %s: explanation on the page\n%s\nfrom the API\n%s", ch.GetName(), got, ch.GetExplanation())
		}
		if len(ch.GetCanarySeries()) > 0 && b.count(art+"svg.plot") > 0 {
			plotted++
			if b.count(art+"svg.plot polyline.series-canary") == 0 || b.count(art+"svg.plot polyline.series-control") == 0 {
				t.Errorf("check %s: its plot lacks the canary or the control hosts' series", ch.GetName())
			}
		}
		if ch.GetName() == "error ratio" && (ch.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || b.count(art+"svg.plot text.look-failed") != 1) {
			t.Errorf("check error ratio: %v, %d failed looks marked on its plot; want FAIL, 1", ch.GetVerdict(), b.count(art+"svg.plot text.look-failed"))
		}
	}
	if plotted == 0 {
		t.Errorf("no check of the evaluation has series to plot: %v", ev.GetResult())
	}
	if got := b.text("#hostchecks"); !strings.Contains(got, "Host-level checks") {
		t.Errorf("evaluation page's host-level checks: %q", got)
	}
	// The page's JSON is GetCanaryEvaluation's answer.
	var doc struct {
		Evaluation json.RawMessage `json:"evaluation"`
	}
	getJSON(t, httpClient(t, nil), base+"/console/canary/"+ev.GetId()+"?format=json", &doc)
	got := &lehrpb.CanaryEvaluation{}
	if err := protojson.Unmarshal(doc.Evaluation, got); err != nil {
		t.Fatal(err)
	}
	// As bytes: a series' NaN (no data) is unequal to itself.
	gb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
	if string(gb) != string(wb) {
		t.Errorf("the evaluation page's JSON differs from GetCanaryEvaluation's answer:\n%v\n%v", got, ev)
	}
	b.open(base+"/console/canary/", "canary-list")
	if n := b.count(`#evaluations a[href="/console/canary/` + ev.GetId() + `"]`); n != 1 {
		t.Errorf("the evaluations list links the failed evaluation %d times, want 1", n)
	}
}
