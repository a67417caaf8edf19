// Package pki is Lehr's small certificate authority for mutual TLS, behind
// "lehr certs init|issue", "lehr dev" and the test and benchmark harnesses:
// a CA kept as two PEM files in a directory, and leaf certificates for
// servers (control, distributors) and clients (agents, distributors
// dialing control, operators).
//
// All keys are ECDSA P-256. Private keys are written PKCS #8 PEM with mode
// 0600, certificates with mode 0644, each by temp file, fsync and rename so
// a crash never leaves a torn file.
//
// It is for development, tests and fleets that want Lehr to issue their
// certificates; deployments may bring their own CA. Daemons never import
// pki: they load certificates with internal/tlsconfig.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names inside a CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// MaxNameLen is the longest certificate name (CommonName) allowed, the
// RFC 5280 upper bound.
const MaxNameLen = 64

// clockSkew backdates NotBefore so a peer whose clock is a little behind
// still accepts a fresh certificate.
const clockSkew = 5 * time.Minute

// Sentinel errors, wrapped by the errors of this package.
var (
	// ErrIncompleteCA is returned when a CA directory holds only one of
	// ca.crt and ca.key.
	ErrIncompleteCA = errors.New("pki: incomplete CA directory")
	// ErrInvalid is returned for a bad argument: name, kind, hosts or
	// validity.
	ErrInvalid = errors.New("pki: invalid argument")
)

// Kind says what a leaf certificate may be used for.
type Kind int

// Kinds of leaf certificates.
const (
	Server Kind = iota + 1 // TLS server authentication only
	Client                 // TLS client authentication only
	Both                   // server and client authentication
)

func (k Kind) String() string {
	switch k {
	case Server:
		return "server"
	case Client:
		return "client"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

func (k Kind) extKeyUsage() []x509.ExtKeyUsage {
	switch k {
	case Server:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case Client:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case Both:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return nil
}

// CA is a certificate authority that signs leaf certificates.
// Its methods are safe for concurrent use as long as Now is not changed.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert in PEM form, as in ca.crt.
	CertPEM []byte
	// Now returns the current time for NotBefore and NotAfter of issued
	// certificates. Nil means time.Now. Tests set it to mint certificates
	// that are already expired or not yet valid.
	Now func() time.Time

	key *ecdsa.PrivateKey
}

func (ca *CA) now() time.Time {
	if ca.Now != nil {
		return ca.Now()
	}
	return time.Now()
}

// Pool returns a certificate pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// NewCA loads the CA in dir if ca.crt and ca.key are both there, and
// otherwise creates one: a self-signed ECDSA P-256 certificate with the
// given CommonName, valid from now for validity, written to dir (created
// with mode 0700 if missing). commonName and validity are ignored when the
// CA is loaded. A directory with only one of the two files is an error
// wrapping ErrIncompleteCA: delete the leftover file or restore the other.
func NewCA(dir, commonName string, validity time.Duration) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certOK, err := exists(certPath)
	if err != nil {
		return nil, err
	}
	keyOK, err := exists(keyPath)
	if err != nil {
		return nil, err
	}
	switch {
	case certOK && keyOK:
		return LoadCA(dir)
	case certOK:
		return nil, fmt.Errorf("%w %s: %s without %s", ErrIncompleteCA, dir, CACertFile, CAKeyFile)
	case keyOK:
		return nil, fmt.Errorf("%w %s: %s without %s", ErrIncompleteCA, dir, CAKeyFile, CACertFile)
	}
	if err := checkName(commonName); err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	if validity <= 0 {
		return nil, fmt.Errorf("create CA in %s: %w: validity %v, want > 0", dir, ErrInvalid, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("create CA in %s: generate key: %w", dir, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Lehr development CA"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA in %s: sign certificate: %w", dir, err)
	}
	certPEM, keyPEM, err := encode(der, key)
	if err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	// Key first: a crash in between leaves ca.key alone, which NewCA
	// reports instead of silently creating a second CA.
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("create CA in %s: parse certificate: %w", dir, err)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// LoadCA reads ca.crt and ca.key from dir and checks that they belong
// together and that the certificate is a CA.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA %s: %w: certificate is not a CA", certPath, ErrInvalid)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", keyPath, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("load CA %s: %w: %s does not match the certificate", dir, ErrInvalid, CAKeyFile)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// defaultHosts are the SANs of a leaf issued without hosts.
var defaultHosts = []string{"127.0.0.1", "::1", "localhost"}

// Issue signs a new leaf certificate with CommonName name for kind (which
// sets ExtKeyUsage), valid for validity from now but never past the CA's own
// expiry. Each of hosts becomes an IP SAN if it parses as an IP address and
// a DNS SAN otherwise; no hosts means 127.0.0.1, ::1 and localhost. It returns the
// certificate and its PKCS #8 private key, both PEM.
//
// name must be 1 to MaxNameLen bytes of ASCII letters, digits, '.', '_',
// '-' and '@', so it is also a safe file name and a readable identity.
func (ca *CA) Issue(name string, kind Kind, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.IssueURI(name, kind, hosts, nil, validity)
}

// IssueURI is Issue with a URI SAN: the identity URI of Lehr's roles
// (tlsconfig.Identity.URI), which distributors and control read to know
// what the holder may do. A nil uri adds none.
func (ca *CA) IssueURI(name string, kind Kind, hosts []string, uri *url.URL, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := checkName(name); err != nil {
		return nil, nil, fmt.Errorf("issue %q: %w", name, err)
	}
	if kind.extKeyUsage() == nil {
		return nil, nil, fmt.Errorf("issue %q: %w: kind %v, want Server, Client or Both", name, ErrInvalid, kind)
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("issue %q: %w: validity %v, want > 0", name, ErrInvalid, validity)
	}
	if len(hosts) == 0 {
		hosts = defaultHosts
	}
	var ips []net.IP
	var dns []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if h == "" || strings.ContainsAny(h, " \t\r\n/") {
			return nil, nil, fmt.Errorf("issue %q: %w: host %q is neither an IP address nor a DNS name", name, ErrInvalid, h)
		}
		dns = append(dns, h)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %q: generate key: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("issue %q: %w", name, err)
	}
	now := ca.now()
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           kind.extKeyUsage(),
		BasicConstraintsValid: true,
		IPAddresses:           ips,
		DNSNames:              dns,
	}
	if uri != nil {
		tmpl.URIs = []*url.URL{uri}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %q: sign certificate: %w", name, err)
	}
	certPEM, keyPEM, err = encode(der, key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %q: %w", name, err)
	}
	return certPEM, keyPEM, nil
}

// IssueFiles issues a certificate like Issue and writes it to dir as
// name.crt (mode 0644) and name.key (mode 0600), creating dir with mode
// 0700 if missing. It returns the two paths.
func (ca *CA) IssueFiles(dir, name string, kind Kind, hosts []string, validity time.Duration) (certFile, keyFile string, err error) {
	return ca.IssueURIFiles(dir, name, kind, hosts, nil, validity)
}

// IssueURIFiles is IssueFiles with a URI SAN (IssueURI).
func (ca *CA) IssueURIFiles(dir, name string, kind Kind, hosts []string, uri *url.URL, validity time.Duration) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := ca.IssueURI(name, kind, hosts, uri, validity)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("issue %q: %w", name, err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("issue %q: %w", name, err)
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("issue %q: %w", name, err)
	}
	return certFile, keyFile, nil
}

// checkName enforces the name grammar of Issue.
func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: name %q is %d bytes, want 1-%d", ErrInvalid, name, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == '@'
		if !ok {
			return fmt.Errorf("%w: name %q has byte %q at %d; want ASCII letters, digits, '.', '_', '-' and '@'", ErrInvalid, name, c, i)
		}
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: name %q starts with %q; want a letter, digit, '_' or '@'", ErrInvalid, name, name[0])
	}
	return nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode private key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	return certPEM, keyPEM, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM CERTIFICATE block", ErrInvalid)
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrInvalid)
	}
	var k any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%w: PEM block %q, want PRIVATE KEY", ErrInvalid, block.Type)
	}
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want ECDSA", ErrInvalid, k)
	}
	return ek, nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("pki: %w", err)
}

// writeFile writes data to path atomically with the given mode: temp file
// in the same directory, fsync, rename, fsync of the directory.
func writeFile(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
