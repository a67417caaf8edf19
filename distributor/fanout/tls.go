package fanout

import (
	"crypto/tls"
	"errors"
	"fmt"

	"lehr.dev/lehr/internal/tlsconfig"
)

// errIdentity is wrapped by identity check failures.
var errIdentity = errors.New("fanout: host id does not match the client certificate")

// checkIdentity verifies, when the agent presented a verified certificate,
// that the host id it announces is the certificate's identity
// (pki.PeerIdentity). Without one (ClientAuth off) the announced id is
// taken as is.
func checkIdentity(state tls.ConnectionState, host string) error {
	id := tlsconfig.PeerIdentity(state)
	if id == "" || id == host {
		return nil
	}
	return fmt.Errorf("%w: Hello.host_id is %q, the certificate names %q", errIdentity, host, id)
}
