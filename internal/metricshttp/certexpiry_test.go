package metricshttp_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/metricshttp/metricstest"
)

// selfSigned returns a certificate valid until notAfter, as
// tls.X509KeyPair would load it (without Leaf when noLeaf).
func selfSigned(t *testing.T, notAfter time.Time, noLeaf bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    notAfter.Add(-48 * time.Hour),
		NotAfter:     notAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	if !noLeaf {
		if c.Leaf, err = x509.ParseCertificate(der); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestRegisterCertificateExpiry(t *testing.T) {
	metricshttp.ExposeMetadata()
	early := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	late := early.Add(90 * 24 * time.Hour)
	set := metrics.NewSet()
	for _, r := range []struct {
		use string
		cfg *tls.Config
	}{
		{"server", &tls.Config{Certificates: []tls.Certificate{selfSigned(t, late, false), selfSigned(t, early, false)}}},
		{"control_client", &tls.Config{Certificates: []tls.Certificate{selfSigned(t, late, true)}}}, // Leaf not parsed yet
		{"client", nil},                // plaintext: no series
		{"etcd_client", &tls.Config{}}, // no certificate: no series
	} {
		if err := metricshttp.RegisterCertificateExpiry(set, r.use, r.cfg); err != nil {
			t.Fatalf("RegisterCertificateExpiry(%s): %v", r.use, err)
		}
	}
	var buf bytes.Buffer
	metricshttp.Write(&buf, set, metricshttp.TLSHelp)
	got := buf.String()
	for _, want := range []string{
		"# HELP lehr_tls_certificate_expiry_timestamp_seconds When the certificate",
		"# TYPE lehr_tls_certificate_expiry_timestamp_seconds gauge\n",
		fmt.Sprintf(`lehr_tls_certificate_expiry_timestamp_seconds{use="server"} %d`+"\n", early.Unix()), // the earliest of two
		fmt.Sprintf(`lehr_tls_certificate_expiry_timestamp_seconds{use="control_client"} %d`+"\n", late.Unix()),
	} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("/metrics lacks %q; got:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{`use="client"`, `use="etcd_client"`} {
		if bytes.Contains(buf.Bytes(), []byte(unwanted)) {
			t.Errorf("/metrics has a series %s for a configuration without a certificate", unwanted)
		}
	}
	metricstest.Check(t, buf.Bytes())

	bad := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{[]byte("not DER")}}}}
	if err := metricshttp.RegisterCertificateExpiry(metrics.NewSet(), "server", bad); err == nil {
		t.Error("RegisterCertificateExpiry of an unparsable certificate: nil error")
	}
}
