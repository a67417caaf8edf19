// Package tlsconfig builds the TLS configurations every Lehr daemon and
// client uses from PEM files — TLS 1.3 only, mutual TLS where a CA is given
// — reads a peer's identity from its verified certificate, and holds the
// one rule for plaintext: allowed on loopback addresses only.
//
// It loads certificates; it never creates them (that is internal/pki, the
// CA tooling behind "lehr certs"). Any Lehr package may import tlsconfig;
// it imports nothing of Lehr's.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// ErrInvalid is wrapped by the errors for a file that holds no usable PEM
// certificate.
var ErrInvalid = errors.New("tlsconfig: invalid certificate file")

// Server returns a server configuration: TLS 1.3 or later, presenting
// certFile/keyFile. With caFile set it requires a client certificate that
// chains to a CA in caFile and is valid for client authentication (mutual
// TLS); with caFile empty clients are not asked for one. Callers add
// NextProtos (e.g. for QUIC or gRPC) as they need.
func Server(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server TLS: load key pair %s: %w", certFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if caFile == "" {
		return cfg, nil
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("server TLS: %w", err)
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	return cfg, nil
}

// Client returns a client configuration for mutual TLS: TLS 1.3 or later,
// presenting certFile/keyFile, and trusting only servers whose certificate
// chains to the CA in caFile, is valid for server authentication and names
// serverName (a DNS name or IP address; empty means the host being
// dialled).
func Client(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client TLS: load key pair %s: %w", certFile, err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("client TLS: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
	}, nil
}

// PeerIdentity returns the CommonName of the peer's verified leaf
// certificate, or "" if the peer presented none or it was not verified.
// On a server it names the client; on a client it names the server. It is
// for messages only: a peer is who its Lehr identity says (PeerRole),
// whatever its CommonName.
func PeerIdentity(state tls.ConnectionState) string {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return ""
	}
	return state.VerifiedChains[0][0].Subject.CommonName
}

// IsLoopback reports whether addr ("host:port") names a loopback address
// ("localhost", 127.0.0.0/8 or ::1): the only addresses Lehr serves or
// dials in plaintext.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loadPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("load CA certificates: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("load CA certificates %s: %w: no PEM certificates", caFile, ErrInvalid)
	}
	return pool, nil
}
