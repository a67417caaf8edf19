package producer

import (
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
)

// Error is the error type of every failed call: the gRPC code, a stable
// machine-readable Reason (apierror.Reason* constants), the request Field at
// fault, a Message saying what is allowed, the Limit that was exceeded and,
// for conflicts, the namespace's CurrentVersion. Every error a Client returns
// wraps one; read it with errors.As.
type Error = apierror.Error

// Sentinels for errors.Is. An *Error matches a sentinel when the gRPC codes
// are equal and the sentinel's reason is empty or equal.
var (
	// ErrInvalid: a malformed request (bad name, content type, empty patch,
	// duplicate key). Field says which part.
	ErrInvalid = apierror.ErrInvalid
	// ErrNotFound: an unknown domain, namespace, version, key or zone.
	ErrNotFound = apierror.ErrNotFound
	// ErrAlreadyExists: a domain, namespace or zone that exists already.
	ErrAlreadyExists = apierror.ErrAlreadyExists
	// ErrConflict: a stale base or expected version. CurrentVersion names
	// the latest version; re-read it and retry.
	ErrConflict = apierror.ErrConflict
	// ErrPrecondition: any failed precondition, including ErrConflict and a
	// kind mismatch.
	ErrPrecondition = apierror.ErrPrecondition
	// ErrExhausted: a size, count or rate quota. Limit names it.
	ErrExhausted = apierror.ErrExhausted
	// ErrDenied: the caller may not do this.
	ErrDenied = apierror.ErrDenied
	// ErrUnavailable: control or its storage is unreachable. The client has
	// already retried; the caller may retry later.
	ErrUnavailable = apierror.ErrUnavailable
	// ErrRevisionGone: a goal watch revision was compacted.
	ErrRevisionGone = apierror.ErrRevisionGone
	// ErrDeadlineExceeded: the context deadline passed.
	ErrDeadlineExceeded = apierror.ErrDeadlineExceed
	// ErrCanceled: the context was canceled.
	ErrCanceled = &apierror.Error{Code: codes.Canceled}
)

// invalidArg is a client-side rejection: nothing was sent.
func invalidArg(field, format string, args ...any) *Error {
	return apierror.New(codes.InvalidArgument, apierror.ReasonInvalidArgument, field, format, args...)
}
