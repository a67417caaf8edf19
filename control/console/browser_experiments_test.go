package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// Policy experiments in the browser: a dev cluster's hosts decide with a
// live policy while previewing an experiment that denies one more user;
// the experiment is then changed (a new etag) and previewed again. The
// experiments page shows every zone's and the fleet's counts of every
// etag pair as GetPolicyExperimentCounts answers them, the experiment's
// state in lehr's words, and the commit gate's answer for the bounds asked
// (refused below them, passing above), and its JSON is the API's answer
// (screenshot experiments.png). Control samples the counts every 200 ms
// here: the traffic of the new etag comes in four batches of different
// disagreement, each sampled before the next, and the page plots the
// samples the API answers, point for point.
func TestBrowserExperiments(t *testing.T) {
	b := newBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Zones: []string{"zone-a", "zone-b"}, AgentsPerZone: 2, Domains: []string{"shop"},
		ControlHTTPListen: "127.0.0.1:0", ReportInterval: 200 * time.Millisecond, Rollouts: true, RolloutInterval: 100 * time.Millisecond,
		ExperimentSampleInterval: 200 * time.Millisecond, NoSync: true, Dir: t.TempDir(),
		Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.ControlHTTPAddr()
	api := c.Producer().RPC()
	ns, parent := "shop/fw", "domains/shop/policies/fw"
	rule := func(key, effect, cond string) *lehrpb.Property {
		b, _ := json.Marshal(policy.Rule{Effect: policy.Effect(effect), Condition: cond})
		return &lehrpb.Property{Key: key, Value: b, ContentType: "application/json"}
	}
	live := []*lehrpb.Property{rule("all", "allow", "true"), rule("mallory", "deny", `principal.user == "mallory"`)}
	if _, err := api.Publish(ctx, &lehrpb.PublishRequest{Namespace: ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: live, Message: "live"}); err != nil {
		t.Fatal(err)
	}
	var subs []*consumer.Subscription
	for _, z := range c.Zones() {
		for i := range 2 {
			cl, err := c.Consumer(z, i, func(o *consumer.Options) { o.PreviewReportInterval, o.DecisionLog = 100*time.Millisecond, io.Discard })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sub.Next(ctx, nil); err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
	}
	op, err := api.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "deny-eve",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent,
			Rules: append(slices.Clone(live), rule("eve", "deny", `principal.user == "eve"`))}}})
	if err != nil {
		t.Fatal(err)
	}
	exp := new(lehrpb.PolicyExperiment)
	if err := op.GetResponse().UnmarshalTo(exp); err != nil {
		t.Fatal(err)
	}
	// A second experiment, never previewed: no counts.
	if _, err := api.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "no-policy",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent}, Annotations: map[string]string{"ticket": "OPS-7"}}}); err != nil {
		t.Fatal(err)
	}

	// Traffic: each round, each host decides for the users (by default
	// four: eve's decision is the one the experiment disagrees on); the
	// counts at control are complete once they sum to every decision made.
	decided := uint64(0)
	decide := func(rounds int, users ...string) {
		t.Helper()
		if len(users) == 0 {
			users = []string{"alice", "bob", "eve", "mallory"}
		}
		for _, s := range subs {
			for range rounds {
				for _, u := range users {
					if _, err := s.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": u}}); err != nil {
						t.Fatal(err)
					}
					decided++
				}
			}
		}
		wait.For(t, fmt.Sprintf("control's counts of deny-eve to sum to the %d decisions made", decided), func() bool {
			counts, err := api.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
			if err != nil {
				return false
			}
			sum := uint64(0)
			for _, tc := range counts.GetTotals() {
				n, _ := preview.Decisions(tc)
				sum += n
			}
			return sum == decided
		})
	}
	startPreview := func() {
		t.Helper()
		if _, err := api.StartPreviewPolicyExperiment(ctx, &lehrpb.StartPreviewPolicyExperimentRequest{Name: exp.GetName()}); err != nil {
			t.Fatal(err)
		}
		for i, s := range subs {
			wait.For(t, fmt.Sprintf("host %d previewing %s", i, exp.GetName()), func() bool { return slices.Contains(s.Previewing(), exp.GetName()) })
		}
	}
	startPreview()
	decide(10)
	// Changed (so suspended, with a new etag) and previewed again.
	op, err = api.UpdatePolicyExperiment(ctx, &lehrpb.UpdatePolicyExperimentRequest{
		PolicyExperiment: &lehrpb.PolicyExperiment{Name: exp.GetName(), Annotations: map[string]string{"reviewed": "yes"}},
		LegacyUpdateMask: []string{"annotations"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.GetResponse().UnmarshalTo(exp); err != nil {
		t.Fatal(err)
	}
	// Every host stops previewing the old etag before the new one starts,
	// so that every decision made from here on is counted.
	for i, s := range subs {
		wait.For(t, fmt.Sprintf("host %d to stop previewing %s", i, exp.GetName()), func() bool { return !slices.Contains(s.Previewing(), exp.GetName()) })
	}
	// The history so far is the first etag's; a pass that read the
	// experiment ACTIVE before the update may still add to it.
	history := func() []*lehrpb.PolicyExperimentSample {
		t.Helper()
		counts, err := api.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		return counts.GetHistory()
	}
	n0 := len(history())
	startPreview()
	// A sample of the new etag: its baseline was taken before any of its
	// decisions.
	wait.For(t, "a sample of the new etag", func() bool { return len(history()) > n0+1 })
	n0 = len(history())
	since := uint64(0)
	ends := []int{n0} // where each batch's samples end
	for i, users := range [][]string{
		{"alice", "bob", "eve", "mallory"}, // 1 of 4 disagrees
		{"alice", "eve"},                   // 1 of 2
		{"alice", "bob", "mallory"},        // none
		{"alice", "bob", "eve", "mallory", "alice", "bob", "alice", "bob"}, // 1 of 8
	} {
		before := decided
		decide(4, users...)
		since += decided - before
		wait.For(t, fmt.Sprintf("batch %d sampled", i+1), func() bool {
			sum := uint64(0)
			for _, s := range history()[n0:] {
				sum += s.GetEvaluations()
			}
			return sum == since
		})
		ends = append(ends, len(history()))
	}

	// The namespace page links the experiments.
	b.open(base+"/console/namespaces/shop/fw", "experiments-namespace")
	b.run("follow the experiments' link", chromedp.Click(chromedp.CSS("a#experiments")), chromedp.WaitVisible(chromedp.CSS("#history")))
	// Every decision was in a sample before the page was read, so the
	// samples since add none: the page's dots are the API's samples with
	// decisions, now.
	hist := history()
	b.noErrors("the experiments page")
	b.shot("experiments")
	b.shotOf("experiments-deny-eve", "article#experiment-deny-eve")
	b.readmeShot("console-experiments", "main", "article#experiment-deny-eve")

	exp, err = api.GetPolicyExperiment(ctx, &lehrpb.GetPolicyExperimentRequest{Name: exp.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	counts, err := api.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	art := "article#experiment-deny-eve "
	if got, want := b.text(art+`[data-field="state"]`), preview.StateLine(exp)+" — decision log lines begin "+exp.GetPreviewMetadata().GetLogPrefix(); got != want {
		t.Errorf("deny-eve's state on the page %q; from the API, in lehr's words, %q", got, want)
	}
	rows := append(slices.Clone(counts.GetZones()), counts.GetTotals()...)
	etags := map[string]bool{}
	for _, r := range rows {
		etags[r.GetExperimentEtag()] = true
	}
	if len(counts.GetZones()) != 4 || len(counts.GetTotals()) != 2 || len(etags) != 2 {
		t.Fatalf("GetPolicyExperimentCounts: %v; want two zones and the fleet, each for the experiment's two etags", counts)
	}
	if got := b.count(art + "table.counts tbody tr"); got != len(rows) {
		t.Errorf("the page shows %d rows of counts; GetPolicyExperimentCounts has %d", got, len(rows))
	}
	for _, r := range rows {
		zone := r.GetZone()
		if zone == "" {
			zone = "(all)"
		}
		tr := fmt.Sprintf(`%stable.counts tr[data-zone=%q][data-live=%q][data-exp=%q] `, art, zone, r.GetLiveEtag(), r.GetExperimentEtag())
		total, _ := preview.Decisions(r)
		for field, want := range map[string]string{
			"decisions":   strconv.FormatUint(total, 10),
			"allow-allow": strconv.FormatUint(r.GetAllowAllow(), 10), "deny-deny": strconv.FormatUint(r.GetDenyDeny(), 10),
			"allow-deny": strconv.FormatUint(r.GetAllowDeny(), 10), "deny-allow": strconv.FormatUint(r.GetDenyAllow(), 10),
			"errors": strconv.FormatUint(r.GetExperimentErrors(), 10), "share": preview.DisagreeShare(r),
			"live-deny": strconv.FormatUint(r.GetDenyDeny()+r.GetDenyAllow(), 10), "exp-deny": strconv.FormatUint(r.GetDenyDeny()+r.GetAllowDeny(), 10),
		} {
			if got := b.text(tr + `[data-field="` + field + `"]`); got != want {
				t.Errorf("%s %s→%s: %s %q on the page, %q from GetPolicyExperimentCounts", zone, r.GetLiveEtag(), r.GetExperimentEtag(), field, got, want)
			}
		}
		if total == 0 || r.GetAllowDeny() == 0 {
			t.Errorf("%s %s→%s: %v; want decisions, eve's among them", zone, r.GetLiveEtag(), r.GetExperimentEtag(), r)
		}
	}
	if got := b.text(`article#experiment-no-policy [data-field="nocounts"]`); got != preview.NoCounts {
		t.Errorf("no-policy's counts: %q, want %q", got, preview.NoCounts)
	}
	if got := b.text("#history"); !strings.Contains(got, "samples its counts once a minute") || strings.Contains(got, "no history") {
		t.Errorf("the page does not say what is kept over time: %q", got)
	}
	// The plot: a dot per sample with decisions, at the API's figures,
	// higher for a higher share; and the batches' shares are there.
	plot := art + `svg[data-field="history-plot"]`
	dots := get(b, "the history plot's dots", chromedp.Nodes(chromedp.CSSAll(plot+" circle.point"), chromedp.AtLeast(0)))
	var want []*lehrpb.PolicyExperimentSample
	for _, s := range hist {
		if s.GetEvaluations() > 0 {
			want = append(want, s)
		}
	}
	if len(dots) != len(want) {
		t.Fatalf("the history plot has %d dots; the API's history has %d samples with decisions", len(dots), len(want))
	}
	for i, s := range want {
		d := dots[i]
		to := s.GetSampleTime().AsTime().UTC().Format(time.RFC3339Nano)
		if g := [4]string{d.AttributeValue("data-to"), d.AttributeValue("data-evaluations"), d.AttributeValue("data-disagreements"), d.AttributeValue("data-etag")}; g != [4]string{
			to, strconv.FormatUint(s.GetEvaluations(), 10), strconv.FormatUint(s.GetDisagreements(), 10), s.GetExperimentEtag()} {
			t.Errorf("dot %d: to, evaluations, disagreements, etag %q; the API's sample %v", i, g, s)
		}
		if stale := strings.Contains(d.AttributeValue("class"), "stale"); stale != (s.GetExperimentEtag() != exp.GetEtag()) {
			t.Errorf("dot %d of etag %s: drawn as of an earlier etag %v; the experiment's etag is %s", i, s.GetExperimentEtag(), stale, exp.GetEtag())
		}
		for j := range i {
			si, sj := float64(s.GetDisagreements())/float64(s.GetEvaluations()), float64(want[j].GetDisagreements())/float64(want[j].GetEvaluations())
			yi, _ := strconv.ParseFloat(d.AttributeValue("cy"), 64)
			yj, _ := strconv.ParseFloat(dots[j].AttributeValue("cy"), 64)
			if (si > sj) != (yi < yj) && si != sj {
				t.Errorf("dots %d and %d: shares %.3f and %.3f drawn at y %v and %v", i, j, si, sj, yi, yj)
			}
		}
	}
	// Each batch's samples add up to its decisions, at its share.
	for i, want := range []float64{1.0 / 4, 1.0 / 2, 0, 1.0 / 8} {
		var ev, dis uint64
		for _, s := range hist[ends[i]:ends[i+1]] {
			ev += s.GetEvaluations()
			dis += s.GetDisagreements()
		}
		if ev == 0 || float64(dis)/float64(ev) != want {
			t.Errorf("batch %d: its samples count %d of %d decisions disagreeing; want a share of %g", i+1, dis, ev, want)
		}
	}
	if got := b.text(`article#experiment-no-policy [data-field="nohistory"]`); !strings.HasPrefix(got, "No samples yet") {
		t.Errorf("no-policy's history: %q; want no samples yet", got)
	}

	// The gate: refused below the counts, passing above them, in the
	// words of the API's own refusal.
	total, _ := preview.Decisions(preview.EtagTotals(counts.GetEtag(), counts))
	for i, tc := range []struct {
		query url.Values
		pass  bool
	}{
		{url.Values{"min_evaluations": {strconv.FormatUint(total+1, 10)}}, false},
		{url.Values{"max_disagreement": {"0.1"}}, false},
		{url.Values{"min_evaluations": {strconv.FormatUint(total, 10)}, "max_disagreement": {"0.3"}}, true},
	} {
		u := base + "/console/experiments/shop/fw?" + tc.query.Encode()
		b.open(u, fmt.Sprintf("experiments-gate-%d", i))
		req := &lehrpb.CommitPolicyExperimentRequest{}
		req.MinEvaluations, _ = strconv.ParseUint(tc.query.Get("min_evaluations"), 10, 64)
		req.MaxDisagreement, _ = strconv.ParseFloat(tc.query.Get("max_disagreement"), 64)
		pass, line := preview.GateLine(req, counts.GetEtag(), counts)
		want := "Refused now: " + line
		if pass {
			want = "Passes now: " + line
		}
		if got := b.text(art + `[data-field="gate"]`); got != want || pass != tc.pass {
			t.Errorf("%s: the gate on the page\n%s\nfrom the counts (pass %v, want %v)\n%s", tc.query.Encode(), got, pass, tc.pass, want)
		}
		// The API agrees: a refused commit is refused with these words.
		if !tc.pass {
			req.Name, req.Etag = exp.GetName(), exp.GetEtag()
			_, err := api.CommitPolicyExperiment(ctx, req)
			if err == nil || !strings.Contains(err.Error(), line) {
				t.Errorf("%s: CommitPolicyExperiment: %v; want the page's words %q", tc.query.Encode(), err, line)
			}
		}
	}

	// The page's JSON holds GetPolicyExperimentCounts' answer.
	var doc struct {
		Experiments []struct {
			Experiment json.RawMessage `json:"experiment"`
			Counts     json.RawMessage `json:"counts"`
			Gate       struct {
				Pass bool `json:"pass"`
			} `json:"gate"`
			Series []struct {
				To            string   `json:"to"`
				Samples       int      `json:"samples"`
				Evaluations   uint64   `json:"evaluations"`
				Disagreements uint64   `json:"disagreements"`
				Share         *float64 `json:"share"`
				Etag          string   `json:"experimentEtag"`
			} `json:"disagreementOverTime"`
		} `json:"experiments"`
		HistoryNote string `json:"historyNote"`
	}
	// Samples keep coming: the JSON is read between two answers of the
	// API that agree.
	wait.For(t, "the page's JSON read between two equal answers of GetPolicyExperimentCounts", func() bool {
		c1, err := api.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		doc.Experiments = nil
		getJSON(t, httpClient(t, nil), base+"/console/experiments/shop/fw?format=json", &doc)
		c2, err := api.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		counts = c1
		return proto.Equal(c1, c2)
	})
	if len(doc.Experiments) != 2 || doc.HistoryNote == "" {
		t.Fatalf("the page's JSON: %+v; want two experiments and what the figures are", doc)
	}
	for _, je := range doc.Experiments {
		e := new(lehrpb.PolicyExperiment)
		if err := protojson.Unmarshal(je.Experiment, e); err != nil {
			t.Fatal(err)
		}
		if e.GetName() != exp.GetName() {
			continue
		}
		got := new(lehrpb.PolicyExperimentCounts)
		if err := protojson.Unmarshal(je.Counts, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, counts) {
			t.Errorf("the page's JSON counts differ from GetPolicyExperimentCounts':\n%v\n%v", got, counts)
		}
		if len(je.Series) != len(counts.GetHistory()) {
			t.Errorf("the page's JSON has %d points over time; the API's history %d samples", len(je.Series), len(counts.GetHistory()))
		}
		for i, p := range je.Series {
			if i >= len(counts.GetHistory()) {
				break
			}
			s := counts.GetHistory()[i]
			if p.To != s.GetSampleTime().AsTime().UTC().Format(time.RFC3339Nano) || p.Samples != 1 || p.Evaluations != s.GetEvaluations() || p.Disagreements != s.GetDisagreements() || p.Etag != s.GetExperimentEtag() ||
				(p.Share == nil) != (s.GetEvaluations() == 0) || p.Share != nil && *p.Share != float64(s.GetDisagreements())/float64(s.GetEvaluations()) {
				t.Errorf("the page's JSON point %d %+v; the API's sample %v", i, p, s)
			}
		}
		if !je.Gate.Pass {
			t.Errorf("the page's JSON: the gate without bounds refuses")
		}
	}
}
