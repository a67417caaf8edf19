package service

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/peercred"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Fleet-wide changes (docs/operations.md, "Security model"). A zone is
// the fleet's, not a domain's: every rollout waits on the zones it
// reaches, so registering one is a fleet admin's act. May register a zone:
//
//   - a user named in Options.FleetAdmins (a user certificate, or a local
//     user on control's unix socket);
//   - the local user control runs as, and root, on control's unix socket:
//     whoever runs control can name the first fleet admin, and holds its
//     data anyway;
//   - a distributor registering its own zone (WatchGoals create_zone, with
//     a distributor certificate of that zone);
//   - a control replica, and in-process callers;
//   - in dev mode, a caller control cannot identify (lehr dev, test beds).
//
// Everyone else is refused with PERMISSION_DENIED saying how fleet admins
// are named.

// FleetAdminsFlag is how an operator names fleet admins, quoted by every
// refusal.
const FleetAdminsFlag = "lehr control --fleet-admins NAME,… (the systemd unit: LEHR_FLEET_ADMINS in /etc/lehr/control.env)"

// mayCreateZone returns nil if the caller of ctx may register zone, else
// the PERMISSION_DENIED error to answer.
func (s *Service) mayCreateZone(ctx context.Context, zone string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil // in-process
	}
	var who string
	switch ai := p.AuthInfo.(type) {
	case peercred.Info:
		if ai.UID == 0 || int64(ai.UID) == int64(os.Getuid()) || slices.Contains(s.fleetAdmins, ai.User) {
			return nil
		}
		who = fmt.Sprintf("local user %q", ai.User)
	case credentials.TLSInfo:
		id, has, err := tlsconfig.PeerRole(ai.State)
		switch {
		case len(ai.State.VerifiedChains) == 0:
			if s.devMode {
				return nil
			}
			who = "a caller without a client certificate"
		case err != nil || !has:
			who = fmt.Sprintf("client certificate %q", tlsconfig.PeerIdentity(ai.State))
		case id.Role == tlsconfig.RoleControl,
			id.Role == tlsconfig.RoleDistributor && id.Zone == zone,
			id.Role == tlsconfig.RoleUser && slices.Contains(s.fleetAdmins, id.Name):
			return nil
		case id.Role == tlsconfig.RoleUser:
			who = fmt.Sprintf("user %q", id.Name)
		default:
			who = id.String()
		}
	default:
		if s.devMode {
			return nil
		}
		who = "a caller control cannot identify"
	}
	admins := "no fleet admins are named"
	if len(s.fleetAdmins) > 0 {
		admins = "only the fleet admins (" + strings.Join(s.fleetAdmins, ", ") + ") may"
	}
	return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
		"%s may not create zone %q: zones are fleet-wide (every rollout reaches every zone), and %s. "+
			"Name fleet admins with '%s'; the user control runs as, or root, may always create zones on control's unix socket "+
			"('lehr --control unix:///run/lehr-control/control.sock zones create %s'), and a distributor with a certificate of the zone registers it on first contact",
		who, zone, admins, FleetAdminsFlag, zone)
}
