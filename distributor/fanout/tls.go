package fanout

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"
	"lehr.dev/lehr/internal/tlsconfig"
)

// errIdentity is wrapped by identity check failures.
var errIdentity = errors.New("fanout: host id does not match the client certificate")

// checkIdentity verifies, when the agent presented a verified certificate,
// that the host id it announces is the certificate's identity
// (tlsconfig.PeerIdentity). Without one (ClientAuth off) the announced id is
// taken as is.
func checkIdentity(state tls.ConnectionState, host string) error {
	id := tlsconfig.PeerIdentity(state)
	if id == "" || id == host {
		return nil
	}
	return fmt.Errorf("%w: Hello.host_id is %q, the certificate names %q", errIdentity, host, id)
}

// resetKey derives the QUIC stateless-reset key from the private key of the
// server certificate: the same certificate gives the same key in every
// process, so a distributor restarted on the same address resets the
// connections its predecessor left at once — the agents accept the reset
// because it carries the token the old process handed out — and nobody
// without the private key can forge one. A configuration without a
// certificate, or with a key that does not marshal, gets a random key
// (resets then only help within one process).
func resetKey(cfg *tls.Config) *quic.StatelessResetKey {
	var key quic.StatelessResetKey
	if cfg != nil && len(cfg.Certificates) > 0 && cfg.Certificates[0].PrivateKey != nil {
		if der, err := x509.MarshalPKCS8PrivateKey(cfg.Certificates[0].PrivateKey); err == nil {
			h := sha256.New()
			h.Write([]byte("lehr distributor QUIC stateless reset key v1\x00"))
			h.Write(der)
			copy(key[:], h.Sum(nil))
			return &key
		}
	}
	if _, err := rand.Read(key[:]); err != nil {
		panic(fmt.Sprintf("fanout: no randomness for a reset key: %v", err))
	}
	return &key
}
