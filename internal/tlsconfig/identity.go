package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Lehr's identity scheme (docs/operations.md, "Security model"): a
// certificate names its holder's role, and for hosts and distributors its
// zone, in one URI SAN under the trust domain "lehr":
//
//	spiffe://lehr/host/<zone>/<host id>         an agent, only as that host in that zone
//	spiffe://lehr/distributor/<zone>/<id>       a distributor, serving only its zone
//	spiffe://lehr/user/<name>                   a person or tool using the control API
//	spiffe://lehr/control/<name>                a control replica
//
// The certificate's CommonName is the name too, for logs and older tools;
// it is never an identity: who a peer is comes from the URI SAN alone
// (PeerRole), so a CA-signed certificate whose CommonName names someone
// else, or that has none, is who its URI says.

// TrustDomain is the trust domain of Lehr identity URIs.
const TrustDomain = "lehr"

// Roles of Lehr identities.
const (
	RoleHost        = "host"
	RoleDistributor = "distributor"
	RoleUser        = "user"
	RoleControl     = "control"
)

// Identity is who a certificate says its holder is.
type Identity struct {
	Role string
	// Zone is set for hosts and distributors only.
	Zone string
	// Name is the host id, distributor id, user or replica name.
	Name string
}

// ErrIdentity is wrapped by errors about identity URIs.
var ErrIdentity = errors.New("tlsconfig: invalid identity")

var (
	labelRE = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)
)

// Check reports whether id is well formed: a known role, a zone (a label)
// exactly for hosts and distributors, and a name of 1 to 64 letters,
// digits, '.', '_', '@' and '-'.
func (id Identity) Check() error {
	switch id.Role {
	case RoleHost, RoleDistributor:
		if !labelRE.MatchString(id.Zone) {
			return fmt.Errorf("%w: a %s's zone %q: want 1-63 bytes of a-z, 0-9 and '-', starting with a letter", ErrIdentity, id.Role, id.Zone)
		}
	case RoleUser, RoleControl:
		if id.Zone != "" {
			return fmt.Errorf("%w: a %s has no zone (got %q)", ErrIdentity, id.Role, id.Zone)
		}
	default:
		return fmt.Errorf("%w: role %q: want host, distributor, user or control", ErrIdentity, id.Role)
	}
	if !nameRE.MatchString(id.Name) {
		return fmt.Errorf("%w: name %q: want 1-64 bytes of letters, digits, '.', '_', '@' and '-'", ErrIdentity, id.Name)
	}
	return nil
}

// URI returns id's URI SAN.
func (id Identity) URI() *url.URL {
	p := "/" + id.Role
	if id.Zone != "" {
		p += "/" + id.Zone
	}
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: p + "/" + id.Name}
}

// String returns the URI form.
func (id Identity) String() string { return id.URI().String() }

// ParseIdentity reads a Lehr identity URI. A URI of another scheme or
// trust domain is not Lehr's: ok is false and err nil.
func ParseIdentity(u *url.URL) (id Identity, ok bool, err error) {
	if u.Scheme != "spiffe" || u.Host != TrustDomain {
		return Identity{}, false, nil
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	switch {
	case len(parts) == 3 && (parts[0] == RoleHost || parts[0] == RoleDistributor):
		id = Identity{Role: parts[0], Zone: parts[1], Name: parts[2]}
	case len(parts) == 2:
		id = Identity{Role: parts[0], Name: parts[1]}
	default:
		return Identity{}, true, fmt.Errorf("%w: %s: want spiffe://lehr/host/<zone>/<id>, …/distributor/<zone>/<id>, …/user/<name> or …/control/<name>", ErrIdentity, u)
	}
	if err := id.Check(); err != nil {
		return Identity{}, true, fmt.Errorf("%s: %w", u, err)
	}
	return id, true, nil
}

// PeerRole returns the Lehr identity of the peer's verified leaf
// certificate. ok is false when the peer presented no verified certificate
// or it carries no Lehr identity; err is set when it carries a malformed
// one, or more than one.
func PeerRole(state tls.ConnectionState) (id Identity, ok bool, err error) {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return Identity{}, false, nil
	}
	return CertRole(state.VerifiedChains[0][0])
}

// CertRole returns the Lehr identity cert carries, as PeerRole does for a
// verified peer; a daemon uses it on its own certificate (a distributor
// reports to control under its certificate's id).
func CertRole(cert *x509.Certificate) (id Identity, ok bool, err error) {
	for _, u := range cert.URIs {
		got, lehr, perr := ParseIdentity(u)
		switch {
		case !lehr:
			continue
		case perr != nil:
			return Identity{}, false, perr
		case ok:
			return Identity{}, false, fmt.Errorf("%w: the certificate names two Lehr identities, %s and %s", ErrIdentity, id, got)
		}
		id, ok = got, true
	}
	return id, ok, nil
}
