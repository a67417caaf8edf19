package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// ErrRefused is matched by Diagnose's errors: TLS between a client and a
// server fails, one refusing the other's certificate.
var ErrRefused = errors.New("tlsconfig: TLS refused")

// RefusedError is Diagnose's error; it matches ErrRefused.
type RefusedError struct {
	// Reason says who refused what, and what to do.
	Reason string
}

func (e *RefusedError) Error() string { return ErrRefused.Error() + ": " + e.Reason }

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// Diagnose dials addr ("host:port", TCP) with cfg, offering nextProto in
// ALPN ("h2" for gRPC), and says why TLS fails between them: the server
// refuses this client's certificate — none given, expired, not yet valid,
// or one it does not trust (its TLS alert, and what the certificate is) —
// or the client refuses the server's. A TLS 1.3 server refuses a client's
// certificate after the client's handshake is done, in its first answer,
// so a client (gRPC) that writes first sees only a broken pipe; Diagnose
// reads first. It returns nil when the handshake and a first read work, or
// nothing says TLS is at fault (the server is down, the read times out).
func Diagnose(ctx context.Context, addr string, cfg *tls.Config, nextProto string) error {
	cfg = cfg.Clone()
	if nextProto != "" {
		cfg.NextProtos = []string{nextProto}
	}
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			issuer := ""
			if len(verr.UnverifiedCertificates) > 0 {
				issuer = fmt.Sprintf(" (issued by %q)", verr.UnverifiedCertificates[0].Issuer.CommonName)
			}
			return refused("this client does not trust the server's certificate%s: %v; give the CA that issued it as the CA file", issuer, verr.Err)
		}
		return refusal(err, cfg)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	_, err = conn.Read(make([]byte, 1))
	return refusal(err, cfg)
}

// refusal explains err when it is the server's TLS alert.
func refusal(err error, cfg *tls.Config) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		return nil
	}
	alert := strings.TrimPrefix(op.Err.Error(), "tls: ")
	leaf := clientLeaf(cfg)
	now := time.Now()
	switch {
	case leaf == nil:
		return refused("the server requires a client certificate and none was given (it answered %q)", alert)
	case now.After(leaf.NotAfter):
		return refused("the client certificate %s expired at %s (the server answered %q); issue a new one", describe(leaf), leaf.NotAfter.UTC().Format(time.RFC3339), alert)
	case now.Before(leaf.NotBefore):
		return refused("the client certificate %s is valid only from %s (the server answered %q); check this machine's clock", describe(leaf), leaf.NotBefore.UTC().Format(time.RFC3339), alert)
	}
	return refused("the server does not accept the client certificate %s, issued by %q (it answered %q); use one issued by a CA the server trusts for clients", describe(leaf), leaf.Issuer.CommonName, alert)
}

// clientLeaf is the certificate cfg presents, nil when none.
func clientLeaf(cfg *tls.Config) *x509.Certificate {
	if len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return nil
	}
	if l := cfg.Certificates[0].Leaf; l != nil {
		return l
	}
	l, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return nil
	}
	return l
}

// describe names a certificate by its CommonName and Lehr identity.
func describe(c *x509.Certificate) string {
	s := fmt.Sprintf("CN %q", c.Subject.CommonName)
	for _, u := range c.URIs {
		if id, ok, err := ParseIdentity(u); ok && err == nil {
			s += " (" + id.String() + ")"
		}
	}
	return s
}
