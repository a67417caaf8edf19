package upstream

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
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
	issue := fmt.Sprintf("'lehr certs issue --dir DIR --role distributor --zone %s --name ID'", zone)
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

// ErrUntrusted is wrapped by the end of a connection the client closed
// because the distributor sent what it does not trust (wire.CodeUntrusted):
// an update whose signature or goal does not verify, or no signed goals.
var ErrUntrusted = errors.New("upstream: the distributor sent what this agent does not trust")

// Refused reports whether err, the end of a connection attempt or of a
// session, is a refusal — one side turned the other away, and an attempt
// at once would be turned away again: the distributor closed (or said
// Goodbye) with wire.CodeUnauthorized, CodeWrongZone,
// CodeUnsupportedVersion, CodeProtocolViolation, CodeFrameTooLarge,
// CodeReplaced or CodeOverloaded, or the agent refused the distributor
// (ErrDistributorIdentity, ErrUntrusted, a frame it could not accept).
// The client backs off exponentially after every refusal, even one that
// ends an established session.
func Refused(err error) bool {
	var fe *wire.FrameError
	if errors.Is(err, ErrDistributorIdentity) || errors.Is(err, ErrUntrusted) || errors.As(err, &fe) {
		return true
	}
	code, ok := refusalCode(err)
	return ok && refusalCodes[code] != ""
}

// refusalCodes are the codes by which a distributor turns an agent away,
// and what the agent's operator should do about each.
var refusalCodes = map[quic.ApplicationErrorCode]string{
	wire.CodeUnauthorized:       "the distributor does not accept this host's certificate: it must name spiffe://lehr/host/<zone>/<host id> with this agent's --zone and --host-id, signed by the CA the distributor trusts ('lehr certs issue --dir DIR --role host --zone ZONE --name HOST')",
	wire.CodeWrongZone:          "the distributor serves another zone: check the agent's --zone and --distributors",
	wire.CodeUnsupportedVersion: "the agent and the distributor speak no protocol version in common: upgrade the older one",
	wire.CodeProtocolViolation:  "the distributor refused a frame (the reason says which): a bug, or an agent and a distributor too many releases apart",
	wire.CodeFrameTooLarge:      "the distributor refused a frame over its limit: an agent and a distributor too many releases apart",
	wire.CodeReplaced:           "a newer connection with this host id replaced this one: is a second agent running with the same host id or certificate?",
	wire.CodeOverloaded:         "the distributor admits no more agents now: add distributors to the zone or raise its limits",
}

// refusalCode returns the code of a close or Goodbye the distributor sent.
func refusalCode(err error) (quic.ApplicationErrorCode, bool) {
	var bye *wire.GoodbyeError
	if errors.As(err, &bye) {
		return bye.Code, true
	}
	var app *quic.ApplicationError
	if errors.As(err, &app) && app.Remote {
		return app.ErrorCode, true
	}
	return 0, false
}

// refusalAdvice says what to do about a refusal by the distributor ("" for
// anything else).
func refusalAdvice(err error) string {
	if code, ok := refusalCode(err); ok {
		return refusalCodes[code]
	}
	return ""
}
