package main

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/internal/tlsconfig"
)

// handshake runs a TLS handshake over loopback TCP and returns the
// identity each side saw, or the client's or server's error.
func handshake(t *testing.T, srv, cli *tls.Config) (serverSaw, clientSaw string, err error) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		id  string
		err error
	}
	srvDone := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			srvDone <- result{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		tc.SetDeadline(time.Now().Add(30 * time.Second))
		if err := tc.Handshake(); err != nil {
			srvDone <- result{err: err}
			return
		}
		// Echo one byte so the client knows the server accepted it.
		b := make([]byte, 1)
		if _, err := io.ReadFull(tc, b); err == nil {
			tc.Write(b)
		}
		srvDone <- result{id: tlsconfig.PeerIdentity(tc.ConnectionState())}
	}()
	d := &net.Dialer{Timeout: 30 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", l.Addr().String(), cli)
	if err != nil {
		<-srvDone
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	clientSaw = tlsconfig.PeerIdentity(c.ConnectionState())
	// With TLS 1.3 the server verifies the client certificate after the
	// client's handshake returns: a round trip proves it was accepted.
	if _, err := c.Write([]byte{1}); err == nil {
		_, err = io.ReadFull(c, make([]byte, 1))
		if err != nil {
			r := <-srvDone
			if r.err != nil {
				return "", "", r.err
			}
			return "", "", err
		}
	}
	r := <-srvDone
	return r.id, clientSaw, r.err
}

func TestCertsInitIssueHandshake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	code, stdout, stderr := runCLI(t, nil, "certs", "init", "--dir", dir, "--cn", "test-ca")
	if code != exitOK {
		t.Fatalf("certs init: exit %d\n%s%s", code, stdout, stderr)
	}
	mustContain(t, "certs init", stdout, `created CA "test-ca" in `+dir, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v, mode %v; want mode 0600", err, fi.Mode())
	}
	// A second init keeps the CA.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	_, stdout, _ = runCLI(t, nil, "certs", "init", "--dir", dir)
	mustContain(t, "second certs init", stdout, `kept the existing CA "test-ca"`)
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(after) != string(before) {
		t.Error("a second certs init replaced ca.crt")
	}

	issue := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, append([]string{"certs", "issue", "--dir", dir}, args...)...)
		if code != exitOK {
			t.Fatalf("certs issue %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		return stdout
	}
	mustContain(t, "issue control", issue("--name", "control", "--kind", "server", "--host", "127.0.0.1", "--host", "control.test"),
		`issued server certificate "control" for 127.0.0.1, control.test`, filepath.Join(dir, "control.crt"))
	mustContain(t, "issue distributor", issue("--name", "dist-a", "--kind", "both"), `issued both certificate "dist-a" for 127.0.0.1, ::1, localhost`)
	issue("--name", "web-17", "--kind", "client")

	caFile := filepath.Join(dir, "ca.crt")
	file := func(name, ext string) string { return filepath.Join(dir, name+ext) }
	server := func(name string) *tls.Config {
		c, err := tlsconfig.Server(file(name, ".crt"), file(name, ".key"), caFile)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := func(name, serverName string) *tls.Config {
		c, err := tlsconfig.Client(file(name, ".crt"), file(name, ".key"), caFile, serverName)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		what                 string
		srv                  *tls.Config
		cli                  *tls.Config
		wantServer, wantPeer string
		wantErr              string
	}{
		{what: "agent to distributor", srv: server("dist-a"), cli: client("web-17", "127.0.0.1"), wantServer: "web-17", wantPeer: "dist-a"},
		{what: "distributor to control", srv: server("control"), cli: client("dist-a", "control.test"), wantServer: "dist-a", wantPeer: "control"},
		{what: "wrong server name", srv: server("control"), cli: client("dist-a", "elsewhere.test"), wantErr: "certificate is valid for"},
		{what: "server-only cert as client", srv: server("dist-a"), cli: client("control", "127.0.0.1"), wantErr: "incompatible key usage"},
		{what: "client-only cert as server", srv: server("web-17"), cli: client("dist-a", "127.0.0.1"), wantErr: "incompatible key usage"},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			gotServer, gotPeer, err := handshake(t, tt.srv, tt.cli)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("handshake error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if gotServer != tt.wantServer || gotPeer != tt.wantPeer {
				t.Errorf("server saw %q, client saw %q; want %q and %q", gotServer, gotPeer, tt.wantServer, tt.wantPeer)
			}
		})
	}
}

func TestCertsErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	ca := filepath.Join(dir, "pki")
	if code, out, errs := runCLI(t, nil, "certs", "init", "--dir", ca); code != exitOK {
		t.Fatalf("certs init: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, nil, "certs", "issue", "--dir", ca, "--name", "host-1", "--kind", "client"); code != exitOK {
		t.Fatalf("certs issue: %d\n%s%s", code, out, errs)
	}
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"certs"}, exitUsage, "Subcommands:"},
		{[]string{"certs", "renew"}, exitUsage, `unknown subcommand "renew"`},
		{[]string{"certs", "init"}, exitUsage, "missing --dir DIR"},
		{[]string{"certs", "init", "--dir", empty, "--cn", "bad/name"}, exitUsage, `name "bad/name"`},
		{[]string{"certs", "init", "--dir", empty, "--validity", "-1h"}, exitUsage, "--validity -1h0m0s"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x"}, exitUsage, "missing --role"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--role", "host"}, exitUsage, `a host's zone ""`},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--role", "admin"}, exitUsage, `role "admin"`},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--role", "user", "--zone", "zone-a"}, exitUsage, "a user has no zone"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--role", "host", "--zone", "zone-a", "--kind", "server"}, exitUsage, "--kind server contradicts --role host"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--kind", "client", "--zone", "zone-a"}, exitUsage, "--zone goes with --role"},
		{[]string{"certs", "issue", "--dir", ca, "--kind", "client"}, exitUsage, "missing --name NAME"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--kind", "peer"}, exitUsage, `--kind "peer": want server, client or both`},
		{[]string{"certs", "issue", "--dir", ca, "--name", "ca", "--kind", "server"}, exitUsage, "--name ca"},
		{[]string{"certs", "issue", "--dir", ca, "--name", "a b", "--kind", "server"}, exitUsage, `name "a b"`},
		{[]string{"certs", "issue", "--dir", ca, "--name", "x", "--kind", "server", "--host", "a b"}, exitUsage, `host "a b"`},
		{[]string{"certs", "issue", "--dir", empty, "--name", "x", "--kind", "server"}, exitError, "create the CA first: lehr certs init --dir " + empty},
		{[]string{"certs", "issue", "--dir", ca, "--name", "host-1", "--kind", "client"}, exitError, "host-1.crt exists; pass --force"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q (stdout %q)", code, stderr, tt.wantCode, tt.wantStderr, stdout)
			}
		})
	}
	// Nothing was written by the failures.
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("%s exists after failed commands (stat: %v)", empty, err)
	}
	for _, n := range []string{"x", "ca.crt.crt", "a b"} {
		if _, err := os.Stat(filepath.Join(ca, n+".crt")); !os.IsNotExist(err) {
			t.Errorf("%s.crt written by a failed issue", n)
		}
	}
	// --force replaces.
	old, _ := os.ReadFile(filepath.Join(ca, "host-1.crt"))
	if code, out, errs := runCLI(t, nil, "certs", "issue", "--dir", ca, "--name", "host-1", "--kind", "client", "--force"); code != exitOK {
		t.Fatalf("certs issue --force: %d\n%s%s", code, out, errs)
	}
	if now, _ := os.ReadFile(filepath.Join(ca, "host-1.crt")); string(now) == string(old) {
		t.Error("--force did not replace host-1.crt")
	}
}
