package certs

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

	"github.com/google/go-cmp/cmp"
)

const day = 24 * time.Hour

func newCA(t *testing.T, name string) (*CA, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := NewCA(dir, name, 30*day)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca, dir
}

func issue(t *testing.T, ca *CA, dir, name string, kind Kind, validity time.Duration) (certFile, keyFile string) {
	t.Helper()
	c, k, err := ca.IssueFiles(dir, name, kind, nil, validity)
	if err != nil {
		t.Fatalf("IssueFiles(%s): %v", name, err)
	}
	return c, k
}

func TestNewCAWritesAndReloads(t *testing.T) {
	ca, dir := newCA(t, "lehr-dev-ca")
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "lehr-dev-ca" {
		t.Errorf("CA cert IsCA=%v CN=%q, want true, lehr-dev-ca", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	if got := ca.Cert.PublicKeyAlgorithm; got != x509.ECDSA {
		t.Errorf("CA key algorithm %v, want ECDSA", got)
	}
	for name, want := range map[string]os.FileMode{CAKeyFile: 0o600, "": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %q = %v, want %v", filepath.Join(dir, name), got, want)
		}
	}
	again, err := NewCA(dir, "ignored", time.Hour)
	if err != nil {
		t.Fatalf("NewCA on existing dir: %v", err)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Errorf("NewCA on an existing dir made a new CA; want the stored one loaded")
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.key.Equal(ca.key) {
		t.Errorf("LoadCA returned a different CA")
	}
	// The loaded CA signs certificates that the original's pool accepts.
	certPEM, _, err := loaded.Issue("x", Client, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := parseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify leaf of reloaded CA: %v", err)
	}
}

func TestNewCAIncompleteAndMismatched(t *testing.T) {
	_, dir := newCA(t, "a")
	_, other := newCA(t, "b")

	onlyCert := t.TempDir()
	copyFile(t, filepath.Join(dir, CACertFile), filepath.Join(onlyCert, CACertFile))
	if _, err := NewCA(onlyCert, "c", day); !errors.Is(err, ErrIncompleteCA) || !strings.Contains(err.Error(), "ca.crt without ca.key") {
		t.Errorf("NewCA(cert only) error = %v, want ErrIncompleteCA naming ca.key", err)
	}
	onlyKey := t.TempDir()
	copyFile(t, filepath.Join(dir, CAKeyFile), filepath.Join(onlyKey, CAKeyFile))
	if _, err := NewCA(onlyKey, "c", day); !errors.Is(err, ErrIncompleteCA) || !strings.Contains(err.Error(), "ca.key without ca.crt") {
		t.Errorf("NewCA(key only) error = %v, want ErrIncompleteCA naming ca.crt", err)
	}
	mixed := t.TempDir()
	copyFile(t, filepath.Join(dir, CACertFile), filepath.Join(mixed, CACertFile))
	copyFile(t, filepath.Join(other, CAKeyFile), filepath.Join(mixed, CAKeyFile))
	if _, err := LoadCA(mixed); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("LoadCA(mismatched key) error = %v, want ErrInvalid, does not match", err)
	}
	if _, err := NewCA(t.TempDir(), "", day); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewCA(empty name) error = %v, want ErrInvalid", err)
	}
	if _, err := NewCA(t.TempDir(), "ca", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewCA(zero validity) error = %v, want ErrInvalid", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestIssue(t *testing.T) {
	ca, _ := newCA(t, "ca")
	tests := []struct {
		name     string
		certName string
		kind     Kind
		hosts    []string
		wantEKU  []x509.ExtKeyUsage
		wantIPs  []string
		wantDNS  []string
	}{
		{"server defaults", "control", Server, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{"127.0.0.1", "::1"}, []string{"localhost"}},
		{"client", "agent-host1", Client, []string{"10.0.0.7"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, []string{"10.0.0.7"}, nil},
		{"both", "distributor.us-east-1a", Both, []string{"dist.example.com", "fe80::1", "*.lehr.test"},
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, []string{"fe80::1"}, []string{"dist.example.com", "*.lehr.test"}},
	}
	for _, tt := range tests {
		certPEM, keyPEM, err := ca.Issue(tt.certName, tt.kind, tt.hosts, time.Hour)
		if err != nil {
			t.Errorf("%s: Issue: %v", tt.name, err)
			continue
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			t.Errorf("%s: key pair does not match: %v", tt.name, err)
		}
		c, err := parseCert(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		got := struct {
			CN       string
			EKU      []x509.ExtKeyUsage
			IPs, DNS []string
			IsCA     bool
		}{c.Subject.CommonName, c.ExtKeyUsage, ips, c.DNSNames, c.IsCA}
		want := got
		want.CN, want.EKU, want.IPs, want.DNS, want.IsCA = tt.certName, tt.wantEKU, tt.wantIPs, tt.wantDNS, false
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: certificate (-want +got):\n%s", tt.name, diff)
		}
		if c.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("%s: key algorithm %v, want ECDSA", tt.name, c.PublicKeyAlgorithm)
		}
	}

	// Validity never exceeds the CA's.
	certPEM, _, err := ca.Issue("long", Server, nil, 10*365*day)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := parseCert(certPEM)
	if c.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %v is after CA NotAfter %v", c.NotAfter, ca.Cert.NotAfter)
	}

	bad := []struct {
		name, certName string
		kind           Kind
		hosts          []string
		validity       time.Duration
		want           string
	}{
		{"empty name", "", Server, nil, time.Hour, "want 1-64"},
		{"long name", strings.Repeat("n", 65), Server, nil, time.Hour, "want 1-64"},
		{"dot name", ".hidden", Server, nil, time.Hour, "starts with '.'"},
		{"path name", "../etc/x", Server, nil, time.Hour, "byte '/'"},
		{"slash name", "a/b", Server, nil, time.Hour, "byte '/'"},
		{"kind", "x", Kind(0), nil, time.Hour, "want Server, Client or Both"},
		{"validity", "x", Client, nil, 0, "validity 0s, want > 0"},
		{"host", "x", Client, []string{"a b"}, time.Hour, `host "a b" is neither`},
		{"empty host", "x", Client, []string{""}, time.Hour, `host "" is neither`},
	}
	for _, tt := range bad {
		_, _, err := ca.Issue(tt.certName, tt.kind, tt.hosts, tt.validity)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Issue error = %v, want ErrInvalid containing %q", tt.name, err, tt.want)
		}
	}
}

func TestIssueFilesModes(t *testing.T) {
	ca, _ := newCA(t, "ca")
	dir := filepath.Join(t.TempDir(), "certs")
	certFile, keyFile := issue(t, ca, dir, "agent-1", Client, time.Hour)
	if certFile != filepath.Join(dir, "agent-1.crt") || keyFile != filepath.Join(dir, "agent-1.key") {
		t.Errorf("IssueFiles paths = %s, %s", certFile, keyFile)
	}
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode of %s = %v, want 0600", keyFile, got)
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Errorf("LoadX509KeyPair: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want 2 (no temp files left)", len(entries))
	}
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
	c, err := ServerTLS(certFile, keyFile, caFile)
	if err != nil {
		t.Fatalf("ServerTLS: %v", err)
	}
	return c
}

func mustClient(t *testing.T, certFile, keyFile, caFile, serverName string) *tls.Config {
	t.Helper()
	c, err := ClientTLS(certFile, keyFile, caFile, serverName)
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	return c
}

func TestMutualTLS(t *testing.T) {
	ca, caDir := newCA(t, "lehr-ca")
	caFile := filepath.Join(caDir, CACertFile)
	dir := t.TempDir()
	srvCert, srvKey := issue(t, ca, dir, "control", Server, time.Hour)
	cliCert, cliKey := issue(t, ca, dir, "agent-host1", Client, time.Hour)

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
	caFile := filepath.Join(caDir, CACertFile)
	otherCA, _ := newCA(t, "other-ca")
	dir := t.TempDir()
	srvCert, srvKey := issue(t, ca, dir, "control", Server, time.Hour)
	cliCert, cliKey := issue(t, ca, dir, "agent", Client, time.Hour)
	strangerCert, strangerKey := issue(t, otherCA, dir, "stranger", Client, time.Hour)
	serverAsClientCert, serverAsClientKey := issue(t, ca, dir, "server-only", Server, time.Hour)

	past := func() time.Time { return time.Now().Add(-3 * time.Hour) }
	ca.Clock = past
	expiredCliCert, expiredCliKey := issue(t, ca, dir, "expired-agent", Client, time.Hour)
	expiredSrvCert, expiredSrvKey := issue(t, ca, dir, "expired-control", Server, time.Hour)
	ca.Clock = nil

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
		{"server from another CA", mustServer(t, srvCert, srvKey, filepath.Join(caDir, CACertFile)),
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

func writeCA(t *testing.T, ca *CA) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(p, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTLSConfigErrors(t *testing.T) {
	ca, caDir := newCA(t, "ca")
	caFile := filepath.Join(caDir, CACertFile)
	certFile, keyFile := issue(t, ca, t.TempDir(), "x", Both, time.Hour)
	notPEM := filepath.Join(t.TempDir(), "junk.crt")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ServerTLS(certFile, keyFile, notPEM); !errors.Is(err, ErrInvalid) {
		t.Errorf("ServerTLS(junk CA) error = %v, want ErrInvalid", err)
	}
	if _, err := ClientTLS(certFile, keyFile, filepath.Join(t.TempDir(), "missing.crt"), "x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ClientTLS(missing CA) error = %v, want not exist", err)
	}
	if _, err := ServerTLS(certFile, caFile, caFile); err == nil {
		t.Errorf("ServerTLS(mismatched key) = nil error")
	}
	cfg := mustServer(t, certFile, keyFile, caFile)
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ServerTLS MinVersion %x ClientAuth %v; want TLS 1.3, RequireAndVerifyClientCert", cfg.MinVersion, cfg.ClientAuth)
	}
}
