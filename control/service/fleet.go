package service

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Fleet admins (docs/operations.md, "Security model") make fleet-wide
// changes: they create zones — every rollout waits on the zones it
// reaches, so a zone is the fleet's, not a domain's — and raise a
// domain's quotas above the server's defaults (quotas.go). A fleet admin
// is:
//
//   - an identity named in Options.FleetAdmins (identity.go: a user
//     certificate's name, "unix:<account>" for a local account on
//     control's unix socket, or a local account Options.LocalUsers maps
//     to a user named there);
//   - the local user control runs as, and root, on control's unix socket:
//     whoever runs control can name the first fleet admin, and holds its
//     data anyway;
//   - a control replica, and an in-process caller;
//   - in dev mode, a caller control cannot identify (lehr dev, test beds).
//
// Besides, a distributor may register its own zone (WatchGoals
// create_zone with a distributor certificate of that zone). Everyone
// else is refused with PERMISSION_DENIED saying how fleet admins are
// named.

// FleetAdminsFlag is how an operator names fleet admins, quoted by
// refusals.
const FleetAdminsFlag = "lehr control --fleet-admins NAME,… (a user certificate's name, or unix:ACCOUNT for a local account; the systemd unit: LEHR_FLEET_ADMINS in /etc/lehr/control.env)"

// fleetCaller is the caller of a call, as the fleet-admin rules see it.
type fleetCaller struct {
	admin bool
	// distributorOf is the zone of a caller with a distributor
	// certificate, else "".
	distributorOf string
	// who names a caller that is not a fleet admin, for a refusal.
	who string
}

// fleetCallerOf applies the rules above to the caller of ctx.
func (s *Service) fleetCallerOf(ctx context.Context) fleetCaller {
	c := callerOf(ctx)
	name, _ := s.identity(c)
	named := slices.Contains(s.fleetAdmins, name)
	switch c.kind {
	case kindInProcess:
		return fleetCaller{admin: true}
	case kindLocal:
		if c.local.UID == 0 || int64(c.local.UID) == int64(os.Getuid()) || named {
			return fleetCaller{admin: true}
		}
		return fleetCaller{who: fmt.Sprintf("local user %q", name)}
	case kindUnidentified:
		return fleetCaller{admin: s.devMode, who: "a caller control cannot identify (plaintext, or TLS without a client certificate)"}
	case kindBadCert:
		return fleetCaller{who: "a client certificate without a Lehr identity (" + c.transport + ")"}
	}
	switch c.cert.Role {
	case tlsconfig.RoleControl:
		return fleetCaller{admin: true}
	case tlsconfig.RoleUser:
		return fleetCaller{admin: named, who: fmt.Sprintf("user %q", name)}
	case tlsconfig.RoleDistributor:
		return fleetCaller{distributorOf: c.cert.Zone, who: name}
	}
	return fleetCaller{who: name}
}

// fleetAdmin reports whether the caller of ctx is a fleet admin.
func (s *Service) fleetAdmin(ctx context.Context) bool { return s.fleetCallerOf(ctx).admin }

// mayDeleteZone returns nil if the caller of ctx may delete zone — a
// fleet admin — else the PERMISSION_DENIED error to answer.
func (s *Service) mayDeleteZone(ctx context.Context, zone string) error {
	c := s.fleetCallerOf(ctx)
	if c.admin {
		return nil
	}
	return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
		"%s may not delete zone %q: zones are fleet-wide, and only fleet admins (%s) delete them; the user control runs as, or root, "+
			"may on control's unix socket ('lehr --control unix:///run/lehr-control/control.sock zones delete %s')",
		c.who, zone, FleetAdminsFlag, zone)
}

// mayCreateZone returns nil if the caller of ctx may register zone, else
// the PERMISSION_DENIED error to answer.
func (s *Service) mayCreateZone(ctx context.Context, zone string) error {
	c := s.fleetCallerOf(ctx)
	if c.admin || c.distributorOf != "" && c.distributorOf == zone {
		return nil
	}
	admins := "no fleet admins are named"
	if len(s.fleetAdmins) > 0 {
		admins = "only the fleet admins (" + strings.Join(s.fleetAdmins, ", ") + ") may"
	}
	return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
		"%s may not create zone %q: zones are fleet-wide (every rollout reaches every zone), and %s. "+
			"Name fleet admins with '%s'; the user control runs as, or root, may always create zones on control's unix socket "+
			"('lehr --control unix:///run/lehr-control/control.sock zones create %s'), and a distributor with a certificate of the zone registers it on first contact",
		c.who, zone, admins, FleetAdminsFlag, zone)
}
