// Package apierror is the one error type that crosses the control API. The
// server builds an *Error for every rejection; it travels as a gRPC status
// with a google.rpc.ErrorInfo (reason, field, limit, current version) and a
// google.rpc.BadRequest naming the field; the producer client turns the
// status back into an *Error. Callers match with errors.Is against the
// sentinels below or errors.As to read the fields — never by string.
//
// Importable by control and client packages.
package apierror

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/runtime/protoiface"

	"lehr.dev/lehr/internal/excerpt"
)

// Domain is the ErrorInfo domain of every Lehr error.
const Domain = "lehr.dev"

// Reasons: machine-readable, stable, append-only.
const (
	ReasonInvalidArgument    = "INVALID_ARGUMENT"    // a malformed field
	ReasonInvalidName        = "INVALID_NAME"        // a domain, namespace, zone or key breaks the grammar
	ReasonInvalidContent     = "INVALID_CONTENT"     // a value does not match its content type
	ReasonValidationFailed   = "VALIDATION_FAILED"   // a namespace validator (JSON Schema, CEL) rejected it
	ReasonDuplicateKey       = "DUPLICATE_KEY"       // a key appears twice in one request
	ReasonMissingKey         = "MISSING_KEY"         // a deleted or requested key does not exist
	ReasonEmptyPatch         = "EMPTY_PATCH"         // a patch that sets and deletes nothing
	ReasonValueTooLarge      = "VALUE_TOO_LARGE"     // one value over the cap
	ReasonNamespaceTooLarge  = "NAMESPACE_TOO_LARGE" // a version over the namespace size cap
	ReasonTooManyProperties  = "TOO_MANY_PROPERTIES"
	ReasonTooManyNamespaces  = "TOO_MANY_NAMESPACES"
	ReasonRateLimited        = "RATE_LIMITED"
	ReasonStaleVersion       = "STALE_VERSION" // a base or expected version is not the latest
	ReasonKindMismatch       = "KIND_MISMATCH"
	ReasonNotFound           = "NOT_FOUND"
	ReasonAlreadyExists      = "ALREADY_EXISTS"
	ReasonPermissionDenied   = "PERMISSION_DENIED"
	ReasonUnavailable        = "UNAVAILABLE"   // storage unreachable; retry
	ReasonRevisionGone       = "REVISION_GONE" // a watch revision was compacted; restart from 0
	ReasonInternal           = "INTERNAL"
	ReasonTooManyLeases      = "TOO_MANY_LEASES"      // a consumer (or all of them) holds the most leases an agent grants
	ReasonTooManyExperiments = "TOO_MANY_EXPERIMENTS" // a policy has the most experiments it may have
	ReasonEtagMismatch       = "ETAG_MISMATCH"        // a stated etag is not the resource's current one
	ReasonPreviewGate        = "PREVIEW_GATE"         // a commit's gate on preview counts is not met
	ReasonQuotaExceeded      = "QUOTA_EXCEEDED"       // a domain would store more bytes than its quota allows
	ReasonStoreFull          = "STORE_FULL"           // the store is above its high-water mark: new content waits for space
	ReasonCertificateRefused = "CERTIFICATE_REFUSED"  // TLS fails: control refused the client's certificate, or the client control's
	ReasonZoneInUse          = "ZONE_IN_USE"          // a zone to delete has distributors reporting
	ReasonNamespaceInUse     = "NAMESPACE_IN_USE"     // a namespace to delete has hosts holding or subscribing to it
	ReasonRolloutInFlight    = "ROLLOUT_IN_FLIGHT"    // a namespace to delete has a rollout running or paused
	ReasonDomainNotEmpty     = "DOMAIN_NOT_EMPTY"     // a domain to delete still has namespaces
	ReasonRequestTooLarge    = "REQUEST_TOO_LARGE"    // an HTTP/JSON request body over the most control reads
)

// MaxMessageBytes bounds the Message an error shows (Error, GRPCStatus): a
// longer one is cut and says how long it was. Messages quote input through
// excerpt.Quote already; this is the backstop for every other message
// that embeds what a caller sent (a compiler's error quoting a whole
// condition, say), which the status would otherwise carry three times.
const MaxMessageBytes = 4 << 10

// Error is a Lehr API error.
type Error struct {
	Code   codes.Code
	Reason string
	// Field is the request field at fault, e.g. "properties[2].value".
	Field string
	// Message says what is wrong and what is allowed.
	Message string
	// Limit is the limit that was exceeded, if any, e.g. "524288 bytes".
	Limit string
	// CurrentVersion is the namespace's latest version, for ReasonStaleVersion.
	CurrentVersion uint64
	// Cause is the error this one was made from, if any. It never travels
	// over the wire (Message does), but in the process that made the
	// error it keeps errors.Is and errors.As working through it (Unwrap).
	Cause error
}

// Sentinels for errors.Is. An *Error matches a sentinel when the codes are
// equal and the sentinel's Reason is empty or equal.
var (
	ErrInvalid        = &Error{Code: codes.InvalidArgument}
	ErrNotFound       = &Error{Code: codes.NotFound}
	ErrAlreadyExists  = &Error{Code: codes.AlreadyExists}
	ErrConflict       = &Error{Code: codes.FailedPrecondition, Reason: ReasonStaleVersion}
	ErrPrecondition   = &Error{Code: codes.FailedPrecondition}
	ErrExhausted      = &Error{Code: codes.ResourceExhausted}
	ErrDenied         = &Error{Code: codes.PermissionDenied}
	ErrUnavailable    = &Error{Code: codes.Unavailable}
	ErrRevisionGone   = &Error{Code: codes.OutOfRange, Reason: ReasonRevisionGone}
	ErrDeadlineExceed = &Error{Code: codes.DeadlineExceeded}
)

// New returns an error with the given code, reason, field and message.
func New(code codes.Code, reason, field, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with the given code, reason and field whose
// Message is err's text and whose Cause is err.
func Wrap(err error, code codes.Code, reason, field string) *Error {
	return &Error{Code: code, Reason: reason, Field: field, Message: err.Error(), Cause: err}
}

// WithCause sets Cause and returns e.
func (e *Error) WithCause(err error) *Error {
	e.Cause = err
	return e
}

// Unwrap returns Cause.
func (e *Error) Unwrap() error { return e.Cause }

// WithLimit sets Limit and returns e.
func (e *Error) WithLimit(format string, args ...any) *Error {
	e.Limit = fmt.Sprintf(format, args...)
	return e
}

func (e *Error) Error() string {
	s := "lehr: " + e.Code.String()
	if e.Reason != "" {
		s += " " + e.Reason
	}
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.message()
	}
	if e.Limit != "" {
		s += " (limit " + e.Limit + ")"
	}
	if e.CurrentVersion != 0 {
		s += fmt.Sprintf(" (current version %d)", e.CurrentVersion)
	}
	return s
}

// message is Message cut to MaxMessageBytes.
func (e *Error) message() string { return excerpt.Truncate(e.Message, MaxMessageBytes) }

// Is reports whether target is a sentinel that e matches.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Reason == "" || t.Reason == e.Reason)
}

// Retryable reports whether the client should retry the same request as
// is: its outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED; a retry with
// the same request_id is idempotent) or it was rate limited. ABORTED is not:
// control already retried its optimistic rounds (docs/design.md,
// "Retries").
func (e *Error) Retryable() bool {
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.ResourceExhausted:
		return e.Reason == ReasonRateLimited
	}
	return false
}

// GRPCStatus converts e to a status with details. grpc-go calls it when a
// handler returns e.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Error())
	md := map[string]string{}
	if e.Field != "" {
		md["field"] = e.Field
	}
	if e.Limit != "" {
		md["limit"] = e.Limit
	}
	if e.CurrentVersion != 0 {
		md["current_version"] = strconv.FormatUint(e.CurrentVersion, 10)
	}
	if e.Message != "" {
		md["message"] = e.message()
	}
	details := []protoiface.MessageV1{&errdetails.ErrorInfo{Reason: e.Reason, Domain: Domain, Metadata: md}}
	if e.Field != "" && e.Code == codes.InvalidArgument {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: e.Field, Description: e.message()},
		}})
	}
	if ds, err := st.WithDetails(details...); err == nil {
		return ds
	}
	return st
}

// FromError converts any error to an *Error. A gRPC status built by
// GRPCStatus round-trips exactly; other statuses keep their code and message;
// context errors become Canceled or DeadlineExceeded; anything else is
// Unknown. nil stays nil.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	out := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		out.Reason = info.GetReason()
		md := info.GetMetadata()
		out.Field = md["field"]
		out.Limit = md["limit"]
		if m, ok := md["message"]; ok {
			out.Message = m
		}
		if v, err := strconv.ParseUint(md["current_version"], 10, 64); err == nil {
			out.CurrentVersion = v
		}
	}
	return out
}
