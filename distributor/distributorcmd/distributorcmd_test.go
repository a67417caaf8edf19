package distributorcmd

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/sdnotify"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// hostPKI is a test CA with certificates for control, a distributor and a
// control client, as "lehr certs" would make them.
type hostPKI struct {
	caFile              string
	ctlCert, ctlKey     string
	distCert, distKey   string // kind both: server to agents, client of control
	adminCert, adminKey string
}

func newPKI(t *testing.T) hostPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(dir, "test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, kind pki.Kind, id *url.URL) (string, string) {
		c, k, err := ca.IssueURIFiles(dir, name, kind, nil, id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	p := hostPKI{caFile: filepath.Join(dir, pki.CACertFile)}
	p.ctlCert, p.ctlKey = issue("control", pki.Server, tlsconfig.Identity{Role: tlsconfig.RoleControl, Name: "control"}.URI())
	p.distCert, p.distKey = issue("dist-1", pki.Both, tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-tls", Name: "dist-1"}.URI())
	p.adminCert, p.adminKey = issue("admin", pki.Client, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "admin"}.URI())
	return p
}

// controlTLS is control's server configuration: its certificate, and
// client certificates of the CA required.
func (p hostPKI) controlTLS(t *testing.T) *tls.Config {
	t.Helper()
	c, err := tlsconfig.Server(p.ctlCert, p.ctlKey, p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out); code != 0 {
		t.Errorf("--help exit code %d, want 0", code)
	}
	for _, want := range []string{"Usage:", "Examples:", "-zone", "-control ", "-listen", "-metrics-listen",
		"-tls-cert", "-tls-key", "-tls-ca", "-control-tls-cert", "-control-plaintext", "-cache-bytes",
		"-report-interval", "-log-level", "-log-format", "lehr certs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q", want)
		}
	}
}

func TestParse(t *testing.T) {
	p := newPKI(t)
	creds := []string{"--tls-cert", p.distCert, "--tls-key", p.distKey, "--tls-ca", p.caFile}
	base := append([]string{"--zone", "zone-a", "--control", "127.0.0.1:7400"}, creds...)

	o, lo, err := parse(append(base, "--listen", "127.0.0.1:0", "--cache-bytes", "1048576",
		"--report-interval", "3s", "--id", "d1", "--log-format", "json"), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if o.Zone != "zone-a" || o.ID != "d1" || o.Listen != "127.0.0.1:0" || o.CacheBytes != 1<<20 || o.ReportInterval != 3*time.Second || lo.Format != "json" {
		t.Errorf("parsed options %+v (log %+v): want zone-a, d1, 127.0.0.1:0, 1 MiB, 3s, json", o, lo)
	}
	if o.TLS == nil || o.TLS.ClientCAs == nil || len(o.TLS.Certificates) != 1 {
		t.Errorf("QUIC TLS = %+v, want the server certificate and the agents' CA", o.TLS)
	}
	// No server name in the configuration: each replica is verified
	// against the name it is listed under in --control.
	if o.ControlTLS == nil || o.ControlTLS.ServerName != "" || len(o.ControlTLS.Certificates) != 1 {
		t.Errorf("control TLS = %+v, want the same certificate and no fixed server name", o.ControlTLS)
	}
	o, _, err = parse(append([]string{"--zone", "zone-a", "--control", "control-a.example:7400,control-b.example:7400"}, creds...), &bytes.Buffer{})
	if err != nil || o.ControlAddr != "control-a.example:7400,control-b.example:7400" {
		t.Errorf("--control with two replicas: err %v, address %q", err, o.ControlAddr)
	}
	o, _, err = parse(append(base, "--metrics-listen", "127.0.0.1:0", "--pprof"), &bytes.Buffer{})
	if err != nil || !o.Pprof {
		t.Errorf("--pprof with --metrics-listen: Pprof %v, err %v; want true, nil", o.Pprof, err)
	}
	o, _, err = parse(append(base, "--control-plaintext"), &bytes.Buffer{})
	if err != nil || o.ControlTLS != nil {
		t.Errorf("--control-plaintext: ControlTLS %v, err %v; want nil, nil", o.ControlTLS, err)
	}
	o, _, err = parse(append(base, "--control-server-name", "control.internal"), &bytes.Buffer{})
	if err != nil || o.ControlTLS.ServerName != "control.internal" {
		t.Errorf("--control-server-name: err %v, options %+v", err, o.ControlTLS)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"no zone", append([]string{"--control", "127.0.0.1:1"}, creds...), "--zone is required"},
		{"no control", append([]string{"--zone", "z"}, creds...), "--control is required"},
		{"bad control", append([]string{"--zone", "z", "--control", "nohost"}, creds...), `--control: "nohost": want host:port`},
		{"bad control in a list", append([]string{"--zone", "z", "--control", "127.0.0.1:1,nohost"}, creds...), `--control: entry 2 "nohost": want host:port`},
		{"bad listen", append(base, "--listen", "7410"), `--listen "7410"`},
		{"no certs", []string{"--zone", "z", "--control", "127.0.0.1:1"}, "--tls-cert, --tls-key and --tls-ca are required"},
		{"missing cert file", append(base[:4:4], "--tls-cert", "/nonexistent.crt", "--tls-key", p.distKey, "--tls-ca", p.caFile), "/nonexistent.crt"},
		{"pprof without metrics", append(base, "--pprof"), "--pprof serves on --metrics-listen"},
		{"bad cache", append(base, "--cache-bytes", "0"), "--cache-bytes 0"},
		{"bad interval", append(base, "--report-interval", "-1s"), "--report-interval -1s"},
		{"interval control would not keep", append(base, "--report-interval", "90s"), "at most 1m0s"},
		{"bad level", append(base, "--log-level", "loud"), "--log-level"},
		{"bad format", append(base, "--log-format", "xml"), "--log-format"},
		{"plaintext and tls", append(base, "--control-plaintext", "--control-tls-ca", p.caFile), "--control-plaintext excludes"},
		{"stray argument", append(base, "extra"), `unexpected argument "extra"`},
	}
	for _, tc := range bad {
		_, _, err := parse(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}

	// Errors found by distributor.New are usage errors too.
	var out bytes.Buffer
	code := Main(context.Background(), append([]string{"--zone", "zone-a", "--control", "10.1.2.3:7400", "--control-plaintext"}, creds...), &out)
	if code != 2 || !strings.Contains(out.String(), "plaintext is only allowed on loopback") {
		t.Errorf("plaintext to a remote control: exit %d, output %q; want 2 and a loopback error", code, out.String())
	}
	out.Reset()
	code = Main(context.Background(), append([]string{"--zone", "Bad Zone!", "--control", "127.0.0.1:1"}, creds...), &out)
	if code != 2 || !strings.Contains(out.String(), "Options.Zone") {
		t.Errorf("bad zone name: exit %d, output %q; want 2 and a zone error", code, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// notifySocket listens like systemd does for a Type=notify service and
// sets NOTIFY_SOCKET; the channel carries each datagram.
func notifySocket(t *testing.T) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(sdnotify.EnvSocket, path)
	ch := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return ch
}

func receive(t *testing.T, ch <-chan string, what string, stderr *syncBuffer) string {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		t.Fatalf("no %s notification within a minute; output:\n%s", what, stderr.String())
		return ""
	}
}

// TestMainServesAndNotifies runs the command against a control plane that
// requires mutual TLS: the distributor must reach it with its own
// certificate (it registers its zone), tell systemd it is ready, and stop
// cleanly, saying so, when interrupted.
func TestMainServesAndNotifies(t *testing.T) {
	p := newPKI(t)
	adminTLS, err := tlsconfig.Client(p.adminCert, p.adminKey, p.caFile, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv := controltest.StartControl(t, control.Options{TLS: p.controlTLS(t)},
		grpc.WithTransportCredentials(credentials.NewTLS(adminTLS)))
	notes := notifySocket(t)

	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--zone", "zone-tls", "--id", "dist-1", "--control", srv.Addr, "--listen", "127.0.0.1:0",
			"--tls-cert", p.distCert, "--tls-key", p.distKey, "--tls-ca", p.caFile, "--report-interval", "1s", "--log-level", "warn"}, &stderr)
	}()
	if m := receive(t, notes, "READY", &stderr); !strings.HasPrefix(m, "READY=1\nSTATUS=serving zone zone-tls on 127.0.0.1:") {
		t.Errorf("first notification %q, want READY=1 with a status naming the zone and address", m)
	}
	// The zone appears once the goal watch reached control over mutual TLS.
	wait.Until(t, "zone-tls to be registered with control", func() error {
		zs, err := srv.Client.ListZones(ctx, &lehrpb.ListZonesRequest{})
		if err == nil && len(zs.GetZones()) == 1 && zs.GetZones()[0].GetName() == "zone-tls" {
			return nil
		}
		return fmt.Errorf("last: %v, %v; output:\n%s", zs, err, stderr.String())
	})
	cancel()
	if m := receive(t, notes, "STOPPING", &stderr); m != sdnotify.Stopping {
		t.Errorf("notification after interrupt = %q, want %q", m, sdnotify.Stopping)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after interrupt, want 0; output:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Main did not return within a minute of cancellation")
	}
}

// A UDP address already in use fails the command with an error naming it.
func TestMainListenError(t *testing.T) {
	p := newPKI(t)
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stderr bytes.Buffer
	code := Main(context.Background(), []string{"--zone", "zone-a", "--control", "127.0.0.1:1", "--control-plaintext",
		"--listen", l.LocalAddr().String(), "--tls-cert", p.distCert, "--tls-key", p.distKey, "--tls-ca", p.caFile}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), l.LocalAddr().String()) {
		t.Errorf("busy --listen: exit %d, output %q; want 1 and an error naming the address", code, stderr.String())
	}
}
