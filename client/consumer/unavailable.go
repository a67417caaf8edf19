package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"lehr.dev/lehr/proto/lehrpb"
)

// ErrForbidden is matched (errors.Is) by the UnavailableError of a
// namespace this host may not receive: its domain's acl.readers name
// neither the host nor its zone.
var ErrForbidden = errors.New("consumer: this host may not receive the namespace")

// UnavailableError says why the agent's distributor cannot serve a
// subscribed namespace now, as the distributor said (docs/wire.md,
// "Unavailable"). Subscription.Unavailable returns it; the subscription
// stays, and content follows when the distributor can serve it.
type UnavailableError struct {
	Namespace string
	// Reason is the distributor's: FORBIDDEN, NOT_FOUND (no goal in the
	// zone: never published, or deleted upstream — the view then stays at
	// the version it has), NOT_READY or OVER_QUOTA.
	Reason lehrpb.UnavailableReason
	// Detail is the distributor's explanation, e.g. which acl.readers.
	Detail string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("consumer: %s: the agent's distributor cannot serve it (%s): %s; %s",
		e.Namespace, reasonName(e.Reason), e.Detail, e.advice())
}

// Is reports whether target is ErrForbidden and e a refusal by the
// domain's readers.
func (e *UnavailableError) Is(target error) bool {
	return target == ErrForbidden && e.Reason == lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN
}

// advice says what to do.
func (e *UnavailableError) advice() string {
	domain, _, _ := strings.Cut(e.Namespace, "/")
	switch e.Reason {
	case lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN:
		return fmt.Sprintf("ask an admin of domain %s to add this host or its zone to the domain's readers ('lehr domain update %s --readers ZONE,ZONE/HOST,…'), or subscribe on a host they admit", domain, domain)
	case lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND:
		return "check the namespace's name, and that it exists ('lehr history " + e.Namespace + "'): a namespace deleted upstream stays at the version this host holds; content follows once it has a goal in this zone (published, or published again)"
	case lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA:
		return fmt.Sprintf("domain %s's subscriptions at this distributor are at its quota (max_subscriptions): served when one ends, or raise the quota ('lehr domain update %s --max-subscriptions N')", domain, domain)
	}
	return "content follows when the distributor has it"
}

// reasonName is a reason without its enum prefix ("FORBIDDEN").
func reasonName(r lehrpb.UnavailableReason) string {
	return strings.TrimPrefix(r.String(), "UNAVAILABLE_REASON_")
}

// Unavailable returns why the agent's distributor cannot serve the
// namespace now — an *UnavailableError, matching ErrForbidden when this
// host may not receive it — or nil when nothing is known to stand in the
// way. A subscription that waits for its first content with
// Next or OnChange can ask it why; the subscription also logs every
// change of it (a warning, saying what to do).
func (s *Subscription) Unavailable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable == nil {
		return nil
	}
	return s.unavailable
}

// setUnavailable records what the agent said of the namespace's
// distributor (u nil: nothing stands in the way) and logs a change.
func (s *Subscription) setUnavailable(u *lehrpb.Unavailable) {
	var next *UnavailableError
	if u != nil && u.GetReason() != lehrpb.UnavailableReason_UNAVAILABLE_REASON_UNSPECIFIED {
		next = &UnavailableError{Namespace: s.ns, Reason: u.GetReason(), Detail: u.GetDetail()}
	}
	s.mu.Lock()
	prev := s.unavailable
	s.unavailable = next
	s.mu.Unlock()
	switch {
	case next == nil && prev != nil:
		s.log.Info("the agent's distributor may serve the namespace again", "was", reasonName(prev.Reason))
	case next == nil, prev != nil && prev.Reason == next.Reason && prev.Detail == next.Detail:
	case next.Reason == lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_READY:
		s.log.Info("the agent's distributor is fetching the namespace", "detail", next.Detail)
	default:
		s.log.LogAttrs(s.ctx, slog.LevelWarn, "the agent's distributor cannot serve the namespace; the subscription waits",
			slog.String("reason", reasonName(next.Reason)), slog.String("detail", next.Detail), slog.String("fix", next.advice()))
	}
}
