package service

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
)

// AuthorMetadataKey is the gRPC metadata key by which a client may assert
// who it acts for in requests whose message has no author field, such as
// CreateDomain. A request's own author field, if set, takes precedence.
// Either counts only for a caller control cannot identify, in dev mode; an
// identified caller asserting anyone but itself is refused (identity.go).
// gRPC restricts such metadata values to printable ASCII.
const AuthorMetadataKey = "lehr-author"

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

// checkAudit validates a request's author and message fields and the
// author asserted in its metadata.
func checkAudit(ctx context.Context, author, message string) error {
	if len(author) > validate.MaxAuthorBytes {
		return invalid(apierror.ReasonInvalidArgument, "author", "author is %d bytes; at most %d allowed", len(author), validate.MaxAuthorBytes).
			WithLimit("%d bytes", validate.MaxAuthorBytes)
	}
	if len(message) > validate.MaxMessageBytes {
		return invalid(apierror.ReasonInvalidArgument, "message", "message is %d bytes; at most %d allowed", len(message), validate.MaxMessageBytes).
			WithLimit("%d bytes", validate.MaxMessageBytes)
	}
	if err := checkUnreserved(author); err != nil {
		return invalid(apierror.ReasonInvalidArgument, "author", "author: %v", err)
	}
	switch vs := metadata.ValueFromIncomingContext(ctx, AuthorMetadataKey); {
	case len(vs) == 1 && checkUnreserved(vs[0]) != nil:
		return invalid(apierror.ReasonInvalidArgument, AuthorMetadataKey, "gRPC metadata %s: %v", AuthorMetadataKey, checkUnreserved(vs[0]))
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
