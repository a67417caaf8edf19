package service

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/peercred"
	"lehr.dev/lehr/internal/tlsconfig"
)

// AuthorMetadataKey is the gRPC metadata key by which a client may assert
// who it acts for in requests whose message has no author field, such as
// CreateDomain. A request's own author field, if set, takes precedence, and
// under mutual TLS the client certificate's identity overrides both. gRPC
// restricts such metadata values to printable ASCII.
const AuthorMetadataKey = "lehr-author"

// caller is who made a request, for audit.
type caller struct {
	// identity is the verified client certificate's common name under
	// mutual TLS, "" otherwise.
	identity string
	// transport is the certificate subject under mutual TLS, otherwise the
	// peer address ("" for in-process calls without a peer).
	transport string
	// asserted is the first AuthorMetadataKey value, "" if none.
	asserted string
}

// callerOf reads the transport identity and the asserted author from ctx.
// checkAudit validates the latter.
func callerOf(ctx context.Context) caller {
	var c caller
	if vs := metadata.ValueFromIncomingContext(ctx, AuthorMetadataKey); len(vs) > 0 {
		c.asserted = vs[0]
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return c
	}
	if p.Addr != nil {
		c.transport = p.Addr.String()
	}
	if pc, ok := p.AuthInfo.(peercred.Info); ok {
		c.identity, c.transport = pc.User, pc.String()
		return c
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if id := tlsconfig.PeerIdentity(ti.State); id != "" {
			c.identity = id
			c.transport = "cert:" + ti.State.VerifiedChains[0][0].Subject.String()
		}
	}
	return c
}

// author returns who a version or domain is attributed to: the
// authenticated transport identity if there is one, otherwise the author
// the request message asserted, otherwise the one its metadata asserted
// (AuthorMetadataKey), otherwise "anonymous".
func (c caller) author(asserted string) string {
	switch {
	case c.identity != "":
		return c.identity
	case asserted != "":
		return asserted
	case c.asserted != "":
		return c.asserted
	}
	return "anonymous"
}

// checkAudit validates a request's author and message fields and the
// author asserted in its metadata.
// checkRequestID checks a request_id: at most validate.MaxRequestIDBytes of
// printable ASCII (it becomes part of a store key).
func checkRequestID(id string) error {
	if len(id) > validate.MaxRequestIDBytes {
		return invalid(apierror.ReasonInvalidArgument, "request_id", "request_id is %d bytes; at most %d allowed (a UUID is 36)", len(id), validate.MaxRequestIDBytes).
			WithLimit("%d bytes", validate.MaxRequestIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return invalid(apierror.ReasonInvalidArgument, "request_id", "request_id has byte 0x%02x at offset %d; use printable ASCII without spaces, e.g. a UUID", c, i)
		}
	}
	return nil
}

func checkAudit(ctx context.Context, author, message string) error {
	if len(author) > validate.MaxAuthorBytes {
		return invalid(apierror.ReasonInvalidArgument, "author", "author is %d bytes; at most %d allowed", len(author), validate.MaxAuthorBytes).
			WithLimit("%d bytes", validate.MaxAuthorBytes)
	}
	if len(message) > validate.MaxMessageBytes {
		return invalid(apierror.ReasonInvalidArgument, "message", "message is %d bytes; at most %d allowed", len(message), validate.MaxMessageBytes).
			WithLimit("%d bytes", validate.MaxMessageBytes)
	}
	switch vs := metadata.ValueFromIncomingContext(ctx, AuthorMetadataKey); {
	case len(vs) > 1:
		return invalid(apierror.ReasonInvalidArgument, AuthorMetadataKey, "gRPC metadata %s appears %d times; send it at most once", AuthorMetadataKey, len(vs))
	case len(vs) == 1 && len(vs[0]) > validate.MaxAuthorBytes:
		return invalid(apierror.ReasonInvalidArgument, AuthorMetadataKey, "gRPC metadata %s is %d bytes; at most %d allowed",
			AuthorMetadataKey, len(vs[0]), validate.MaxAuthorBytes).WithLimit("%d bytes", validate.MaxAuthorBytes)
	case len(vs) == 1 && !utf8.ValidString(vs[0]):
		return invalid(apierror.ReasonInvalidArgument, AuthorMetadataKey, "gRPC metadata %s is not valid UTF-8", AuthorMetadataKey)
	}
	return nil
}
