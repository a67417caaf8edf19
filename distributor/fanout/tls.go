package fanout

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
)

// errIdentity is wrapped by identity check failures.
var errIdentity = errors.New("fanout: the client certificate does not allow this agent")

// checkIdentity verifies, when the agent presented a verified certificate
// (mutual TLS), that it is a host's certificate for this zone naming the
// host id the agent announces (docs/operations.md, "Security model"): a
// certificate without a Lehr identity, a distributor's or a user's, or a
// host's of another zone is refused. Without a client certificate
// (ClientAuth off, loopback test beds) the announced id is taken as is.
func checkIdentity(state tls.ConnectionState, zone, host string) error {
	if len(state.VerifiedChains) == 0 {
		return nil
	}
	id, ok, err := tlsconfig.PeerRole(state)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", errIdentity, err)
	case !ok:
		return fmt.Errorf("%w: the certificate (CN %q) carries no Lehr identity; issue the host's with 'lehr certs issue --dir DIR --role host --zone %s --name %s'",
			errIdentity, tlsconfig.PeerIdentity(state), zone, host)
	case id.Role != tlsconfig.RoleHost:
		return fmt.Errorf("%w: the certificate is a %s's (%s), not a host's", errIdentity, id.Role, id)
	case id.Zone != zone:
		return fmt.Errorf("%w: the certificate is host %s's in zone %q; this distributor serves %q", errIdentity, id.Name, id.Zone, zone)
	case id.Name != host:
		return fmt.Errorf("%w: Hello.host_id is %q, the certificate names host %q", errIdentity, host, id.Name)
	}
	return nil
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
	if k, ok := wire.KeyFromCertificate(cfg, "lehr distributor QUIC stateless reset key v1"); ok {
		key := quic.StatelessResetKey(k)
		return &key
	}
	var key quic.StatelessResetKey
	if _, err := rand.Read(key[:]); err != nil {
		panic(fmt.Sprintf("fanout: no randomness for a reset key: %v", err))
	}
	return &key
}
