package upstream

import (
	"crypto/tls"
	"errors"
	"fmt"

	"lehr.dev/lehr/internal/tlsconfig"
)

// ErrDistributorIdentity is wrapped by CheckDistributor's refusals: the
// peer is not a distributor of the agent's zone.
var ErrDistributorIdentity = errors.New("upstream: not a distributor of this agent's zone")

// CheckDistributor returns the Lehr identity of the distributor at the
// other end of a connection whose TLS state is state, or an error wrapping
// ErrDistributorIdentity that says what is wrong and what to do when it is
// not a distributor of zone: no verified certificate, a certificate
// without a Lehr identity, a host's, a user's or control's, or a
// distributor's of another zone (docs/operations.md, "Security model").
//
// It is the one decision: the agent's link (before it sends Hello, so an
// imposter never learns what the host subscribes to) and the simulated
// agent of agent/agenttest both make it.
func CheckDistributor(state tls.ConnectionState, zone string) (tlsconfig.Identity, error) {
	issue := fmt.Sprintf("'lehr certs issue --role distributor --zone %s --name ID'", zone)
	id, ok, err := tlsconfig.PeerRole(state)
	switch {
	case err != nil:
		return tlsconfig.Identity{}, fmt.Errorf("%w: its certificate: %w; reissue it with %s", ErrDistributorIdentity, err, issue)
	case len(state.VerifiedChains) == 0:
		return tlsconfig.Identity{}, fmt.Errorf("%w: it presented no certificate this agent verified (check the agent's CA file)", ErrDistributorIdentity)
	case !ok:
		return tlsconfig.Identity{}, fmt.Errorf("%w: its certificate (CN %q) carries no Lehr identity; a distributor's names spiffe://lehr/distributor/%s/<id>: reissue it with %s",
			ErrDistributorIdentity, tlsconfig.PeerIdentity(state), zone, issue)
	case id.Role != tlsconfig.RoleDistributor:
		return id, fmt.Errorf("%w: its certificate is a %s's (%s), not a distributor's: list only zone %s's distributors in the agent's --distributors",
			ErrDistributorIdentity, id.Role, id, zone)
	case id.Zone != zone:
		return id, fmt.Errorf("%w: its certificate is distributor %s's of zone %q (%s); this agent is in zone %q: list only zone %s's distributors in the agent's --distributors",
			ErrDistributorIdentity, id.Name, id.Zone, id, zone, zone)
	}
	return id, nil
}
