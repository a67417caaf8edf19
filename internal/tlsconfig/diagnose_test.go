package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/internal/pki"
)

// serve accepts TLS connections with cfg on a loopback port, writing a
// byte to each (as a gRPC server writes its settings), until the test
// ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte{0})
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return ln.Addr().String()
}

// Diagnose says which side refuses which certificate when TLS fails, and
// nothing when it works or the server is not there: then the failure was
// not TLS's.
func TestDiagnose(t *testing.T) {
	ca, caDir := newCA(t, "lehr-ca")
	caFile := filepath.Join(caDir, pki.CACertFile)
	dir := t.TempDir()
	srvCert, srvKey := issue(t, ca, dir, "control", pki.Server, time.Hour)
	cliCert, cliKey := issue(t, ca, dir, "alice", pki.Client, time.Hour)
	addr := serve(t, mustServer(t, srvCert, srvKey, caFile))
	ctx := context.Background()

	if err := Diagnose(ctx, addr, mustClient(t, cliCert, cliKey, caFile, "127.0.0.1"), ""); err != nil {
		t.Errorf("a client the server accepts: %v; want nil", err)
	}
	anon := mustClient(t, cliCert, cliKey, caFile, "127.0.0.1")
	anon.Certificates = nil
	err := Diagnose(ctx, addr, anon, "")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "requires a client certificate") {
		t.Errorf("a client without a certificate: %v; want ErrRefused saying one is required", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	if err := Diagnose(ctx, down, anon, ""); err != nil {
		t.Errorf("no server: %v; want nil (not a TLS refusal)", err)
	}
}
