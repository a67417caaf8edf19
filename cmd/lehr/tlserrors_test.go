package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
)

// With no client certificate, an expired one or one from a CA control
// does not trust, lehr said "write: broken pipe … is control running?"
// (issue 28, item 8): a TLS 1.3 server refuses a client certificate only
// after the client's handshake. Each now says which certificate is wrong
// and what to do, and no longer asks whether control runs; so does a CA
// file that does not hold control's CA.
func TestCertificateRefusalsSayWhichCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "lehr-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(filepath.Join(dir, "other"), "other-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca", pki.CACertFile)
	issue := func(ca *pki.CA, name string, kind pki.Kind, role string) (cert, key string) {
		t.Helper()
		id := tlsconfig.Identity{Role: role, Name: name}
		cert, key, err := ca.IssueURIFiles(filepath.Join(dir, "leaf-"+name), name, kind, nil, id.URI(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key
	}
	srvCert, srvKey := issue(ca, "control", pki.Server, tlsconfig.RoleControl)
	serverTLS, err := tlsconfig.Server(srvCert, srvKey, caFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := controltest.StartControl(t, control.Options{TLS: serverTLS})

	aliceCert, aliceKey := issue(ca, "alice", pki.Client, tlsconfig.RoleUser)
	strangerCert, strangerKey := issue(other, "stranger", pki.Client, tlsconfig.RoleUser)
	ca.Now = func() time.Time { return time.Now().Add(-3 * time.Hour) }
	oldCert, oldKey := issue(ca, "old", pki.Client, tlsconfig.RoleUser)
	ca.Now = nil
	otherCA := filepath.Join(dir, "other", pki.CACertFile)

	base := []string{"--control", srv.Addr}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no certificate", []string{"--tls-ca", caFile}, []string{"requires a client certificate and none was given", "--tls-cert and --tls-key", "lehr certs issue --dir DIR --name NAME --role user"}},
		{"an expired certificate", []string{"--tls-ca", caFile, "--tls-cert", oldCert, "--tls-key", oldKey},
			[]string{`client certificate CN "old" (spiffe://lehr/user/old) expired at`, "issue a new one"}},
		{"a certificate of another CA", []string{"--tls-ca", caFile, "--tls-cert", strangerCert, "--tls-key", strangerKey},
			[]string{`does not accept the client certificate CN "stranger"`, `issued by "other-ca"`, "a CA the server trusts"}},
		{"another CA file", []string{"--tls-ca", otherCA, "--tls-cert", aliceCert, "--tls-key", aliceKey},
			[]string{"does not trust the server's certificate", `issued by "lehr-ca"`, "--tls-ca the CA that issued control's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append(append([]string{"domain", "list"}, base...), tc.args...)...)
			if code == 0 {
				t.Fatalf("lehr domain list succeeded")
			}
			for _, want := range append(tc.want, "CERTIFICATE_REFUSED") {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
			for _, wrong := range []string{"is control running", "broken pipe"} {
				if strings.Contains(stderr, wrong) {
					t.Errorf("stderr says %q:\n%s", wrong, stderr)
				}
			}
		})
	}
	// The right certificate works.
	if code, _, stderr := runCLI(t, nil, append(append([]string{"domain", "list"}, base...), "--tls-ca", caFile, "--tls-cert", aliceCert, "--tls-key", aliceKey)...); code != 0 {
		t.Errorf("alice's certificate: exit %d\n%s", code, stderr)
	}
}
