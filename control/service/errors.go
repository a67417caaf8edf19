package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
)

// apiError turns any error a handler produced into the one API error type.
// Errors that are already *apierror.Error pass through; store errors map to
// their documented codes; a request whose own context ended reports that.
func (s *Service) apiError(ctx context.Context, err error) *apierror.Error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	var nf *store.NotFoundError
	var ce *store.ConflictError
	var qe *store.QuotaError
	var re *store.RateError
	var se *store.SpaceError
	switch {
	case errors.As(err, &qe):
		return quotaError(qe).WithCause(err)
	case errors.As(err, &re):
		s.metrics.GetOrCreateCounter(`lehr_control_publishes_throttled_total{domain="` + re.Domain + `"}`).Inc()
		if re.Bytes {
			return apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
				"domain %s allows %s of new content per second (burst %s) across all control replicas; this publish fits in %v, retry then (or publish less: a patch stores only what changed)",
				re.Domain, humanize.IBytes(uint64(re.Rate)), humanize.IBytes(uint64(re.Burst)), re.Wait.Round(time.Millisecond)).
				WithLimit("%g bytes/s burst %d", re.Rate, re.Burst).WithCause(err)
		}
		s.rates.note(re, s.now()) // a smaller publish is no sooner due: not so for bytes
		return apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
			"domain %s allows %g publishes per second (burst %d) across all control replicas; the next is due in %v, retry then",
			re.Domain, re.Rate, re.Burst, re.Wait.Round(time.Millisecond)).
			WithLimit("%g/s burst %d", re.Rate, re.Burst).WithCause(err)
	case errors.As(err, &se):
		return spaceError(se).WithCause(err)
	case store.IsNoSpace(err):
		// etcd refused a write the high-water mark let through (another
		// writer filled it, or its alarm is up): never INTERNAL.
		st := s.st.Space()
		return spaceError(&store.SpaceError{Used: st.DBSize, HighWater: st.HighWater, Quota: st.Quota, Alarm: true}).WithCause(err)
	case errors.As(err, &nf):
		e := apierror.New(codes.NotFound, apierror.ReasonNotFound, "", "%s %q not found", nf.What, nf.Name)
		if nf.What == "version" && nf.Oldest != 0 {
			e.Message += fmt.Sprintf(": history keeps versions from %d on", nf.Oldest)
		}
		return e
	case errors.As(err, &ce):
		return staleError(ce.Namespace, "expected_version", "expected version", ce.Expected, ce.Current)
	case errors.Is(err, store.ErrAlreadyExists):
		return apierror.Wrap(err, codes.AlreadyExists, apierror.ReasonAlreadyExists, "")
	case errors.Is(err, store.ErrRevisionGone):
		return apierror.New(codes.OutOfRange, apierror.ReasonRevisionGone, "start_revision",
			"the requested revision was compacted; restart the watch from revision 0")
	case errors.Is(err, store.ErrCorrupt):
		s.log.Error("control: stored content is corrupt", "err", err)
		return apierror.Wrap(err, codes.DataLoss, apierror.ReasonInternal, "")
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The caller gave up; say so in the caller's terms.
		return apierror.FromError(ctx.Err())
	case store.IsUnavailable(err) || errors.Is(err, context.Canceled):
		// Canceled while our caller still waits: the etcd client is
		// closing under us (shutdown). Either way another try may work.
		return s.storeUnavailable(err)
	case errors.Is(err, store.ErrContention):
		return apierror.New(codes.Aborted, apierror.ReasonUnavailable, "",
			"%v (the namespace changes too often to commit; control already retried, try later)", err).WithCause(err)
	case errors.Is(err, store.ErrInvalid):
		return apierror.Wrap(err, codes.InvalidArgument, apierror.ReasonInvalidArgument, "")
	}
	s.log.Error("control: unexpected error", "err", err)
	return apierror.Wrap(err, codes.Internal, apierror.ReasonInternal, "")
}

// storeUnavailable is the error of a call the store did not serve: what
// happened and what an operator can do about it. It gives no retry
// advice: UNAVAILABLE says the call may be retried, and the producer
// client does so by itself, keeping a write's request_id (design.md,
// "Retries"); a person cannot act on it.
func (s *Service) storeUnavailable(err error) *apierror.Error {
	check := "check the etcd members ('etcdctl endpoint health --cluster') and control's log"
	if s.st.SingleMember() {
		check = "check control's log and the disk under its data directory (the embedded etcd)"
	}
	var na *store.NoAnswerError
	var msg string
	switch {
	case store.NoLeader(err):
		msg = "the store has no leader: etcd has lost quorum (most of its members are down or cut off from each other) or is electing a leader, and control can neither read nor write until a majority of its members agree on one; " + check
	case errors.As(err, &na):
		msg = fmt.Sprintf("the store did not answer within %v (lehr control --store-timeout): etcd may have lost quorum, or control cannot reach its members; %s", na.Timeout, check)
	default:
		msg = "the store is unavailable; " + check
	}
	return apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "", "%s (%v)", msg, err).WithCause(err)
}

// staleError is the conflict error: the stated version is not the latest.
// what names the stated version, e.g. "base version".
func staleError(ns, field, what string, stated, current uint64) *apierror.Error {
	e := apierror.New(codes.FailedPrecondition, apierror.ReasonStaleVersion, field,
		"%s: %s %d is stale: latest is %d; re-read and retry", ns, what, stated, current)
	e.CurrentVersion = current
	return e
}

// invalid is an InvalidArgument error.
func invalid(reason, field, format string, args ...any) *apierror.Error {
	return apierror.New(codes.InvalidArgument, reason, field, format, args...)
}

// tooMany refuses a repeated field of n entries, over its limit:
// INVALID_ARGUMENT naming the field, the count and the limit. Every list a
// caller sends is bounded (docs/design.md, "Limits").
func tooMany(field string, n, limit int) *apierror.Error {
	return invalid(apierror.ReasonInvalidArgument, field, "%s has %d entries; at most %d allowed", field, n, limit).
		WithLimit("%d entries", limit)
}

// nameError maps a names.Error to an InvalidArgument on field.
func nameError(field string, err error) *apierror.Error {
	var ne *names.Error
	if errors.As(err, &ne) {
		return invalid(apierror.ReasonInvalidName, field, "invalid %s %s: %s", ne.Kind, ne.Quoted(), ne.Reason).WithCause(err)
	}
	return apierror.Wrap(err, codes.InvalidArgument, apierror.ReasonInvalidName, field)
}

// userNamespace refuses a write to a preview namespace, which control
// alone writes from a policy's experiments.
func userNamespace(field, ns string) error {
	if names.IsPreview(ns) {
		return invalid(apierror.ReasonInvalidName, field,
			"namespace %q ends with %q: such names are reserved for the experiments of policy %q, which control writes (see docs/preview.md); choose another name",
			ns, names.PreviewSuffix, strings.TrimSuffix(ns, names.PreviewSuffix))
	}
	return nil
}

// violationError maps a validate.Violation to an API error on field.
func violationError(field string, v *validate.Violation) *apierror.Error {
	code := v.Code
	if code == codes.OK {
		code = codes.InvalidArgument
	}
	e := apierror.New(code, v.Reason, field, "%s", v.Message)
	e.Limit = v.Limit
	return e
}

// propField is the request field of a property: "properties[3].value".
func propField(list string, i int, sub string) string {
	f := list + "[" + strconv.Itoa(i) + "]"
	if sub != "" {
		f += "." + sub
	}
	return f
}
