package control_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestMutualTLSAuthor checks that under mutual TLS the client certificate's
// Lehr identity is the author of a publish, and that asserting another
// author is refused, in dev mode too (TestOneIdentityFromTheURISAN: its
// CommonName does not count).
func TestMutualTLSAuthor(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	clientCert := issue(t, ca, caKey, "deploy-bot", false)
	srv := controltest.StartControl(t, control.Options{
		// Not loopback-only once TLS is on; still bind loopback in tests.
		Listen: "127.0.0.1:0",
		TLS:    serverTLS,
	}, mtlsDial(pool, clientCert))
	cl := srv.Client
	// An author asserted in metadata or the request is refused.
	if _, err := cl.CreateDomain(metadata.AppendToOutgoingContext(testCtx(t), service.AuthorMetadataKey, "mallory"),
		&lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "sec"}}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.PermissionDenied {
		t.Fatalf("CreateDomain over mTLS as mallory: %v; want PERMISSION_DENIED", err)
	}
	if _, err := cl.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "sec"}}); err != nil {
		t.Fatalf("CreateDomain over mTLS: %v", err)
	}
	if _, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{
		Namespace: "sec/a", Author: "mallory", Properties: []*lehrpb.Property{prop("k", "", "v")},
	}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.PermissionDenied {
		t.Fatalf("Publish over mTLS as mallory: %v; want PERMISSION_DENIED", err)
	}
	resp, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{
		Namespace: "sec/a", Author: "deploy-bot", Properties: []*lehrpb.Property{prop("k", "", "v")},
	})
	if err != nil {
		t.Fatalf("Publish over mTLS: %v", err)
	}
	v := resp.GetVersion()
	if v.GetAuthor() != "deploy-bot" || !strings.HasPrefix(v.GetTransportIdentity(), "cert:serial=") {
		t.Errorf("author %q, transport identity %q; want deploy-bot from the client certificate", v.GetAuthor(), v.GetTransportIdentity())
	}
	d, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "sec"})
	if err != nil {
		t.Fatalf("GetDomain: %v", err)
	}
	if d.GetCreatedBy() != "deploy-bot" {
		t.Errorf("domain created_by = %q, want deploy-bot", d.GetCreatedBy())
	}

	// A client without a certificate is refused.
	anon := lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool)))
	if _, err := anon.ListDomains(testCtx(t), &lehrpb.ListDomainsRequest{}); err == nil {
		t.Errorf("a client without a certificate was served; want the handshake refused")
	}
}

// mtlsSetup makes a CA and control's server configuration requiring
// client certificates of it, and the pool clients trust control with.
func mtlsSetup(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey, *tls.Config, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t)
	serverCert := issue(t, ca, caKey, "control", true)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(dir, "server.pem"), "CERTIFICATE", serverCert.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(serverCert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "server.key"), "PRIVATE KEY", keyDER)
	serverTLS, err := tlsconfig.Server(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return ca, caKey, serverTLS, pool
}

// mtlsDial is the dial option of a TLS 1.3 client of control trusting
// pool and presenting certs (none: a client without a certificate).
func mtlsDial(pool *x509.CertPool, certs ...tls.Certificate) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "127.0.0.1", Certificates: certs,
	}))
}

// userCert issues a client certificate for user name (identity
// spiffe://lehr/user/<name>).
func userCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string) tls.Certificate {
	t.Helper()
	return issueID(t, ca, caKey, name, false, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI())
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lehr test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) tls.Certificate {
	t.Helper()
	var id *url.URL
	if !server {
		id = tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: cn}.URI()
	}
	return issueID(t, ca, caKey, cn, server, id)
}

// issueID issues a certificate with CommonName cn and, if id is set, that
// identity URI SAN.
func issueID(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool, id *url.URL) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if id != nil {
		tmpl.URIs = []*url.URL{id}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Who may call what (issue 12): the control API decides from the client
// certificate's Lehr identity. A host certificate calls nothing, a
// distributor only the distribution methods for its own zone, a user
// everything but ReportZoneStatus, a certificate without a Lehr identity
// nothing — each refusal PERMISSION_DENIED naming the identity.
func TestRolesFromClientCertificates(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	admin := issue(t, ca, caKey, "admin", false)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"admin"}}, mtlsDial(pool, admin))
	if _, err := srv.Client.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Publishers: []string{"alice"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	client := func(cn string, id *url.URL) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, issueID(t, ca, caKey, cn, false, id))))
	}
	callers := map[string]lehrpb.ControlClient{
		"user":          client("alice", tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "alice"}.URI()),
		"host":          client("web-1", tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: "zone-a", Name: "web-1"}.URI()),
		"distributor-a": client("dist-a", tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "dist-a"}.URI()),
		"distributor-b": client("dist-b", tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-b", Name: "dist-b"}.URI()),
		"no identity":   client("legacy", nil),
	}
	actions := map[string]func(cl lehrpb.ControlClient) error{
		"publish": func(cl lehrpb.ControlClient) error {
			_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
			return err
		},
		"list domains": func(cl lehrpb.ControlClient) error {
			_, err := cl.ListDomains(testCtx(t), &lehrpb.ListDomainsRequest{})
			return err
		},
		"report zone-a": func(cl lehrpb.ControlClient) error {
			_, err := cl.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dist-a"})
			return err
		},
		"goals of zone-a": func(cl lehrpb.ControlClient) error {
			_, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: "zone-a"})
			return err
		},
		"watch goals of zone-a": func(cl lehrpb.ControlClient) error {
			st, err := cl.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "zone-a"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	allowed := map[string][]string{
		"user":          {"publish", "list domains", "goals of zone-a", "watch goals of zone-a"},
		"distributor-a": {"report zone-a", "goals of zone-a", "watch goals of zone-a"},
	}
	for who, cl := range callers {
		for what, call := range actions {
			t.Run(who+"/"+what, func(t *testing.T) {
				err := call(cl)
				if slices.Contains(allowed[who], what) {
					if err != nil {
						t.Errorf("refused: %v", err)
					}
					return
				}
				if e := apierror.FromError(err); err == nil || e.Code != codes.PermissionDenied || e.Message == "" {
					t.Errorf("err %v; want PERMISSION_DENIED saying why", err)
				}
			})
		}
	}
}

// Control's /metrics says when the certificates it presents expire — to
// its clients and to an external etcd — for the alerts of
// deploy/prometheus (LehrCertificateExpiresSoon).
func TestCertificateExpiryMetrics(t *testing.T) {
	ca, caKey, serverTLS, _ := mtlsSetup(t)
	etcdCert := issue(t, ca, caKey, "control-etcd", false)
	c, err := control.New(control.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLS: serverTLS,
		EtcdEndpoints: []string{"https://127.0.0.1:2379"}, EtcdTLS: &tls.Config{Certificates: []tls.Certificate{etcdCert}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	c.Metrics().WritePrometheus(&buf)
	for use, cert := range map[string]tls.Certificate{"server": serverTLS.Certificates[0], "etcd_client": etcdCert} {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		want := `lehr_tls_certificate_expiry_timestamp_seconds{use="` + use + `"} ` + strconv.FormatInt(leaf.NotAfter.Unix(), 10) + "\n"
		if !strings.Contains(buf.String(), want) {
			t.Errorf("control's metrics lack %q:\n%s", want, buf.String())
		}
	}
}
