package service

import (
	"context"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/certs"
)

// caller is who made a request, for audit.
type caller struct {
	// identity is the verified client certificate's common name under
	// mutual TLS, "" otherwise.
	identity string
	// transport is the certificate subject under mutual TLS, otherwise the
	// peer address ("" for in-process calls without a peer).
	transport string
}

// callerOf reads the transport identity from ctx.
func callerOf(ctx context.Context) caller {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return caller{}
	}
	var c caller
	if p.Addr != nil {
		c.transport = p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if id := certs.PeerIdentity(ti.State); id != "" {
			c.identity = id
			c.transport = "cert:" + ti.State.VerifiedChains[0][0].Subject.String()
		}
	}
	return c
}

// author returns who a version is attributed to: the authenticated
// transport identity if there is one, otherwise the identity the request
// asserted, otherwise "anonymous".
func (c caller) author(asserted string) string {
	switch {
	case c.identity != "":
		return c.identity
	case asserted != "":
		return asserted
	}
	return "anonymous"
}

// checkAudit validates a request's author and message fields.
func checkAudit(author, message string) error {
	if len(author) > validate.MaxAuthorBytes {
		return invalid(apierror.ReasonInvalidArgument, "author", "author is %d bytes; at most %d allowed", len(author), validate.MaxAuthorBytes).
			WithLimit("%d bytes", validate.MaxAuthorBytes)
	}
	if len(message) > validate.MaxMessageBytes {
		return invalid(apierror.ReasonInvalidArgument, "message", "message is %d bytes; at most %d allowed", len(message), validate.MaxMessageBytes).
			WithLimit("%d bytes", validate.MaxMessageBytes)
	}
	return nil
}
