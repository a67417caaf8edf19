package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
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
