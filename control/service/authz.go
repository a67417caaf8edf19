package service

import (
	"context"
	"path"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Roles and the control API (docs/operations.md, "Security model"). A
// caller with a verified client certificate is who the certificate's Lehr
// identity says (tlsconfig.Identity):
//
//   - a distributor may call only the distribution methods below, and those
//     that name a zone only for its own zone;
//   - a user (and a control replica) may call everything except
//     ReportZoneStatus, which only distributors send;
//   - a host may call nothing: agents talk to distributors, never to control;
//   - a verified certificate without a Lehr identity is refused.
//
// A caller without a certificate (plaintext on loopback, or TLS without
// --client-ca) is not checked here.

// distributionMethods are what distributors call.
var distributionMethods = map[string]bool{
	"WatchGoals":       true,
	"GetGoals":         true,
	"FetchVersion":     true,
	"FetchDelta":       true,
	"ReportZoneStatus": true,
}

// zoned is a request that names a zone.
type zoned interface{ GetZone() string }

// authorize decides whether the caller of ctx may call the Control method
// fullMethod with req (nil for a stream whose request is not read yet).
func authorize(ctx context.Context, fullMethod string, req any) error {
	method := path.Base(fullMethod)
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return nil
	}
	id, ok, err := tlsconfig.PeerRole(ti.State)
	cn := tlsconfig.PeerIdentity(ti.State)
	deny := func(format string, args ...any) error {
		return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "", format, args...)
	}
	switch {
	case err != nil:
		return deny("client certificate %q: %v", cn, err)
	case !ok:
		return deny("client certificate %q carries no Lehr identity, so it may call nothing; issue one with 'lehr certs issue --role user --name %s' (or --role distributor --zone Z for a distributor)", cn, cn)
	}
	switch id.Role {
	case tlsconfig.RoleHost:
		return deny("%s is a host: hosts talk to their zone's distributors, never to control (%s refused)", id, method)
	case tlsconfig.RoleDistributor:
		if !distributionMethods[method] {
			return deny("%s is a distributor: distributors may call only WatchGoals, GetGoals, FetchVersion, FetchDelta and ReportZoneStatus, not %s; use a user certificate ('lehr certs issue --role user')", id, method)
		}
		if z, ok := req.(zoned); ok && z.GetZone() != id.Zone {
			return deny("%s serves zone %q; it may not call %s for zone %q", id, id.Zone, method, z.GetZone())
		}
	case tlsconfig.RoleUser, tlsconfig.RoleControl:
		if method == "ReportZoneStatus" {
			return deny("%s is a %s: only distributors report zone status", id, id.Role)
		}
	}
	return nil
}

// UnaryAuthorizer is the gRPC interceptor that applies authorize to every
// unary call.
func UnaryAuthorizer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamAuthorizer applies authorize to every stream: to the caller when
// the stream opens, and to its first request message when it arrives.
func StreamAuthorizer(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, &authorizedStream{ServerStream: ss, method: info.FullMethod})
}

// authorizedStream checks the first message the client sends.
type authorizedStream struct {
	grpc.ServerStream
	method  string
	checked bool
}

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		if err := authorize(s.Context(), s.method, m); err != nil {
			return err
		}
	}
	return nil
}
