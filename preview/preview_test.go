package preview

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestEtags(t *testing.T) {
	if got := LiveEtag(42); got != "v42" {
		t.Errorf("LiveEtag(42) = %q, want v42", got)
	}
	rule := &lehrpb.Property{Key: "r1", Value: []byte(`{"effect":"deny","condition":"true"}`)}
	e := &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Rules: []*lehrpb.Property{rule}}, Annotations: map[string]string{"a": "1"}}
	same := &lehrpb.PolicyExperiment{Name: "other", Author: "x", Policy: &lehrpb.Policy{Name: "n", Rules: []*lehrpb.Property{rule}}, Annotations: map[string]string{"a": "1"}}
	other := &lehrpb.PolicyExperiment{Policy: e.GetPolicy(), Annotations: map[string]string{"a": "2"}}
	if ExperimentEtag(e) != ExperimentEtag(same) || len(ExperimentEtag(e)) != 16 {
		t.Errorf("etag depends on what an experiment configures only: %q vs %q", ExperimentEtag(e), ExperimentEtag(same))
	}
	if ExperimentEtag(e) == ExperimentEtag(other) {
		t.Error("different annotations, same etag")
	}
}

// TestContentAndParse: the preview namespace holds the ACTIVE
// experiments, each parsed back by a host into its rules.
func TestContentAndParse(t *testing.T) {
	rule := &lehrpb.Property{Key: "r1", Value: []byte(`{"effect":"deny","condition":"request.path == '/admin'"}`), ContentType: "application/json"}
	exps := map[string]*lehrpb.PolicyExperiment{
		"on":  {Name: "domains/d/policies/p/experiments/on", Etag: "e1", Policy: &lehrpb.Policy{Rules: []*lehrpb.Property{rule}}, PreviewMetadata: &lehrpb.PolicyPreviewMetadata{State: lehrpb.PolicyPreviewMetadata_ACTIVE, LogPrefix: LogPrefix}},
		"off": {Name: "domains/d/policies/p/experiments/off", Etag: "e2", PreviewMetadata: &lehrpb.PolicyPreviewMetadata{State: lehrpb.PolicyPreviewMetadata_SUSPENDED}},
	}
	snap, err := Content(exps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Len() != 1 || snap.Props()[0].Key != "on" {
		t.Fatalf("content: %v; want one property, the ACTIVE experiment's id", snap.Props())
	}
	env, err := policy.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	exp, set, err := Parse(env, snap.Props()[0])
	if err != nil {
		t.Fatal(err)
	}
	if exp.Name != exps["on"].GetName() || exp.Etag != "e1" || exp.LogPrefix != LogPrefix || set.Len() != 1 {
		t.Errorf("parsed %+v with %d rules", exp, set.Len())
	}
	if _, _, err := Parse(env, content.Property{Key: "bad", Value: []byte("{")}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("Parse of broken JSON: %v, want an error naming the experiment", err)
	}
}

// TestTally: sums by key, sorted output of copies, the key added to least
// recently dropped beyond the bound.
func TestTally(t *testing.T) {
	tl := NewTally(2)
	k := func(exp, live string) Key {
		return Key{Namespace: "d/p", Experiment: exp, LiveEtag: live, ExperimentEtag: "e"}
	}
	c := &lehrpb.PreviewCounts{AllowAllow: 1, AllowDeny: 2}
	tl.Add(k("b", "v1"), c)
	tl.Add(k("a", "v1"), c)
	tl.Add(k("b", "v1"), c) // b is now the most recent
	tl.Add(k("c", "v1"), c) // drops a
	if tl.Len() != 2 || tl.Dropped() != 1 {
		t.Fatalf("len %d, dropped %d; want 2 and 1", tl.Len(), tl.Dropped())
	}
	nps := tl.Namespaces()
	if len(nps) != 1 || len(nps[0].GetCounts()) != 2 {
		t.Fatalf("namespaces: %v", nps)
	}
	b, cc := nps[0].GetCounts()[0], nps[0].GetCounts()[1]
	if b.GetExperiment() != "b" || cc.GetExperiment() != "c" || b.GetCounts().GetAllowAllow() != 2 || b.GetCounts().GetAllowDeny() != 4 {
		t.Errorf("counts %v; want b (twice) then c, sorted", nps[0].GetCounts())
	}
	b.GetCounts().AllowAllow = 100
	if tl.Namespaces()[0].GetCounts()[0].GetCounts().GetAllowAllow() != 2 {
		t.Error("Namespaces handed out the tally's own counts")
	}
	if total, dis := Decisions(cc.GetCounts()); total != 3 || dis != 2 {
		t.Errorf("Decisions = %d, %d; want 3, 2", total, dis)
	}
}

func TestGateAndExpectedChange(t *testing.T) {
	counts := &lehrpb.PolicyExperimentCounts{Totals: []*lehrpb.PreviewCounts{
		{ExperimentEtag: "e", LiveEtag: "v1", AllowAllow: 80, AllowDeny: 15, DenyAllow: 5},
		{ExperimentEtag: "old", LiveEtag: "v1", AllowDeny: 1000},
	}}
	deny, dis, n := ExpectedChange("e", counts)
	if n != 100 || fmt.Sprintf("%.2f %.2f", deny, dis) != "0.10 0.20" {
		t.Errorf("ExpectedChange = %v, %v, %d; want 0.10, 0.20 over 100 (only etag e's counts)", deny, dis, n)
	}
	for _, c := range []struct {
		name  string
		req   *lehrpb.CommitPolicyExperimentRequest
		field string // "" for no refusal
	}{
		{"no gate", &lehrpb.CommitPolicyExperimentRequest{}, ""},
		{"enough evaluations", &lehrpb.CommitPolicyExperimentRequest{MinEvaluations: 100}, ""},
		{"too few evaluations", &lehrpb.CommitPolicyExperimentRequest{MinEvaluations: 101}, "min_evaluations"},
		{"disagreement within", &lehrpb.CommitPolicyExperimentRequest{MaxDisagreement: 0.2}, ""},
		{"disagreement beyond", &lehrpb.CommitPolicyExperimentRequest{MaxDisagreement: 0.19}, "max_disagreement"},
	} {
		err := Gate(c.req, "e", counts)
		var ae *apierror.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want none", c.name, err)
		case c.field != "" && (!errors.As(err, &ae) || ae.Field != c.field || ae.Reason != apierror.ReasonPreviewGate):
			t.Errorf("%s: %v, want PREVIEW_GATE on %s", c.name, err, c.field)
		}
	}
	if err := Gate(&lehrpb.CommitPolicyExperimentRequest{MaxDisagreement: 0.5}, "unseen", counts); err == nil {
		t.Error("a disagreement bound with no evaluation yet passed")
	}
}

func TestLogLineFormat(t *testing.T) {
	l := LogLine{Time: time.Unix(0, 0).UTC(), Policy: "d/p", Live: Result{Effect: policy.EffectAllow}, Input: map[string]any{"f": func() {}}}
	out := string(l.Format(""))
	if !strings.HasPrefix(out, LogPrefix+" {") || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("line %q: want the default prefix, a space, JSON and a newline", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(out, LogPrefix+" ")), &got); err != nil {
		t.Fatal(err)
	}
	if in, _ := got["input"].(map[string]any); in["unencodable"] == nil {
		t.Errorf("an input JSON cannot encode: %v, want it replaced by the reason", got["input"])
	}
	if out := string(l.Format("Mine")); !strings.HasPrefix(out, "Mine {") {
		t.Errorf("own prefix: %q", out)
	}
}

// TestComparison: while a committed version rolls out, the preview
// namespace carries the version it replaced beside the experiments, under
// a key no experiment id can take; hosts at the committed version
// evaluate it, hosts still at the replaced one have nothing to compare.
func TestComparison(t *testing.T) {
	rule := content.Property{Key: "eu", Value: []byte(`{"effect":"deny","condition":"request.region == 'eu'"}`), ContentType: "application/json"}
	exps := map[string]*lehrpb.PolicyExperiment{
		"on": {Name: "domains/d/policies/p/experiments/on", Etag: "e1", PreviewMetadata: &lehrpb.PolicyPreviewMetadata{State: lehrpb.PolicyPreviewMetadata_ACTIVE}},
	}
	snap, err := Content(exps, &Comparison{Policy: "domains/d/policies/p", Committed: 3, Replaced: 2, Rules: []content.Property{rule}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Len() != 2 || snap.Props()[0].Key != ComparisonKey || snap.Props()[1].Key != "on" {
		t.Fatalf("content: %v; want the comparison and the ACTIVE experiment", snap.Props())
	}
	if err := names.Experiment(ComparisonKey); err == nil {
		t.Errorf("%q is a valid experiment id: an experiment could take the comparison's key", ComparisonKey)
	}
	if err := names.Key(ComparisonKey); err != nil {
		t.Errorf("%q is not a valid property key: %v", ComparisonKey, err)
	}
	env, err := policy.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	cmp, set, err := Parse(env, snap.Props()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Compares() || cmp.Committed != 3 || cmp.Etag != "v2" || cmp.Name != "domains/d/policies/p" || set.Len() != 1 {
		t.Errorf("parsed comparison %+v with %d rules; want committed 3, etag v2, the policy's name, one rule", cmp, set.Len())
	}
	for live, want := range map[uint64]bool{3: true, 2: false, 4: false} {
		if got := cmp.AppliesTo(live); got != want {
			t.Errorf("comparison applies at live version %d: %v, want %v", live, got, want)
		}
	}
	exp, _, err := Parse(env, snap.Props()[1])
	if err != nil {
		t.Fatal(err)
	}
	if exp.Compares() || !exp.AppliesTo(2) || !exp.AppliesTo(3) {
		t.Errorf("experiment %+v: want one that is not the comparison, evaluated at every live version", exp)
	}
	if _, err := Content(nil, &Comparison{Replaced: 1, Committed: 2, Rules: []content.Property{{Key: "bad", Value: []byte("{")}}}); err == nil {
		t.Error("a comparison with unparsable rules built")
	}
}

// TestExpectedChangeOfAFlip: an experiment that flips a quarter of the
// decisions each way changes the deny share by nothing, and half of the
// decisions (issue 30, item 4).
func TestExpectedChangeOfAFlip(t *testing.T) {
	counts := &lehrpb.PolicyExperimentCounts{Totals: []*lehrpb.PreviewCounts{
		{ExperimentEtag: "e", LiveEtag: "v1", AllowAllow: 250, DenyDeny: 250, AllowDeny: 250, DenyAllow: 250},
	}}
	deny, dis, n := ExpectedChange("e", counts)
	if deny != 0 || dis != 0.5 || n != 1000 {
		t.Errorf("ExpectedChange = %v, %v, %d; want 0, 0.5, 1000", deny, dis, n)
	}
}
