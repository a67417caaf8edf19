package control_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// tlsEtcd is a real etcd member serving clients over TLS on loopback and
// requiring a client certificate its CA issued.
type tlsEtcd struct {
	endpoint string
	ca       *pki.CA
	dir      string
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startTLSEtcd(t *testing.T) *tlsEtcd {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "etcd-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueFiles(dir, "etcd", pki.Server, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: filepath.Join(dir, "ca", pki.CACertFile), ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd did not start within a minute")
	}
	return &tlsEtcd{endpoint: client.String(), ca: ca, dir: dir}
}

// clientTLS is a client configuration trusting the etcd's CA, with a
// client certificate the CA issued when withCert.
func (e *tlsEtcd) clientTLS(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	if !withCert {
		pool := x509.NewCertPool()
		pool.AddCert(e.ca.Cert)
		return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cert, key, err := e.ca.IssueFiles(e.dir, "control", pki.Client, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconfig.Client(cert, key, filepath.Join(e.dir, "ca", pki.CACertFile), "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Control reaches an external etcd over mutual TLS (issue 29, item 3): it
// serves with the CA and a client certificate, and without them it
// refuses to start within its probe timeout, saying which certificate —
// it used to hang at start-up with nothing logged.
func TestExternalEtcdOverMutualTLS(t *testing.T) {
	e := startTLSEtcd(t)

	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: []string{e.endpoint}, EtcdTLS: e.clientTLS(t, true)})
	createDomain(t, srv.Client, "pay", nil)
	if _, err := srv.Client.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/limits", Properties: []*lehrpb.Property{prop("k", "", "v")}}); err != nil {
		t.Fatalf("publish through control on a TLS etcd: %v", err)
	}

	other, err := pki.NewCA(filepath.Join(t.TempDir(), "other"), "another-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherPool := x509.NewCertPool()
	otherPool.AddCert(other.Cert)
	withOtherCA := e.clientTLS(t, true)
	withOtherCA.RootCAs = otherPool
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		want string
	}{
		{"no client certificate", e.clientTLS(t, false), "certificate"},
		{"another-ca", withOtherCA, "does not trust the server's certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := control.New(control.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", EtcdEndpoints: []string{e.endpoint}, EtcdTLS: tc.tls,
				EtcdProbeTimeout: 2 * time.Second, Logger: controltest.Logger(t, 8)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			err = c.Run(ctx)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run = %v after %v; want it to refuse to start, saying why", err, time.Since(start))
			}
			if testing.Verbose() {
				t.Logf("Run = %v (after %v)", err, time.Since(start).Round(time.Millisecond))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), e.endpoint) {
				t.Errorf("Run = %v; want it to name %s and say %q", err, e.endpoint, tc.want)
			}
		})
	}
}

func TestCheckEtcdEndpoints(t *testing.T) {
	for _, tc := range []struct {
		endpoints []string
		tls       bool
		want      string // "" for accepted
	}{
		{[]string{"http://127.0.0.1:2379"}, false, ""},
		{[]string{"http://localhost:2379"}, false, ""},
		{[]string{"https://etcd-0:2379", "https://etcd-1:2379"}, true, ""},
		{[]string{"http://10.0.0.5:2379"}, false, "not on loopback"},
		{[]string{"https://etcd-0:2379"}, false, "--etcd-ca, --etcd-cert, --etcd-key"},
		{[]string{"http://127.0.0.1:2379"}, true, "use https://127.0.0.1:2379"},
		{[]string{"https://etcd-0:2379", "http://127.0.0.1:2379"}, true, "mix http and https"},
		{[]string{"etcd-0:2379"}, false, "want http(s)://HOST:PORT"},
		{[]string{"https://etcd-0"}, true, "want http(s)://HOST:PORT"},
	} {
		err := control.CheckEtcdEndpoints(tc.endpoints, tc.tls)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckEtcdEndpoints(%v, tls %v) = %v; want accepted", tc.endpoints, tc.tls, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckEtcdEndpoints(%v, tls %v) = %v; want an error saying %q", tc.endpoints, tc.tls, err, tc.want)
		}
	}
}
