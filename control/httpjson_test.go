package control_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// httpCall is one call of the HTTP/JSON API: its answer's body, and the
// error it answered (nil for a 2xx), read back from its google.rpc.Status
// as the producer client reads a gRPC status.
func httpCall(t *testing.T, cl *http.Client, method, url, body string, header ...string) ([]byte, *apierror.Error) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 == 2 {
		return b, nil
	}
	var st spb.Status
	if err := protojson.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s %s: HTTP %d %s: not a google.rpc.Status: %v", method, url, resp.StatusCode, b, err)
	}
	e := apierror.FromError(status.FromProto(&st).Err())
	if want := httpStatus[e.Code.String()]; resp.StatusCode != want {
		t.Errorf("%s %s: HTTP %d for %v; want %d (AIP-193)", method, url, resp.StatusCode, e.Code, want)
	}
	return b, e
}

// httpStatus maps the codes these tests meet to their HTTP statuses.
var httpStatus = map[string]int{"PermissionDenied": 403, "InvalidArgument": 400, "NotFound": 404, "Unauthenticated": 401}

// sameError compares what gRPC and HTTP answered one call.
func sameError(t *testing.T, what string, grpcErr error, httpErr *apierror.Error) {
	t.Helper()
	ge := apierror.FromError(grpcErr)
	if diff := cmp.Diff(ge, httpErr, cmpopts.IgnoreFields(apierror.Error{}, "Cause")); diff != "" {
		t.Errorf("%s: gRPC and HTTP answer differently (-gRPC +HTTP):\n%s", what, diff)
	}
}

// The HTTP/JSON API decides who may do what exactly as gRPC does, from the
// client certificate its own TLS listener verified (the TLS configuration
// of gRPC): for each caller of TestRolesFromClientCertificates and
// TestDomainACL and each call, the answer over HTTP is the answer over
// gRPC — the same refusal, code, reason and message naming the same
// identity — and what a caller changes over HTTP is recorded as made by
// its certificate's user, whatever its headers or body assert.
func TestHTTPCallersAreTheirCertificates(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	admin := issue(t, ca, caKey, "admin", false)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"admin"}},
		mtlsDial(pool, admin))
	base := "https://" + srv.Control.HTTPAddr().String()
	if _, err := srv.Client.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay",
		Acl: &lehrpb.Acl{Admins: []string{"admin"}, Publishers: []string{"pat"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	type caller struct {
		grpc lehrpb.ControlClient
		http *http.Client
	}
	newCaller := func(cn string, id *url.URL) caller {
		cert := issueID(t, ca, caKey, cn, false, id)
		tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return caller{lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, cert))), &http.Client{Transport: tr}}
	}
	user := func(name string) *url.URL { return tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI() }
	callers := map[string]caller{
		"pat (publisher)":   newCaller("pat", user("pat")),
		"eve (no ACL list)": newCaller("eve", user("eve")),
		"host":              newCaller("web-1", tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: "zone-a", Name: "web-1"}.URI()),
		"distributor-a":     newCaller("dist-a", tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "dist-a"}.URI()),
		"distributor-b":     newCaller("dist-b", tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-b", Name: "dist-b"}.URI()),
		// A CommonName says nothing: without a Lehr identity, nobody.
		"no identity (CN admin)": newCaller("admin", nil),
	}
	type call struct {
		grpc                          func(cl lehrpb.ControlClient) error
		method, path, body, hdr, hval string
	}
	calls := map[string]call{
		"publish": {func(cl lehrpb.ControlClient) error {
			_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
			return err
		}, "POST", "/v1/namespaces/pay/x:publish", `{"properties": [{"key": "k", "value": "dg=="}]}`, "", ""},
		"publish as admin (request field)": {func(cl lehrpb.ControlClient) error {
			_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Properties: []*lehrpb.Property{prop("k", "", "v")}, Author: "admin"})
			return err
		}, "POST", "/v1/namespaces/pay/x:publish", `{"properties": [{"key": "k", "value": "dg=="}], "author": "admin"}`, "", ""},
		"publish as admin (lehr-author)": {func(cl lehrpb.ControlClient) error {
			_, err := cl.Publish(metadata.AppendToOutgoingContext(testCtx(t), "lehr-author", "admin"),
				&lehrpb.PublishRequest{Namespace: "pay/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
			return err
		}, "POST", "/v1/namespaces/pay/x:publish", `{"properties": [{"key": "k", "value": "dg=="}]}`, "Lehr-Author", "admin"},
		"update domain": {func(cl lehrpb.ControlClient) error {
			_, err := cl.UpdateDomain(testCtx(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Description: "d"},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}})
			return err
		}, "PATCH", "/v1/domains/pay?updateMask=description", `{"description": "d"}`, "", ""},
		"create zone": {func(cl lehrpb.ControlClient) error {
			_, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"})
			return err
		}, "POST", "/v1/zones", `{"name": "zone-a"}`, "", ""},
		"list domains": {func(cl lehrpb.ControlClient) error {
			_, err := cl.ListDomains(testCtx(t), &lehrpb.ListDomainsRequest{})
			return err
		}, "GET", "/v1/domains", "", "", ""},
		"goals of zone-a": {func(cl lehrpb.ControlClient) error {
			_, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: "zone-a"})
			return err
		}, "GET", "/v1/zones/zone-a/goals", "", "", ""},
		"domain pay": {func(cl lehrpb.ControlClient) error {
			_, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "pay"})
			return err
		}, "GET", "/v1/domains/pay", "", "", ""},
	}
	served := 0
	for who, c := range callers {
		for what, k := range calls {
			t.Run(who+"/"+what, func(t *testing.T) {
				grpcErr := k.grpc(c.grpc)
				_, httpErr := httpCall(t, c.http, k.method, base+k.path, k.body, k.hdr, k.hval)
				sameError(t, what, grpcErr, httpErr)
				if grpcErr == nil {
					served++
				}
			})
		}
	}
	if served == 0 || served == len(callers)*len(calls) {
		t.Errorf("%d of %d calls served: the table tests nothing", served, len(callers)*len(calls))
	}

	// What pat publishes over HTTP is pat's, whatever else says so.
	body, err := httpCall(t, callers["pat (publisher)"].http, "POST", base+"/v1/namespaces/pay/x:publish",
		`{"properties": [{"key": "k", "value": "aHR0cA=="}], "message": "over HTTP"}`,
		"X-Forwarded-For", "10.0.0.1", "Authorization", "Bearer spiffe://lehr/user/admin")
	if err != nil {
		t.Fatalf("pat's publish over HTTP: %v", err)
	}
	var resp lehrpb.PublishResponse
	if err := protojson.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.GetVersion().GetAuthor(); got != "pat" {
		t.Errorf("author of pat's publish over HTTP: %q; want pat", got)
	}
	audit, aerr := srv.Client.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{Domain: "pay", PageSize: 1000})
	if aerr != nil {
		t.Fatal(aerr)
	}
	var found bool
	for _, r := range audit.GetRecords() {
		if r.GetMessage() == "over HTTP" {
			found = true
			if r.GetAuthor() != "pat" || !strings.HasPrefix(r.GetTransportIdentity(), "cert:serial=") {
				t.Errorf("audit record of pat's publish over HTTP: %v; want author pat by certificate", r)
			}
		}
	}
	if !found {
		t.Errorf("no audit record of pat's publish over HTTP")
	}

	// Without a client certificate HTTPS is refused in the handshake, as
	// gRPC is.
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}}}
	resp2, herr := anon.Get(base + "/v1/domains")
	if herr == nil {
		resp2.Body.Close()
		t.Errorf("a client without a certificate was answered HTTP %d; want the handshake refused", resp2.StatusCode)
	}
	// A certificate of another CA too.
	otherCA, otherKey := newCA(t)
	stranger := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool,
		Certificates: []tls.Certificate{issue(t, otherCA, otherKey, "admin", false)}}}}
	if resp3, serr := stranger.Get(base + "/v1/domains"); serr == nil {
		resp3.Body.Close()
		t.Errorf("a client with a certificate of another CA was answered HTTP %d; want the handshake refused", resp3.StatusCode)
	}
}

// Outside dev mode a caller control cannot identify may only read, over
// HTTP as over gRPC, whatever its headers claim: HTTP refuses it the
// same, with the same message, and no header — Lehr-Author, Authorization,
// X-Forwarded-For, a certificate in a header — makes it anyone.
func TestHTTPUnidentifiedCallersOnlyRead(t *testing.T) {
	dir := t.TempDir()
	c, err := control.New(control.Options{DataDir: dir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", MetricsListen: "off", NoSync: true,
		FleetAdmins: []string{"admin"}, Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	t.Cleanup(func() { c.Close(); <-done })
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("control stopped: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("control not ready")
	}
	conn, err := grpc.NewClient(c.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := lehrpb.NewControlClient(conn)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	base := "http://" + c.HTTPAddr().String()

	spoof := []string{"Lehr-Author", "admin", "Authorization", "Bearer admin", "X-Forwarded-For", "unix:root", "X-Client-Cert", "spiffe://lehr/user/admin",
		"Grpc-Metadata-Lehr-Author", "admin"}
	_, grpcErr := cl.CreateDomain(metadata.AppendToOutgoingContext(testCtx(t), "lehr-author", "admin"), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}})
	_, httpErr := httpCall(t, hc, "POST", base+"/v1/domains", `{"name": "pay"}`, spoof...)
	if httpErr == nil || httpErr.Code.String() != "PermissionDenied" {
		t.Fatalf("an unidentified HTTP caller creating a domain: %v; want PERMISSION_DENIED", httpErr)
	}
	sameError(t, "create domain", grpcErr, httpErr)
	_, grpcErr = cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Author: "admin", Properties: []*lehrpb.Property{prop("k", "", "v")}})
	_, httpErr = httpCall(t, hc, "POST", base+"/v1/namespaces/pay/x:publish", `{"author": "admin", "properties": [{"key": "k", "value": "dg=="}]}`, spoof...)
	sameError(t, "publish", grpcErr, httpErr)
	if httpErr == nil {
		t.Errorf("an unidentified HTTP caller published")
	}
	// Reads are open to it, as over gRPC.
	if _, err := httpCall(t, hc, "GET", base+"/v1/domains", ""); err != nil {
		t.Errorf("an unidentified HTTP caller listing domains: %v", err)
	}
	if _, err := httpCall(t, hc, "GET", base+"/v1/controlStatus", ""); err != nil {
		t.Errorf("an unidentified HTTP caller reading control's status: %v", err)
	}
	// Nothing was created.
	if d, err := cl.ListDomains(testCtx(t), &lehrpb.ListDomainsRequest{}); err != nil || len(d.GetDomains()) != 0 {
		t.Errorf("domains after refusals: %v, %v; want none", d, err)
	}
}

// Plaintext HTTP is refused off loopback, as plaintext gRPC is.
func TestHTTPPlaintextOnLoopbackOnly(t *testing.T) {
	_, err := control.New(control.Options{HTTPListen: "0.0.0.0:7402"})
	if err == nil || !strings.Contains(err.Error(), "HTTPListen") {
		t.Errorf("plaintext HTTP on 0.0.0.0: %v; want ErrPlaintextNotLoopback naming HTTPListen", err)
	}
	if _, err := control.New(control.Options{HTTPListen: "0.0.0.0:7402", TLS: &tls.Config{ClientCAs: x509.NewCertPool()}, Listen: "0.0.0.0:7400"}); err != nil {
		t.Errorf("HTTPS on 0.0.0.0: %v", err)
	}
}
