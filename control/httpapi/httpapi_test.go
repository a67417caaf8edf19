package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// fakeControl answers GetDomain with who called, as its gRPC peer and
// metadata say, and Publish after release is closed (at once if nil),
// saying on entered (if not nil) that it has a publish.
type fakeControl struct {
	lehrpb.UnimplementedControlServer
	release, entered chan struct{}
}

func (f *fakeControl) GetDomain(ctx context.Context, req *lehrpb.GetDomainRequest) (*lehrpb.Domain, error) {
	p, _ := peer.FromContext(ctx)
	who := fmt.Sprintf("%s from %s", p.AuthInfo.AuthType(), p.Addr)
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		switch id, has, err := tlsconfig.PeerRole(ti.State); {
		case err != nil:
			who += " with a bad identity: " + err.Error()
		case has:
			who += " as " + id.String()
		default:
			who += " as nobody"
		}
	}
	grpc.SetHeader(ctx, metadata.Pairs("lehr-store-id", "s1", "other", "x"))
	md, _ := metadata.FromIncomingContext(ctx)
	var keys []string
	for k := range md {
		if !strings.HasPrefix(k, ":") && k != "content-type" && k != "user-agent" {
			keys = append(keys, k+"="+strings.Join(md[k], ","))
		}
	}
	slices.Sort(keys)
	return &lehrpb.Domain{Name: req.GetName(), Description: who, CreatedBy: strings.Join(keys, " ")}, nil
}

func (f *fakeControl) Publish(ctx context.Context, req *lehrpb.PublishRequest) (*lehrpb.PublishResponse, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.release != nil {
		<-f.release
	}
	return &lehrpb.PublishResponse{Version: &lehrpb.VersionInfo{Namespace: req.GetNamespace(), Seq: 1}}, nil
}

// serve starts a gRPC server with fake and the gateway in front of it, as
// control wires them, and returns the gateway's base URL.
func serve(t *testing.T, fake *fakeControl, opts Options) string {
	_, base := serveAPI(t, fake, opts)
	return base
}

func serveAPI(t *testing.T, fake *fakeControl, opts Options) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := New(l.Addr(), opts)
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	gs := grpc.NewServer(grpc.Creds(Credentials{creds}))
	lehrpb.RegisterControlServer(gs, fake)
	grpcDone, httpDone := make(chan error, 1), make(chan error, 1)
	go func() { grpcDone <- gs.Serve(api.GRPCListener()) }()
	go func() { httpDone <- api.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := api.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		gs.GracefulStop()
		if err := <-httpDone; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := <-grpcDone; err != nil {
			t.Errorf("gRPC Serve: %v", err)
		}
	})
	if opts.TLS != nil {
		return api, "https://" + l.Addr().String()
	}
	return api, "http://" + l.Addr().String()
}

// closesConns checks that api closes the gRPC connection of every HTTP
// connection once it is closed.
func closesConns(t *testing.T, api *Server, closeIdle func()) {
	t.Helper()
	api.mu.Lock()
	n := len(api.conns)
	api.mu.Unlock()
	if n == 0 {
		t.Errorf("no HTTP connection is open")
	}
	closeIdle()
	wait.For(t, "every gRPC connection closed with its HTTP connection", func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.conns) == 0
	})
}

func do(t *testing.T, cl *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func get(t *testing.T, cl *http.Client, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, cl, req)
}

// domain decodes a Domain answer.
func domain(t *testing.T, body string) (description, metadata string) {
	t.Helper()
	var d struct{ Description, CreatedBy string }
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return d.Description, d.CreatedBy
}

// A plaintext HTTP caller reaches gRPC as a plaintext caller from its own
// address, with none of the headers it sent as metadata but Lehr-Author:
// no header says who it is.
func TestPlaintextCallerIsItsConnection(t *testing.T) {
	api, base := serveAPI(t, &fakeControl{}, Options{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	var local string
	cl := &http.Client{Transport: tr}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			local = c.LocalAddr().String()
		}
		return c, err
	}
	code, body := get(t, cl, base+"/v1/domains/acme",
		"Lehr-Author", "mallory",
		"Authorization", "Bearer spiffe://lehr/user/admin",
		"Grpc-Metadata-X-Lehr-Identity", "admin",
		"X-Forwarded-For", "10.0.0.1",
		"X-Forwarded-Host", "control.example",
		"X-Client-Cert", "spiffe://lehr/user/admin")
	if code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, body)
	}
	who, md := domain(t, body)
	if want := "insecure from " + local; who != want {
		t.Errorf("caller %q; want %q", who, want)
	}
	host := strings.TrimPrefix(base, "http://")
	if want := "lehr-author=mallory x-forwarded-for=127.0.0.1 x-forwarded-host=" + host; md != want {
		t.Errorf("metadata %q; want %q", md, want)
	}
	closesConns(t, api, tr.CloseIdleConnections)
}

// Over TLS, each HTTP connection reaches gRPC as the client certificate
// it presented, verified by the same TLS configuration as gRPC's; a
// connection without one is a caller without one; and the store's id
// header comes back as Lehr-Store-Id.
func TestTLSCallerIsItsCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA(dir, "test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair := func(name string, kind pki.Kind, uri string) tls.Certificate {
		var certPEM, keyPEM []byte
		if uri == "" {
			certPEM, keyPEM, err = ca.Issue(name, kind, []string{"127.0.0.1"}, time.Hour)
		} else {
			u, _ := url.Parse(uri)
			certPEM, keyPEM, err = ca.IssueURI(name, kind, nil, u, time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair("control", pki.Server, "")},
		ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	api, base := serveAPI(t, &fakeControl{}, Options{TLS: server})
	var transports []*http.Transport
	client := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		transports = append(transports, tr)
		return &http.Client{Transport: tr}
	}
	alice, bob, none := client(pair("alice", pki.Client, "spiffe://lehr/user/alice")), client(pair("bob", pki.Client, "spiffe://lehr/user/bob")), client()
	for range 2 { // the second time on the same connections
		for _, tc := range []struct {
			cl   *http.Client
			want string
		}{
			{alice, "tls from 127.0.0.1:* as spiffe://lehr/user/alice"},
			{bob, "tls from 127.0.0.1:* as spiffe://lehr/user/bob"},
			// No client certificate: no verified chain, no identity.
			{none, "tls from 127.0.0.1:* as nobody"},
		} {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/domains/acme", nil)
			resp, err := tc.cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			who, _ := domain(t, string(b))
			prefix, suffix, _ := strings.Cut(tc.want, "*")
			if !strings.HasPrefix(who, prefix) || !strings.HasSuffix(who, suffix) {
				t.Errorf("caller %q; want %q", who, tc.want)
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("served over %s; want HTTP/2", resp.Proto)
			}
			if got := resp.Header.Get("Lehr-Store-Id"); got != "s1" || resp.Header.Get("Grpc-Metadata-Other") != "" || resp.Header.Get("Other") != "" {
				t.Errorf("headers %v; want Lehr-Store-Id: s1 and no other metadata", resp.Header)
			}
		}
	}
	closesConns(t, api, func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	})
}

// rpcStatus decodes a google.rpc.Status answer.
func rpcStatus(t *testing.T, body string) (code int, message, reason string) {
	t.Helper()
	var st struct {
		Code    int
		Message string
		Details []struct {
			Type   string `json:"@type"`
			Reason string
		}
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	for _, d := range st.Details {
		if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
			reason = d.Reason
		}
	}
	return st.Code, st.Message, reason
}

// What HTTP adds: browsers refused, JSON bodies only, names refused as the
// plaintext listener's host, bodies bounded in size and in number — each
// refusal a google.rpc.Status with its HTTP status.
func TestGuards(t *testing.T) {
	base := serve(t, &fakeControl{}, Options{MaxBodyBytes: 1 << 10})
	cl := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(cl.CloseIdleConnections)
	publish := base + "/v1/namespaces/acme/web:publish"
	post := func(url, contentType string, body io.Reader, length int64, header ...string) (int, string) {
		t.Helper()
		return postTo(t, cl, url, contentType, body, length, header...)
	}
	json := "application/json"
	big := `{"message": "` + strings.Repeat("x", 2<<10) + `"}`
	for _, tc := range []struct {
		name       string
		call       func() (int, string)
		wantStatus int
		wantCode   int // google.rpc.Code
		wantReason string
		wantIn     string
	}{
		{"page's request", func() (int, string) { return get(t, cl, base+"/v1/domains/acme", "Origin", "https://evil.example") },
			403, 7, "PERMISSION_DENIED", "not web pages"},
		{"page's same-site request", func() (int, string) { return get(t, cl, base+"/v1/domains/acme", "Sec-Fetch-Site", "same-site") },
			403, 7, "PERMISSION_DENIED", "not web pages"},
		{"page's POST", func() (int, string) { return post(publish, json, strings.NewReader(small), -1, "Origin", "null") },
			403, 7, "PERMISSION_DENIED", "not web pages"},
		{"a name as host (DNS rebinding)", func() (int, string) {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/domains/acme", nil)
			req.Host = "rebound.example:7402"
			return do(t, cl, req)
		}, 403, 7, "PERMISSION_DENIED", `rebound.example:7402`},
		{"a form", func() (int, string) { return post(publish, "text/plain", strings.NewReader(small), -1) },
			415, 3, "INVALID_ARGUMENT", "Content-Type: application/json"},
		{"no content type", func() (int, string) { return post(publish, "", strings.NewReader(small), -1) },
			415, 3, "INVALID_ARGUMENT", "not JSON"},
		{"declared too large", func() (int, string) { return post(publish, json, strings.NewReader(big), int64(len(big))) },
			413, 8, "REQUEST_TOO_LARGE", "1.0 KiB"},
		{"chunked too large", func() (int, string) { return post(publish, json, io.MultiReader(strings.NewReader(big)), -1) },
			413, 8, "REQUEST_TOO_LARGE", "1.0 KiB"},
		{"an unknown field", func() (int, string) { return post(publish, json, strings.NewReader(`{"propertys": []}`), -1) },
			400, 3, "", `unknown field`},
		{"an unknown path", func() (int, string) { return get(t, cl, base+"/v1/nope") }, 404, 5, "", "Not Found"},
		{"a publish", func() (int, string) { return post(publish, json+"; charset=utf-8", strings.NewReader(small), -1) },
			200, 0, "", `"seq":"1"`},
		{"a mapped method control does not implement", func() (int, string) { return get(t, cl, base+"/v1/zones") },
			501, 12, "", "not implemented"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := tc.call()
			if status != tc.wantStatus {
				t.Errorf("HTTP %d %s; want %d", status, body, tc.wantStatus)
			}
			if !strings.Contains(strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(tc.wantIn, " ", "")) {
				t.Errorf("answer %s; want it to say %q", body, tc.wantIn)
			}
			if tc.wantCode == 0 {
				return
			}
			code, _, reason := rpcStatus(t, body)
			if code != tc.wantCode || reason != tc.wantReason {
				t.Errorf("status code %d, reason %q; want %d, %q", code, reason, tc.wantCode, tc.wantReason)
			}
		})
	}
}

const small = `{"properties": [{"key": "k", "value": "dg=="}]}`

func postTo(t *testing.T, cl *http.Client, url, contentType string, body io.Reader, length int64, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, cl, req)
}

// At most MaxBodies bodies at once: with one publish held, another waits
// BodyWait, then is refused; reads pass.
func TestBodiesAtOnce(t *testing.T) {
	fake := &fakeControl{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	base := serve(t, fake, Options{MaxBodies: 1, BodyWait: 100 * time.Millisecond})
	cl := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(cl.CloseIdleConnections)
	publish := base + "/v1/namespaces/acme/web:publish"
	held := make(chan int, 1)
	go func() {
		status, _ := postTo(t, cl, publish, "application/json", strings.NewReader(small), -1)
		held <- status
	}()
	<-fake.entered
	status, body := postTo(t, cl, publish, "application/json", strings.NewReader(small), -1)
	if code, _, reason := rpcStatus(t, body); status != 429 || code != 8 || reason != "RATE_LIMITED" {
		t.Errorf("a second publish while one is held: HTTP %d %s; want 429, RESOURCE_EXHAUSTED/RATE_LIMITED", status, body)
	}
	if status, body := get(t, cl, base+"/v1/domains/acme"); status != 200 {
		t.Errorf("a read while a publish is held: HTTP %d %s", status, body)
	}
	close(fake.release)
	if status := <-held; status != 200 {
		t.Errorf("the held publish: HTTP %d", status)
	}
}

// A body sent too slowly loses its turn: reading it ends at BodyTimeout.
func TestSlowBody(t *testing.T) {
	base := serve(t, &fakeControl{}, Options{MaxBodies: 1, BodyTimeout: 200 * time.Millisecond})
	cl := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(cl.CloseIdleConnections)
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(`{"properties": [`)) // and nothing more
	start := time.Now()
	status, body := postTo(t, cl, base+"/v1/namespaces/acme/web:publish", "application/json", pr, -1)
	if status != http.StatusBadRequest || time.Since(start) > 10*time.Second {
		t.Errorf("a stalled body: HTTP %d %s after %v; want 400 after 200ms", status, body, time.Since(start))
	}
	// Its turn is free again.
	if status, body := postTo(t, cl, base+"/v1/namespaces/acme/web:publish", "application/json", strings.NewReader(small), -1); status != 200 {
		t.Errorf("a publish after the stalled one: HTTP %d %s", status, body)
	}
}
