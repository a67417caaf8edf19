package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// Every page answers HTML with the console's security headers, and JSON
// (?format=json, or Accept: application/json) holding the API's answers
// it was built from — the same figures a caller reads from the API.
func TestPagesAnswerHTMLAndJSON(t *testing.T) {
	srv, base := startPlain(t)
	seed(t, srv.Client, nil)
	cl := httpClient(t, nil)
	ctx := testCtx(t)

	for _, p := range []string{"/console/", "/console/domains/shop", "/console/namespaces/shop/web", "/console/namespaces/shop/web/diff?from=1&to=2",
		"/console/rollouts/", "/console/rollouts/shop/web/2", "/console/rollouts/shop/web/2/pause", "/console/canary/", "/console/propagation", "/console/audit?domain=shop"} {
		resp, body := fetch(t, cl, "GET", base+p, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %d %s: %.300s", p, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		for h, want := range map[string]string{"X-Frame-Options": "DENY", "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-store",
			"X-Content-Type-Options": "nosniff"} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("GET %s: %s %q, want %q", p, h, got, want)
			}
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("GET %s: Content-Security-Policy %q: want no scripts at all and no framing", p, csp)
		}
		sep := "?"
		if strings.Contains(p, "?") {
			sep = "&"
		}
		resp, body = fetch(t, cl, "GET", base+p+sep+"format=json", nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(body, "{") {
			t.Errorf("GET %s?format=json: %d %s: %.300s", p, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if resp, _ := fetch(t, cl, "GET", base+"/", nil); resp.StatusCode != 302 || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /: %d to %q, want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}

	// The figures are the API's.
	ns, err := srv.Client.GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: "shop/web"})
	if err != nil {
		t.Fatal(err)
	}
	var nsPage struct {
		Namespace struct {
			LatestVersion string `json:"latestVersion"`
		} `json:"namespace"`
		Versions []struct {
			Seq     string `json:"seq"`
			Message string `json:"message"`
		} `json:"versions"`
		Zones []struct {
			Zone string `json:"zone"`
			Goal struct {
				Version string `json:"version"`
			} `json:"goal"`
		} `json:"zones"`
	}
	getJSON(t, cl, base+"/console/namespaces/shop/web", &nsPage)
	if nsPage.Namespace.LatestVersion != "2" || ns.GetLatestVersion() != 2 {
		t.Errorf("namespace page's latest version %q, the API's %d; want 2", nsPage.Namespace.LatestVersion, ns.GetLatestVersion())
	}
	if len(nsPage.Versions) != 2 || nsPage.Versions[0].Seq != "2" || nsPage.Versions[0].Message != hostile {
		t.Errorf("namespace page's versions %+v, want 2 then 1, version 2 with its message exactly (JSON escapes it)", nsPage.Versions)
	}
	if len(nsPage.Zones) != 2 || nsPage.Zones[0].Zone != "zone-a" || nsPage.Zones[0].Goal.Version == "" {
		t.Errorf("namespace page's zones %+v, want zone-a and zone-b with their goals", nsPage.Zones)
	}

	ro, err := srv.Client.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	var rPage struct {
		Rollout struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"rollout"`
		Reason  string   `json:"reason"`
		Actions []string `json:"actions"`
		Stages  []struct{ Name, Phase string }
	}
	getJSON(t, cl, base+"/console/rollouts/shop/web/2?format=json", &rPage)
	if rPage.Rollout.ID != ro.GetId() || rPage.Rollout.State != ro.GetState().String() || !strings.HasPrefix(rPage.Reason, ro.GetReason()) {
		t.Errorf("rollout page %+v; the API's rollout %s %s %q", rPage, ro.GetId(), ro.GetState(), ro.GetReason())
	}
	if !strings.Contains(rPage.Reason, " left") {
		t.Errorf("rollout page's reason %q: want the bake's time left", rPage.Reason)
	}
	if strings.Join(rPage.Actions, ",") != "pause,promote,abort" {
		t.Errorf("actions offered in dev mode %v, want pause, promote, abort (a running rollout)", rPage.Actions)
	}
	if len(rPage.Stages) != 1 || rPage.Stages[0].Phase != "current" {
		t.Errorf("stages %+v, want one, current", rPage.Stages)
	}

	var audit struct {
		Records []struct{ Method, Code string } `json:"records"`
	}
	getJSON(t, cl, base+"/console/audit?domain=shop&method=Publish&result=ok", &audit)
	if len(audit.Records) != 2 || audit.Records[0].Method != "Publish" || audit.Records[0].Code != "OK" {
		t.Errorf("audit page filtered on Publish, ok: %+v; want the two publishes", audit.Records)
	}
	getJSON(t, cl, base+"/console/audit?domain=shop&result=refused", &audit)
	if len(audit.Records) != 0 {
		t.Errorf("audit page filtered on refused: %+v; want none", audit.Records)
	}

	// Propagation: no distributor reports, so nothing is measured — every
	// group is there, empty, and the page says so.
	var prop struct {
		Status struct {
			Groups []struct {
				SizeClass, Subscribers string
				Count                  int
			} `json:"groups"`
			Updates []any `json:"updates"`
		} `json:"status"`
	}
	getJSON(t, cl, base+"/console/propagation", &prop)
	if len(prop.Status.Groups) != 8 || len(prop.Status.Updates) != 0 {
		t.Errorf("propagation page's groups %+v and updates %v; want 3 size classes and 5 buckets, and no update", prop.Status.Groups, prop.Status.Updates)
	}
	for _, g := range prop.Status.Groups {
		if g.Count != 0 {
			t.Errorf("propagation page's group %+v counts an update; none was measured", g)
		}
	}
	if _, body := fetch(t, cl, "GET", base+"/console/propagation", nil); !strings.Contains(body, "No update measured yet") {
		t.Errorf("propagation page without measurements: %.500s; want it to say none was measured", body)
	}

	// An error is the API's, with its HTTP status, in either form.
	if resp, body := fetch(t, cl, "GET", base+"/console/namespaces/shop/nope", nil); resp.StatusCode != 404 || !strings.Contains(body, "not found") {
		t.Errorf("a namespace that does not exist: %d %.300s; want 404 saying so", resp.StatusCode, body)
	}
	if resp, body := fetch(t, cl, "GET", base+"/console/namespaces/shop/nope?format=json", nil); resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("a namespace that does not exist, JSON: %d %.300s; want 404 with an error", resp.StatusCode, body)
	}
}

// Stored text shows as the characters it holds: markup escaped, control
// characters and bidirectional overrides as visible escapes, on every
// page that shows it.
func TestStoredTextIsEscaped(t *testing.T) {
	srv, base := startPlain(t)
	seed(t, srv.Client, nil)
	cl := httpClient(t, nil)
	for _, p := range []string{"/console/namespaces/shop/web", "/console/namespaces/shop/web/diff?from=1&to=2", "/console/audit?domain=shop"} {
		resp, body := fetch(t, cl, "GET", base+p, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %.300s", p, resp.StatusCode, body)
		}
		if strings.Contains(body, "<script") || strings.ContainsAny(body, "\x1b\u202e") {
			t.Errorf("GET %s: the hostile message reached the page raw", p)
		}
		for _, want := range []string{`&lt;script&gt;alert(1)&lt;/script&gt;\x1b[31mred\u202eevil\nsecond line`} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s: want the message shown escaped, %q; page:\n%s", p, want, excerpt(body, "alert"))
			}
		}
	}
}

func excerpt(body, near string) string {
	i := strings.Index(body, near)
	if i < 0 {
		return "(not found)"
	}
	return body[max(0, i-200):min(len(body), i+200)]
}

var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// Forms post only from the console's own pages, with the token of the
// confirmation page the caller saw; nothing changes on a GET; other sites
// may link to a page but not embed or fetch it; and the API keeps
// refusing browsers.
func TestCSRF(t *testing.T) {
	srv, base := startPlain(t)
	seed(t, srv.Client, nil)
	cl := httpClient(t, nil)
	ctx := testCtx(t)
	page := base + "/console/rollouts/shop/web/2/pause"
	resp, body := fetch(t, cl, "GET", page, nil, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
	m := tokenRE.FindStringSubmatch(body)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("confirmation page: %d, token %v: %.500s", resp.StatusCode, m, body)
	}
	tok := m[1]
	state := func() lehrpb.RolloutState {
		r, err := srv.Client.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetState()
	}
	origin := base
	for _, tc := range []struct {
		name   string
		url    string
		form   url.Values
		header []string
		status int
	}{
		{"another site's form", page, url.Values{"token": {tok}}, []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, 403},
		{"another origin without Sec-Fetch-Site", page, url.Values{"token": {tok}}, []string{"Origin", "https://evil.example"}, 403},
		{"no token", page, url.Values{}, []string{"Sec-Fetch-Site", "same-origin", "Origin", origin}, 403},
		{"a forged token", page, url.Values{"token": {tok[:len(tok)-4] + "AAAA"}}, []string{"Sec-Fetch-Site", "same-origin", "Origin", origin}, 403},
		{"the token of another action", base + "/console/rollouts/shop/web/2/abort", url.Values{"token": {tok}}, []string{"Sec-Fetch-Site", "same-origin", "Origin", origin}, 403},
		{"the token of another rollout", base + "/console/rollouts/shop/web/1/pause", url.Values{"token": {tok}}, []string{"Sec-Fetch-Site", "same-origin", "Origin", origin}, 403},
	} {
		resp, body := fetch(t, cl, "POST", tc.url, tc.form, tc.header...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d: %.300s", tc.name, resp.StatusCode, tc.status, body)
		}
		if s := state(); s != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
			t.Fatalf("%s: the rollout is %v; want it still running", tc.name, s)
		}
	}
	// Not a form: refused before anything is read.
	req := func(header ...string) int {
		resp, _ := fetch(t, cl, "POST", page+"?token="+url.QueryEscape(tok), nil, header...)
		return resp.StatusCode
	}
	if got := req("Content-Type", "application/json", "Sec-Fetch-Site", "same-origin"); got != 415 {
		t.Errorf("a JSON post: %d, want 415", got)
	}

	// Other sites: a link opens a page; a subresource, a frame or a fetch
	// of one is refused.
	for _, tc := range []struct {
		mode, dest string
		status     int
	}{{"navigate", "document", 200}, {"no-cors", "script", 403}, {"navigate", "iframe", 403}, {"cors", "empty", 403}} {
		resp, _ := fetch(t, cl, "GET", base+"/console/rollouts/shop/web/2", nil, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", tc.mode, "Sec-Fetch-Dest", tc.dest)
		if resp.StatusCode != tc.status {
			t.Errorf("a cross-site %s request (dest %s): %d, want %d", tc.mode, tc.dest, resp.StatusCode, tc.status)
		}
	}
	// A name in Host on the plaintext listener (DNS rebinding): refused.
	if resp, _ := fetch(t, cl, "GET", base+"/console/", nil, "Host", "evil.example"); resp.StatusCode != 403 {
		t.Errorf("a console page addressed to evil.example: %d, want 403", resp.StatusCode)
	}
	// The API still refuses what a browser sends for a page.
	if resp, _ := fetch(t, cl, "GET", base+"/v1/domains", nil, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != 403 {
		t.Errorf("GET /v1/domains from a page of the console's origin: %d, want 403 (the API is for programs)", resp.StatusCode)
	}

	// The real thing: the confirmation page's form, posted from its page.
	resp, body = fetch(t, cl, "POST", page, url.Values{"token": {tok}, "message": {"hold on"}}, "Sec-Fetch-Site", "same-origin", "Origin", origin)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/console/rollouts/shop/web/2?asked=pause" {
		t.Fatalf("the confirmed pause: %d to %q: %.300s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	// Control queues the command for the strategist, which acts on it
	// within a second.
	wait.For(t, "the rollout to pause", func() bool { return state() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED })
	recs, err := srv.Client.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{Domain: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	last := recs.GetRecords()[len(recs.GetRecords())-1]
	if last.GetMethod() != "UpdateRollout" || last.GetMessage() != "hold on" || last.GetCode() != "OK" {
		t.Errorf("the audit log's last record %v; want the pause with its message", last)
	}
}

// The rollout page says what holds a rollout under its policy's
// monitoring check: its reason names the alert, and the facts list every
// alert firing with since when (issue 35).
func TestRolloutPageShowsAlertHold(t *testing.T) {
	ctx := testCtx(t)
	alertsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"status":"success","data":{"alerts":[{"labels":{"alertname":"HighErrorRate","service":"web","zone":"zone-b"},"state":"firing","activeAt":"2030-01-01T21:40:03Z"}]}}`)
	}))
	t.Cleanup(alertsSrv.Close)
	srv := controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 50 * time.Millisecond,
		Alerts: alerts.Options{URL: alertsSrv.URL, Interval: 50 * time.Millisecond}})
	base := "http://" + srv.Control.HTTPAddr().String()
	cl := srv.Client
	zonesAndShop(t, cl)
	p := bakingPolicy()
	p.Monitoring = &lehrpb.MonitoringCheck{Alerts: []*lehrpb.AlertSelector{{Alert: "HighErrorRate", Matchers: []string{`service="web"`}, ZoneLabel: "zone"}}}
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "shop", Policy: p}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/web", Properties: []*lehrpb.Property{{Key: "k", Value: []byte{byte('0' + i)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, "version 2's rollout to be held", func() bool {
		r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && r.GetAlertHold() != nil
	})
	var rPage struct {
		Reason string   `json:"reason"`
		Held   []string `json:"held"`
	}
	hc := httpClient(t, nil)
	getJSON(t, hc, base+"/console/rollouts/shop/web/2?format=json", &rPage)
	alert := `HighErrorRate{service="web",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC`
	if !strings.Contains(rPage.Reason, `stage "all zones" waits: alert `+alert+" in zone-b") {
		t.Errorf("rollout page's reason %q: want it to name the alert, since when and where", rPage.Reason)
	}
	if len(rPage.Held) != 1 || rPage.Held[0] != alert {
		t.Errorf("rollout page's held %q; want [%q]", rPage.Held, alert)
	}
	_, body := fetch(t, hc, "GET", base+"/console/rollouts/shop/web/2", nil)
	if !strings.Contains(body, `id="held"`) || !strings.Contains(body, "HighErrorRate{service=&#34;web&#34;,zone=&#34;zone-b&#34;} firing since") {
		t.Errorf("rollout page lacks the held alert:\n%s", body)
	}
}

// The rollout page of a namespace that rolls out after another says so:
// what it requires, linked, and the reason naming where it waits.
func TestRolloutPageShowsRequires(t *testing.T) {
	ctx := testCtx(t)
	srv := controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	base := "http://" + srv.Control.HTTPAddr().String()
	cl := srv.Client
	zonesAndShop(t, cl)
	publish := func(ns string, v byte) {
		t.Helper()
		if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: ns, Properties: []*lehrpb.Property{{Key: "k", Value: []byte{v}}}}); err != nil {
			t.Fatal(err)
		}
	}
	publish("shop/flags", '1')
	publish("shop/web", '1')
	// flags reaches zone-a and bakes there for an hour; web, after it,
	// waits for it in zone-b.
	slow := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Name: "zone-a", Bake: durationpb.New(time.Hour),
		Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-a"}}}}}}
	after := bakingPolicy()
	after.After = []string{"shop/flags"}
	for scope, p := range map[string]*lehrpb.RolloutPolicy{"shop/flags": slow, "shop/web": after} {
		if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: scope, Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	publish("shop/flags", '2')
	publish("shop/web", '2')
	wait.For(t, "shop/web's rollout to wait for shop/flags", func() bool {
		r, err := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && strings.Contains(r.GetReason(), "waits for shop/flags to reach zone-b")
	})
	var rPage struct {
		Reason  string `json:"reason"`
		Rollout struct {
			Requires []struct {
				Namespace string `json:"namespace"`
				Version   string `json:"version"`
			} `json:"requires"`
		} `json:"rollout"`
	}
	hc := httpClient(t, nil)
	getJSON(t, hc, base+"/console/rollouts/shop/web/2?format=json", &rPage)
	if !strings.Contains(rPage.Reason, `stage "all zones" waits for shop/flags to reach zone-b with version 2's content or newer`) {
		t.Errorf("rollout page's reason %q: want it to say where it waits for shop/flags", rPage.Reason)
	}
	if r := rPage.Rollout.Requires; len(r) != 1 || r[0].Namespace != "shop/flags" || r[0].Version != "2" {
		t.Errorf("rollout page's requires %+v; want shop/flags at 2", r)
	}
	_, body := fetch(t, hc, "GET", base+"/console/rollouts/shop/web/2", nil)
	if !strings.Contains(body, `<dt>Rolls out after</dt><dd class="requires"><a href="/console/namespaces/shop/flags">shop/flags</a>: each stage waits until its goal holds version 2's content`) {
		t.Errorf("rollout page lacks what it requires:\n%s", body)
	}
}

// zonesAndShop registers zones zone-a and zone-b and creates domain shop.
func zonesAndShop(t *testing.T, cl lehrpb.ControlClient) {
	t.Helper()
	ctx := testCtx(t)
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
}
