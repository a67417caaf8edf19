package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Errors returned by Store wrap one of these where they apply.
var (
	ErrNotFound      = errors.New("store: not found")
	ErrAlreadyExists = errors.New("store: already exists")
	ErrConflict      = errors.New("store: latest version changed")
	ErrCorrupt       = errors.New("store: stored content fails its checksum")
	ErrRevisionGone  = errors.New("store: watch revision compacted")
	// ErrInvalid is wrapped by errors about arguments the store cannot act
	// on (a malformed name, a value larger than an etcd request may carry).
	// Nothing is changed when it is returned.
	ErrInvalid = errors.New("store: invalid argument")
	// ErrContention is wrapped when an operation kept losing optimistic
	// transactions to concurrent writers and gave up; retrying later may
	// succeed.
	ErrContention = errors.New("store: too much contention, gave up")
	// ErrQuota is wrapped when a domain's limit refuses a write
	// (*QuotaError, *RateError). Nothing is changed.
	ErrQuota = errors.New("store: domain quota exceeded")
	// ErrStoreFull is wrapped when the store is above its high-water mark
	// and refuses new content (*SpaceError). Nothing is changed.
	ErrStoreFull = errors.New("store: above its high-water mark")
	// ErrNoAnswer is wrapped when etcd did not answer a request within
	// Options.RequestTimeout (*NoAnswerError) while the caller still
	// waited: the cluster has most likely lost quorum, or no member is
	// reachable. IsUnavailable reports it: a write may or may not have
	// taken effect.
	ErrNoAnswer = errors.New("store: etcd did not answer in time")
)

// NoAnswerError is the error of an etcd request that got no answer within
// Options.RequestTimeout. It wraps ErrNoAnswer and the etcd client's error.
type NoAnswerError struct {
	Timeout time.Duration // Options.RequestTimeout
	Err     error         // the etcd client's error, mostly context.DeadlineExceeded
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("etcd did not answer within %v: %v", e.Timeout, e.Err)
}

// Unwrap returns ErrNoAnswer and Err.
func (e *NoAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.Err} }

// NoLeader reports whether etcd answered that it has no leader: the
// cluster lost quorum (most of its members are down or cut off from each
// other), or, for a second or two, it is electing a leader. Either way it
// serves no read and no write until a majority elects one.
func NoLeader(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail)
}

// NotFoundError says what was not found. It wraps ErrNotFound.
type NotFoundError struct {
	What string // "domain", "namespace", "version", "zone"
	Name string
	// Oldest is set for a version that was compacted away: the oldest kept.
	Oldest uint64
}

func (e *NotFoundError) Error() string {
	if e.What == "version" && e.Oldest != 0 {
		return fmt.Sprintf("store: %s %s not found (oldest kept is %d)", e.What, e.Name, e.Oldest)
	}
	return fmt.Sprintf("store: %s %s not found", e.What, e.Name)
}

// Unwrap returns ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ConflictError reports an ExpectedLatest that is no longer the latest
// version. It wraps ErrConflict.
type ConflictError struct {
	Namespace string
	Expected  uint64
	Current   uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("store: %s: expected latest version %d, current is %d", e.Namespace, e.Expected, e.Current)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// IsUnavailable reports whether err means etcd could not be reached, had no
// leader, or did not answer in time: the operation may or may not have taken
// effect, and retrying it may succeed. A gRPC service maps such errors to
// codes.Unavailable; a retried Commit must carry the same RequestID so that
// a commit whose response was lost is not applied twice.
//
// A context.Canceled error is not "unavailable": the caller gave up.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoAnswer) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, clientv3.ErrNoAvailableEndpoints) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
		return errors.Is(err, rpctypes.ErrNotLeader)
	}
	// status.FromError finds a *status.Status wrapped anywhere in err.
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
