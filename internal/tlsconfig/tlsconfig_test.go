package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/internal/pki"
)

// The certificates of these tests come from the project's own CA tooling
// (internal/pki), as an operator's would.

func newCA(t *testing.T, name string) (*pki.CA, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := pki.NewCA(dir, name, 30*24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca, dir
}

func issue(t *testing.T, ca *pki.CA, dir, name string, kind pki.Kind, validity time.Duration) (certFile, keyFile string) {
	t.Helper()
	c, k, err := ca.IssueFiles(dir, name, kind, nil, validity)
	if err != nil {
		t.Fatalf("IssueFiles(%s): %v", name, err)
	}
	return c, k
}

type handshakeResult struct {
	serverErr, clientErr error
	serverSaw, clientSaw string // PeerIdentity on each side
	version              uint16
}

// handshake runs a real TLS handshake over loopback TCP. The server writes
// one byte after a successful handshake; the client reads it, so a client
// certificate rejected by the server (reported after the client's side of a
// TLS 1.3 handshake completes) shows up as a client error too.
func handshake(t *testing.T, srv, cli *tls.Config) handshakeResult {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type serverResult struct {
		err error
		saw string
	}
	done := make(chan serverResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- serverResult{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		tc.SetDeadline(time.Now().Add(30 * time.Second))
		if err := tc.HandshakeContext(context.Background()); err != nil {
			done <- serverResult{err: err}
			return
		}
		saw := PeerIdentity(tc.ConnectionState())
		_, err = tc.Write([]byte{1})
		done <- serverResult{err: err, saw: saw}
	}()

	var res handshakeResult
	d := net.Dialer{Timeout: 30 * time.Second}
	raw, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cli)
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	res.clientErr = tc.Handshake()
	if res.clientErr == nil {
		st := tc.ConnectionState()
		res.clientSaw, res.version = PeerIdentity(st), st.Version
		_, res.clientErr = io.ReadFull(tc, make([]byte, 1))
	}
	tc.Close()
	sr := <-done
	res.serverErr, res.serverSaw = sr.err, sr.saw
	return res
}

func mustServer(t *testing.T, certFile, keyFile, caFile string) *tls.Config {
	t.Helper()
	c, err := Server(certFile, keyFile, caFile)
	if err != nil {
		t.Fatalf("ServerTLS: %v", err)
	}
	return c
}

func mustClient(t *testing.T, certFile, keyFile, caFile, serverName string) *tls.Config {
	t.Helper()
	c, err := Client(certFile, keyFile, caFile, serverName)
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	return c
}

func TestMutualTLS(t *testing.T) {
	ca, caDir := newCA(t, "lehr-ca")
	caFile := filepath.Join(caDir, pki.CACertFile)
	dir := t.TempDir()
	srvCert, srvKey := issue(t, ca, dir, "control", pki.Server, time.Hour)
	cliCert, cliKey := issue(t, ca, dir, "agent-host1", pki.Client, time.Hour)

	res := handshake(t, mustServer(t, srvCert, srvKey, caFile), mustClient(t, cliCert, cliKey, caFile, "127.0.0.1"))
	if res.serverErr != nil || res.clientErr != nil {
		t.Fatalf("handshake: server %v, client %v; want success", res.serverErr, res.clientErr)
	}
	if res.serverSaw != "agent-host1" || res.clientSaw != "control" {
		t.Errorf("PeerIdentity: server saw %q, client saw %q; want agent-host1, control", res.serverSaw, res.clientSaw)
	}
	if res.version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", res.version)
	}
	// localhost is a default SAN too.
	res = handshake(t, mustServer(t, srvCert, srvKey, caFile), mustClient(t, cliCert, cliKey, caFile, "localhost"))
	if res.serverErr != nil || res.clientErr != nil {
		t.Errorf("handshake to localhost: server %v, client %v; want success", res.serverErr, res.clientErr)
	}
	if got := PeerIdentity(tls.ConnectionState{}); got != "" {
		t.Errorf("PeerIdentity(no certificates) = %q, want empty", got)
	}
}

func TestMutualTLSRejects(t *testing.T) {
	ca, caDir := newCA(t, "lehr-ca")
	caFile := filepath.Join(caDir, pki.CACertFile)
	otherCA, _ := newCA(t, "other-ca")
	dir := t.TempDir()
	srvCert, srvKey := issue(t, ca, dir, "control", pki.Server, time.Hour)
	cliCert, cliKey := issue(t, ca, dir, "agent", pki.Client, time.Hour)
	strangerCert, strangerKey := issue(t, otherCA, dir, "stranger", pki.Client, time.Hour)
	serverAsClientCert, serverAsClientKey := issue(t, ca, dir, "server-only", pki.Server, time.Hour)

	past := func() time.Time { return time.Now().Add(-3 * time.Hour) }
	ca.Now = past
	expiredCliCert, expiredCliKey := issue(t, ca, dir, "expired-agent", pki.Client, time.Hour)
	expiredSrvCert, expiredSrvKey := issue(t, ca, dir, "expired-control", pki.Server, time.Hour)
	ca.Now = nil

	goodServer := func() *tls.Config { return mustServer(t, srvCert, srvKey, caFile) }
	noCert := mustClient(t, cliCert, cliKey, caFile, "127.0.0.1")
	noCert.Certificates = nil
	tls12 := mustClient(t, cliCert, cliKey, caFile, "127.0.0.1")
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12

	forced := mustClient(t, strangerCert, strangerKey, caFile, "127.0.0.1")
	stranger := forced.Certificates[0]
	forced.Certificates = nil
	forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }

	var unknownAuthority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	tests := []struct {
		name string
		srv  *tls.Config
		cli  *tls.Config
		// Which side must reject, and a check on the rejecting side's error.
		serverRejects bool
		check         func(error) bool
	}{
		// Go's client sends no certificate the server's CA list does not
		// name; a client that sends it anyway fails verification.
		{"client cert from another CA", goodServer(), mustClient(t, strangerCert, strangerKey, caFile, "127.0.0.1"),
			true, func(err error) bool { return strings.Contains(err.Error(), "didn't provide a certificate") }},
		{"client cert from another CA, forced", goodServer(), forced,
			true, func(err error) bool { return errors.As(err, &unknownAuthority) }},
		{"expired client cert", goodServer(), mustClient(t, expiredCliCert, expiredCliKey, caFile, "127.0.0.1"),
			true, func(err error) bool { return errors.As(err, &invalid) && invalid.Reason == x509.Expired }},
		{"server cert used as client", goodServer(), mustClient(t, serverAsClientCert, serverAsClientKey, caFile, "127.0.0.1"),
			true, func(err error) bool { return errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage }},
		{"no client cert", goodServer(), noCert,
			true, func(err error) bool { return strings.Contains(err.Error(), "didn't provide a certificate") }},
		{"TLS 1.2 client", goodServer(), tls12,
			true, func(err error) bool { return strings.Contains(err.Error(), "unsupported versions") }},
		{"expired server cert", mustServer(t, expiredSrvCert, expiredSrvKey, caFile), mustClient(t, cliCert, cliKey, caFile, "127.0.0.1"),
			false, func(err error) bool { return errors.As(err, &invalid) && invalid.Reason == x509.Expired }},
		{"server from another CA", mustServer(t, srvCert, srvKey, filepath.Join(caDir, pki.CACertFile)),
			mustClient(t, cliCert, cliKey, writeCA(t, otherCA), "127.0.0.1"),
			false, func(err error) bool { return errors.As(err, &unknownAuthority) }},
		{"wrong server name", goodServer(), mustClient(t, cliCert, cliKey, caFile, "control.example.com"),
			false, func(err error) bool { return errors.As(err, &hostname) }},
	}
	for _, tt := range tests {
		res := handshake(t, tt.srv, tt.cli)
		if res.serverErr == nil || res.clientErr == nil {
			t.Errorf("%s: server error %v, client error %v; want both to fail", tt.name, res.serverErr, res.clientErr)
			continue
		}
		rejecting := res.clientErr
		if tt.serverRejects {
			rejecting = res.serverErr
		}
		if !tt.check(rejecting) {
			t.Errorf("%s: rejecting side error %v does not say why", tt.name, rejecting)
		}
		if res.serverSaw != "" {
			t.Errorf("%s: server saw identity %q on a failed handshake", tt.name, res.serverSaw)
		}
	}
}

func writeCA(t *testing.T, ca *pki.CA) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(p, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTLSConfigErrors(t *testing.T) {
	ca, caDir := newCA(t, "ca")
	caFile := filepath.Join(caDir, pki.CACertFile)
	certFile, keyFile := issue(t, ca, t.TempDir(), "x", pki.Both, time.Hour)
	notPEM := filepath.Join(t.TempDir(), "junk.crt")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Server(certFile, keyFile, notPEM); !errors.Is(err, ErrInvalid) {
		t.Errorf("Server(junk CA) error = %v, want ErrInvalid", err)
	}
	if _, err := Client(certFile, keyFile, filepath.Join(t.TempDir(), "missing.crt"), "x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Client(missing CA) error = %v, want not exist", err)
	}
	if _, err := Server(certFile, caFile, caFile); err == nil {
		t.Errorf("Server(mismatched key) = nil error")
	}
	cfg := mustServer(t, certFile, keyFile, caFile)
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ServerTLS MinVersion %x ClientAuth %v; want TLS 1.3, RequireAndVerifyClientCert", cfg.MinVersion, cfg.ClientAuth)
	}
}

func TestServerWithoutCAAsksNoClientCertificate(t *testing.T) {
	ca, _ := newCA(t, "ca")
	certFile, keyFile := issue(t, ca, t.TempDir(), "x", pki.Server, time.Hour)
	cfg, err := Server(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.NoClientCert || cfg.ClientCAs != nil {
		t.Errorf("Server(no CA): MinVersion %x ClientAuth %v ClientCAs %v; want TLS 1.3, no client certificate", cfg.MinVersion, cfg.ClientAuth, cfg.ClientCAs)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7400": true, "localhost:1": true, "[::1]:7400": true, "127.1.2.3:9": true,
		"0.0.0.0:7400": false, ":7400": false, "10.1.2.3:7400": false, "[::]:7400": false,
		"example.com:443": false, "127.0.0.1": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
