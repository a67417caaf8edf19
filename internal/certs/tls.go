package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ServerTLS returns a server configuration for mutual TLS: TLS 1.3 or
// later, presenting certFile/keyFile, and requiring a client certificate
// that chains to the CA in caFile and is valid for client authentication.
// Callers add NextProtos (e.g. for QUIC or gRPC) as they need.
func ServerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server TLS: load key pair %s: %w", certFile, err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("server TLS: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ClientTLS returns a client configuration for mutual TLS: TLS 1.3 or
// later, presenting certFile/keyFile, and trusting only servers whose
// certificate chains to the CA in caFile, is valid for server
// authentication and names serverName (a DNS name or IP address).
func ClientTLS(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
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
// On a server from ServerTLS it names the client; on a client from
// ClientTLS it names the server.
func PeerIdentity(state tls.ConnectionState) string {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return ""
	}
	return state.VerifiedChains[0][0].Subject.CommonName
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
