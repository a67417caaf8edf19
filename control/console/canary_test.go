package console_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/console"
	"lehr.dev/lehr/proto/lehrpb"
)

// evalClient answers the canary evaluation calls with ev; every other
// call panics (the page makes none).
type evalClient struct {
	lehrpb.ControlClient
	ev *lehrpb.CanaryEvaluation
}

func (c evalClient) GetCanaryEvaluation(_ context.Context, req *lehrpb.GetCanaryEvaluationRequest, _ ...grpc.CallOption) (*lehrpb.CanaryEvaluation, error) {
	if req.GetId() != c.ev.GetId() {
		return nil, context.Canceled
	}
	return proto.CloneOf(c.ev), nil
}

func (c evalClient) ListCanaryEvaluations(context.Context, *lehrpb.ListCanaryEvaluationsRequest, ...grpc.CallOption) (*lehrpb.ListCanaryEvaluationsResponse, error) {
	return &lehrpb.ListCanaryEvaluationsResponse{Evaluations: []*lehrpb.CanaryEvaluation{proto.CloneOf(c.ev)}}, nil
}

// failedEvaluation is an evaluation that failed at its second look, its
// stored texts hostile: a check's name and explanation, a host's name.
func failedEvaluation() *lehrpb.CanaryEvaluation {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	canary, control := make([]float64, 20), make([]float64, 20)
	for i := range canary {
		canary[i], control[i] = 0.01, 0.011
		if i >= 10 {
			canary[i] = 0.2
		}
	}
	canary[3] = math.NaN() // an interval without data: a gap
	return &lehrpb.CanaryEvaluation{
		Id: "shop/web@3/stage-0", Namespace: "shop/web", Version: 3, RolloutId: "shop/web@3",
		Trials:     []*lehrpb.CanaryTrial{{Zone: "zone-a", CanaryHosts: []string{"host-1"}, ControlHosts: []string{"host-2", hostile}}},
		ChangeTime: timestamppb.New(now), Bake: durationpb.New(80 * time.Second),
		State:      lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE,
		CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now.Add(time.Minute)),
		Result: &lehrpb.CanaryResult{
			Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, Reason: `check "error ratio" failed at look 2 of 4`,
			Look: 2, Looks: 4, AfterIntervals: 4, IntervalSeconds: 10, CanaryHosts: 1, ControlHosts: 2,
			LookEnds: []int32{2, 4, 6, 8}, SeriesStartTime: timestamppb.New(now.Add(-100 * time.Second)), SeriesChangeIndex: 10, SeriesStep: 1,
			Checks: []*lehrpb.CanaryCheckResult{{
				Name: "error ratio", Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, Explanation: "it rose " + hostile,
				Test: "level shift", CanaryBefore: 0.01, CanaryAfter: 0.2, ControlBefore: 0.011, ControlAfter: 0.011, CanaryHosts: 1, ControlHosts: 2,
				P: 1e-9, Threshold: 6e-4, CanarySeries: canary[:14], ControlSeries: control[:14],
				LearnedEvaluations: 42, LearnedUsed: true, LearnedTypical: 0.003, NoiseRatio: 1.1,
				LookHistory: []*lehrpb.CanaryLook{
					{Look: 1, AfterIntervals: 2, Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, P: 0.002, Threshold: 1e-6},
					{Look: 2, AfterIntervals: 4, Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, P: 1e-9, Threshold: 6e-4}},
			}, {Name: hostile, Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_PASS, Explanation: "no host had any crash"}},
			HostChecks: []*lehrpb.CanaryHostCheck{{Name: "error ratio", Hosts: 1, Failed: 1, FailedHosts: []string{"zone-a/host-1"}, Explanation: hostile}},
		},
	}
}

// An evaluation's page: its JSON is GetCanaryEvaluation's answer; its
// HTML shows the verdict, every check's explanation with stored text
// escaped, a plot per check with series (the change and the looks
// marked), and the host-level checks; the list links to it.
func TestEvaluationPage(t *testing.T) {
	ev := failedEvaluation()
	c, err := console.New(console.Options{Client: evalClient{ev: ev}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(u string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", u, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	page := "/console/canary/shop/web@3/stage-0"

	var doc struct {
		Page       string          `json:"page"`
		Evaluation json.RawMessage `json:"evaluation"`
		Look       string          `json:"look"`
		HostChecks []string        `json:"hostChecks"`
	}
	if err := json.Unmarshal([]byte(get(page+"?format=json")), &doc); err != nil {
		t.Fatal(err)
	}
	got := &lehrpb.CanaryEvaluation{}
	if err := protojson.Unmarshal(doc.Evaluation, got); err != nil {
		t.Fatal(err)
	}
	// Compared as bytes: the series' NaN is unequal to itself.
	gb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
	if doc.Page != "evaluation" || string(gb) != string(wb) {
		t.Errorf("the page's JSON evaluation %v; GetCanaryEvaluation answers %v", got, ev)
	}
	if !strings.HasPrefix(doc.Look, "verdict FAIL at look 2 of 4") || len(doc.HostChecks) != 1 {
		t.Errorf("the page's JSON look %q, host checks %q", doc.Look, doc.HostChecks)
	}

	html := get(page)
	for _, bad := range []string{"<script>", "\x1b", "\u202e"} {
		if strings.Contains(html, bad) {
			t.Errorf("the evaluation page holds %q raw", bad)
		}
	}
	for _, want := range []string{
		`&lt;script&gt;alert(1)&lt;/script&gt;\x1b[31mred\u202eevil`, // the check's name, explanation, host check, trial
		`id="verdict">FAIL<`,
		`<a id="rollout" href="/console/rollouts/shop/web/3">`,
		`class="change"`,
		`look 2 FAIL<title>look 2 FAIL: p 1e-09 &lt; 0.0006 FAIL</title>`,
		`look 1<title>look 1: p 0.002 ≥ 1e-06 NONE</title>`,
		`class="look look-ahead"`,
		`zone-a/host-1`,
		`data-field="learned">history: learned from 42 kept evaluations: normally ±0.3 %; control spread 1.1× the learned<`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the evaluation page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg "); n != 1 {
		t.Errorf("%d plots, want one: the first check's (the second has no series)", n)
	}
	// The canary series has a gap at interval 3: two runs, one line each.
	if n := len(regexp.MustCompile(`class="series-canary" points=`).FindAllString(html, -1)); n != 2 {
		t.Errorf("%d canary polylines, want 2: the gap splits the series", n)
	}

	list := get("/console/canary/")
	if !strings.Contains(list, `href="/console/canary/shop/web@3/stage-0"`) || !strings.Contains(list, `verdict-fail`) {
		t.Errorf("the evaluations list does not link the failed evaluation: %.2000s", list)
	}
}
