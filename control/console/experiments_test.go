package console_test

import (
	"strings"
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

// The experiments page without hosts: it answers HTML and JSON, shows an
// experiment's stored text as the characters it holds, refuses bounds
// that are not a count or a share, and answers a namespace that is not a
// policy with control's own refusal.
func TestExperimentsPage(t *testing.T) {
	srv, base := startPlain(t)
	seed(t, srv.Client, nil)
	cl := httpClient(t, nil)
	ctx := testCtx(t)
	parent := "domains/shop/policies/fw"
	if _, err := srv.Client.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Message: "no rules"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "x",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent}, Annotations: map[string]string{"note": hostile}}}); err != nil {
		t.Fatal(err)
	}
	p := base + "/console/experiments/shop/fw"
	resp, body := fetch(t, cl, "GET", p, nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %.300s", p, resp.StatusCode, body)
	}
	if strings.Contains(body, "<script") || strings.ContainsAny(body, "\x1b\u202e") {
		t.Errorf("GET %s: the hostile annotation reached the page raw", p)
	}
	if want := `note=&lt;script&gt;alert(1)&lt;/script&gt;\x1b[31mred\u202eevil\nsecond line`; !strings.Contains(body, want) {
		t.Errorf("GET %s: want the annotation shown escaped, %q; page:\n%s", p, want, excerpt(body, "alert"))
	}
	for _, want := range []string{"never previewed", "no decisions counted yet", "No samples yet", "samples its counts once a minute"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: no %q on the page", p, want)
		}
	}
	var doc struct {
		Page        string           `json:"page"`
		Experiments []map[string]any `json:"experiments"`
	}
	getJSON(t, cl, p+"?format=json", &doc)
	if doc.Page != "experiments" || len(doc.Experiments) != 1 {
		t.Errorf("GET %s as JSON: %+v; want the one experiment", p, doc)
	}
	// Links: the namespace page and the domain page.
	for _, from := range []string{"/console/namespaces/shop/fw", "/console/domains/shop"} {
		if _, body := fetch(t, cl, "GET", base+from, nil); !strings.Contains(body, `href="/console/experiments/shop/fw"`) {
			t.Errorf("GET %s: no link to the experiments page", from)
		}
	}
	if _, body := fetch(t, cl, "GET", base+"/console/namespaces/shop/web", nil); strings.Contains(body, "/console/experiments/") {
		t.Errorf("a config namespace's page links policy experiments")
	}
	for _, q := range []string{"min_evaluations=-1", "min_evaluations=many", "max_disagreement=2", "max_disagreement=NaN"} {
		if resp, body := fetch(t, cl, "GET", p+"?"+q, nil); resp.StatusCode != 400 || !strings.Contains(body, "INVALID_ARGUMENT") {
			t.Errorf("GET %s?%s: %d %.300s; want 400", p, q, resp.StatusCode, body)
		}
	}
	if resp, body := fetch(t, cl, "GET", base+"/console/experiments/shop/web?format=json", nil); resp.StatusCode/100 != 4 || !strings.Contains(body, `"error"`) {
		t.Errorf("the experiments of a config namespace: %d %.300s; want control's refusal", resp.StatusCode, body)
	}
}

// Under mutual TLS the page is its caller's: bob, a publisher of shop,
// reads the experiments and is told that control would refuse him the
// commit, and why; alice, an operator, is not.
func TestExperimentsCommitRefused(t *testing.T) {
	m := startMTLS(t, "admin")
	seed(t, m.srv.Client, &lehrpb.Acl{Admins: []string{"admin"}, Operators: []string{"alice"}, Publishers: []string{"bob"}})
	ctx := testCtx(t)
	parent := "domains/shop/policies/fw"
	if _, err := m.srv.Client.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Message: "no rules"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.srv.Client.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: parent, PolicyExperimentId: "x",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: parent}}}); err != nil {
		t.Fatal(err)
	}
	for user, refused := range map[string]bool{"bob": true, "alice": false} {
		resp, body := fetch(t, httpClient(t, m.clientTLS(t, user)), "GET", m.base+"/console/experiments/shop/fw", nil)
		if resp.StatusCode != 200 || !strings.Contains(body, "Experiment x") {
			t.Fatalf("%s: GET the experiments page: %d %.300s", user, resp.StatusCode, body)
		}
		got := strings.Contains(body, "You may not commit it") && strings.Contains(body, "acl.operators")
		if got != refused {
			t.Errorf("%s: told control would refuse the commit naming acl.operators: %v, want %v; page:\n%s", user, got, refused, excerpt(body, "Commit with"))
		}
	}
}
