package console_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// hostile is a commit message with markup, a terminal escape, a
// bidirectional override and a newline: what a page must show as
// characters, never as markup or controls.
const hostile = "<script>alert(1)</script>\x1b[31mred\u202eevil\nsecond line"

// bakingPolicy is one stage, every zone, baking an hour: a rollout under
// it stays in flight (running, baking) for the test.
func bakingPolicy() *lehrpb.RolloutPolicy {
	return &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Name: "all zones", Bake: durationpb.New(time.Hour),
		Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}}}}
}

// seed makes domain shop with namespace shop/web at version 2 (the
// hostile message) under bakingPolicy, zones zone-a and zone-b, and waits
// until version 2's rollout bakes. cl acts as a fleet admin and the
// domain's admin; author is what it asserts (plaintext dev mode), or "".
func seed(t *testing.T, cl lehrpb.ControlClient, acl *lehrpb.Acl) *lehrpb.Rollout {
	t.Helper()
	ctx := testCtx(t)
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "shop", Description: "the web shop", Acl: acl}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "shop", Policy: bakingPolicy()}); err != nil {
		t.Fatal(err)
	}
	for i, msg := range []string{"first", hostile} {
		if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/web", Message: msg,
			Properties: []*lehrpb.Property{{Key: "greeting", Value: []byte("hello " + string(rune('0'+i)))}}}); err != nil {
			t.Fatal(err)
		}
	}
	var r *lehrpb.Rollout
	wait.For(t, "version 2's rollout to bake", func() bool {
		var err error
		r, err = cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && r.GetStageAppliedTime() != nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING
	})
	return r
}

// startPlain starts control in dev mode with the HTTP listener (the
// console) and the strategist, plaintext on loopback as lehr dev.
func startPlain(t *testing.T) (*controltest.Server, string) {
	t.Helper()
	srv := controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	return srv, "http://" + srv.Control.HTTPAddr().String()
}

// mtls is a control with mutual TLS on gRPC and HTTP, and its CA.
type mtls struct {
	srv  *controltest.Server
	base string
	ca   *pki.CA
	dir  string
}

// startMTLS starts control with mutual TLS, admin a fleet admin, and
// dials its gRPC client as admin.
func startMTLS(t *testing.T, admin string) *mtls {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "console-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca", pki.CACertFile)
	crt, key, err := ca.IssueURIFiles(dir, "control", pki.Server, []string{"127.0.0.1"}, tlsconfig.Identity{Role: tlsconfig.RoleControl, Name: "c1"}.URI(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := tlsconfig.Server(crt, key, caFile)
	if err != nil {
		t.Fatal(err)
	}
	m := &mtls{ca: ca, dir: dir}
	adminTLS := m.clientTLS(t, admin)
	m.srv = controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{admin},
		Rollouts: true, RolloutInterval: 50 * time.Millisecond},
		grpc.WithTransportCredentials(credentials.NewTLS(adminTLS)))
	m.base = "https://" + m.srv.Control.HTTPAddr().String()
	return m
}

// clientTLS is the TLS configuration of user name's client certificate.
func (m *mtls) clientTLS(t *testing.T, name string) *tls.Config {
	t.Helper()
	crt, key, err := m.ca.IssueURIFiles(m.dir, name, pki.Client, nil, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconfig.Client(crt, key, filepath.Join(m.dir, "ca", pki.CACertFile), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// httpClient is a client that does not follow redirects (a test looks
// at them), with cfg's TLS if any.
func httpClient(t *testing.T, cfg *tls.Config) *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// fetch makes a request and returns its answer and body.
func fetch(t *testing.T, cl *http.Client, method, u string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(testCtx(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// getJSON fetches a page's JSON form into v.
func getJSON(t *testing.T, cl *http.Client, u string, v any) {
	t.Helper()
	resp, body := fetch(t, cl, "GET", u, nil, "Accept", "application/json")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s as JSON: %d %s: %.300s", u, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s as JSON: %v: %.300s", u, err, body)
	}
}
