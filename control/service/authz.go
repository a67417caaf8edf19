package service

import (
	"context"
	"fmt"
	"path"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Roles and the control API (docs/operations.md, "Security model"). A
// caller with a verified client certificate is who the certificate's Lehr
// identity URI SAN says (tlsconfig.Identity; its CommonName is never
// read):
//
//   - a distributor may call only the distribution methods below, and those
//     that name a zone only for its own zone; it reports zone status only
//     under its certificate's id, and reads only the domains whose readers
//     admit its zone (readers.go);
//   - a user (and a control replica) may call everything except
//     ReportZoneStatus, which only distributors send;
//   - a host may call nothing: agents talk to distributors, never to control;
//   - a verified certificate without a Lehr identity is refused.
//
// Domain ACLs (acl.go) and the fleet-admin rule for creating zones
// (fleet.go) narrow what users may do further.
//
// A caller on control's unix socket is the local account its uid names
// (internal/peercred), identity "unix:<account>" (identity.go), with a
// user's rights. A caller control cannot
// identify — plaintext TCP on loopback, TLS without a client certificate —
// may only read, unless control runs in dev mode, where it may do
// anything under any asserted author (lehr dev, test beds).

// distributionMethods are what distributors call.
var distributionMethods = map[string]bool{
	"GetDomain":        true, // readers and outbound limits (fanout.DomainPolicy)
	"WatchGoals":       true,
	"GetGoals":         true,
	"FetchVersion":     true,
	"FetchDelta":       true,
	"ReportZoneStatus": true,
}

// zoned is a request that names a zone.
type zoned interface{ GetZone() string }

// Authorizer applies the rules above to every call.
type Authorizer struct {
	// DevMode lets callers control cannot identify change anything.
	DevMode bool
	// Socket is the unix socket control serves on besides TCP, if any:
	// a refusal of an unidentified caller names it.
	Socket string
}

// writes are the methods an unidentified caller may not call outside dev
// mode: the mutating ones, and the distributors' zone reports.
func writes(method string) bool { return auditedMethods[method] || method == "ReportZoneStatus" }

// authorize decides whether the caller of ctx may call the Control method
// fullMethod with req (nil for a stream whose request is not read yet).
func (a Authorizer) authorize(ctx context.Context, fullMethod string, req any) error {
	method := path.Base(fullMethod)
	deny := func(format string, args ...any) error {
		return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "", format, args...)
	}
	c := callerOf(ctx)
	switch c.kind {
	case kindInProcess:
		return nil
	case kindLocal:
		if method == "ReportZoneStatus" {
			return deny("local user %s: only distributors report zone status", c.local)
		}
		return nil
	case kindUnidentified:
		if !a.DevMode && writes(method) {
			socket := "control's unix socket (it serves one with --socket PATH: 'lehr --control unix://PATH COMMAND …')"
			if a.Socket != "" {
				socket = fmt.Sprintf("control's unix socket ('lehr --control unix://%s COMMAND …')", a.Socket)
			}
			return deny("%s: control cannot tell who this caller is (plaintext, or TLS without a client certificate), so it may only read. "+
				"Connect over %s, where you act as your local account (unix:<account>), or with a client certificate "+
				"('lehr certs issue --dir DIR --name NAME --role user'); 'lehr dev' and 'lehr control --dev' allow unidentified changes for development", method, socket)
		}
		return nil
	case kindBadCert:
		if c.certErr != nil {
			return deny("client certificate %s: %v", c.transport, c.certErr)
		}
		return deny("client certificate %s carries no Lehr identity (a URI SAN spiffe://lehr/<role>/…; its CommonName does not count), so it may call nothing; "+
			"issue one with 'lehr certs issue --dir DIR --name NAME --role user' (or --role distributor --zone Z for a distributor)", c.transport)
	}
	id := c.cert
	switch id.Role {
	case tlsconfig.RoleHost:
		return deny("%s is a host: hosts talk to their zone's distributors, never to control (%s refused)", id, method)
	case tlsconfig.RoleDistributor:
		if !distributionMethods[method] {
			return deny("%s is a distributor: distributors may call only WatchGoals, GetGoals, GetDomain, FetchVersion, FetchDelta and ReportZoneStatus, not %s; use a user certificate ('lehr certs issue --dir DIR --name NAME --role user')", id, method)
		}
		if z, ok := req.(zoned); ok && z.GetZone() != id.Zone {
			return deny("%s serves zone %q; it may not call %s for zone %q", id, id.Zone, method, z.GetZone())
		}
		if r, ok := req.(*lehrpb.ReportZoneStatusRequest); ok && r.GetDistributorId() != id.Name {
			return deny("%s may report zone status only as distributor %q, not %s: a report is its sender's word, so it is filed under the certificate's id. "+
				"Run the distributor without --id (it then reports as %q), or give each distributor its own certificate ('lehr certs issue --dir DIR --role distributor --zone %s --name ID')",
				id, id.Name, excerpt.Quote(r.GetDistributorId()), id.Name, id.Zone)
		}
	case tlsconfig.RoleUser, tlsconfig.RoleControl:
		if method == "ReportZoneStatus" {
			return deny("%s is a %s: only distributors report zone status", id, id.Role)
		}
	}
	return nil
}

// Unary is the gRPC interceptor that applies the rules to every unary
// call.
func (a Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream applies the rules to every stream: to the caller when the stream
// opens, and to its first request message when it arrives.
func (a Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, &authorizedStream{ServerStream: ss, method: info.FullMethod, a: a})
}

// authorizedStream checks the first message the client sends.
type authorizedStream struct {
	grpc.ServerStream
	method  string
	a       Authorizer
	checked bool
}

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		if err := s.a.authorize(s.Context(), s.method, m); err != nil {
			return err
		}
	}
	return nil
}
