package fanout

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"lehr.dev/lehr/proto/lehrpb"
)

// DomainPolicy is what a domain's settings ask of the distributors
// (lehrpb.Domain: acl.readers, quotas.outbound_bytes_per_second).
type DomainPolicy struct {
	// Readers, when not empty, are the zones ("zone") and hosts
	// ("zone/host") that may receive the domain's namespaces; any other
	// host subscribing gets UNAVAILABLE_REASON_FORBIDDEN and nothing of
	// the domain.
	Readers []string
	// OutboundBytesPerSecond, when above 0, bounds the update bytes of the
	// domain's namespaces the zone's distributors send per second, over
	// all their agents; this one sends its share (SetShare): a push that
	// would exceed it waits, and only it — pushes of other domains and to
	// other namespaces go on.
	OutboundBytesPerSecond int64
	// MaxSubscriptions, when above 0, bounds the subscriptions (host ×
	// namespace) to the domain the zone's distributors serve; this one
	// serves its share (SetShare), at least one: one beyond it is told
	// UNAVAILABLE_REASON_OVER_QUOTA until another ends. Lowering it ends
	// none already served.
	MaxSubscriptions int
}

// outbound is this distributor's part of the domain's outbound limit
// when the zone's distributors are share (0: no limit).
func (p DomainPolicy) outbound(share int) int64 {
	if p.OutboundBytesPerSecond <= 0 {
		return 0
	}
	return max(1, p.OutboundBytesPerSecond/int64(share))
}

// subscriptions is this distributor's part of the domain's subscription
// quota when the zone's distributors are share (0: no quota).
func (p DomainPolicy) subscriptions(share int) int {
	if p.MaxSubscriptions <= 0 {
		return 0
	}
	return max(1, p.MaxSubscriptions/share)
}

// PolicyOf returns a domain's policy.
func PolicyOf(d *lehrpb.Domain) DomainPolicy {
	q := d.GetEffectiveQuotas() // the quotas in force; a control before them sends none
	if q == nil {
		q = d.GetQuotas()
	}
	return DomainPolicy{Readers: d.GetAcl().GetReaders(), OutboundBytesPerSecond: q.GetOutboundBytesPerSecond(),
		MaxSubscriptions: int(q.GetMaxSubscriptions())}
}

// mayRead reports whether host of zone may receive the domain's namespaces.
func (p DomainPolicy) mayRead(zone, host string) bool {
	return len(p.Readers) == 0 || slices.Contains(p.Readers, zone) || slices.Contains(p.Readers, zone+"/"+host)
}

// SetDomains replaces the domain policies (by domain name; a domain
// without one has no readers list and no outbound limit) and makes every
// session plan again, so a host a change forbids is told, and one it
// allows again is served.
func (s *Server) SetDomains(policies map[string]DomainPolicy) {
	policies = maps.Clone(policies)
	s.domainMu.Lock()
	s.domains.Store(&policies)
	s.applyLimitsLocked()
	s.domainMu.Unlock()
	for _, ss := range s.sessionList() {
		ss.kick()
	}
}

// SetShare says how many distributors the zone has (control counts their
// live reports; this one included): the domains' per-zone quotas are
// split evenly between them. n below 1 is taken as 1, the default.
func (s *Server) SetShare(n int) {
	n = max(n, 1)
	s.domainMu.Lock()
	if s.share == n {
		s.domainMu.Unlock()
		return
	}
	s.share = n
	s.applyLimitsLocked()
	s.domainMu.Unlock()
	s.log.Info("splitting the domains' per-zone quotas", "distributors", n)
	for _, ss := range s.sessionList() {
		ss.kick()
	}
}

// applyLimitsLocked makes the outbound limiters those of the domains'
// policies at the current share. s.domainMu is held.
func (s *Server) applyLimitsLocked() {
	var policies map[string]DomainPolicy
	if m := s.domains.Load(); m != nil {
		policies = *m
	}
	for d, l := range s.limiters {
		if out := policies[d].outbound(s.share); out == 0 {
			delete(s.limiters, d)
		} else if l.Limit() != rate.Limit(out) {
			l.SetLimit(rate.Limit(out))
			l.SetBurst(burstOf(out))
		}
	}
	for d, p := range policies {
		if out := p.outbound(s.share); out > 0 && s.limiters[d] == nil {
			s.limiters[d] = rate.NewLimiter(rate.Limit(out), burstOf(out))
		}
	}
}

// burstOf is a limiter's burst: a second's worth, at least 64 KiB so a
// small update never waits behind its own size.
func burstOf(perSecond int64) int {
	return int(min(max(perSecond, 64<<10), math.MaxInt32))
}

// policy returns the policy of ns's domain, without a lock: it is on
// every session's plan.
// knowsDomain reports whether ns's domain has a policy.
func (s *Server) knowsDomain(ns string) bool {
	if m := s.domains.Load(); m != nil {
		_, ok := (*m)[domainOf(ns)]
		return ok
	}
	return false
}

func (s *Server) policy(ns string) DomainPolicy {
	if m := s.domains.Load(); m != nil {
		return (*m)[domainOf(ns)]
	}
	return DomainPolicy{}
}

// domainOf returns the domain of a (valid) namespace name.
func domainOf(ns string) string {
	d, _, _ := strings.Cut(ns, "/")
	return d
}

// forbidden returns why host may not receive ns, "" if it may.
func (s *Server) forbidden(ns, host string) string {
	p := s.policy(ns)
	if p.mayRead(s.opts.Zone, host) {
		return ""
	}
	d := domainOf(ns)
	return fmt.Sprintf("domain %s's acl.readers (%s) include neither zone %s nor host %s/%s", d, strings.Join(p.Readers, ", "), s.opts.Zone, s.opts.Zone, host)
}

// throttle waits until the outbound limit of ns's domain allows n more
// bytes; at once without a limit. It fails only when ctx ends.
func (s *Server) throttle(ctx context.Context, ns string, n int) error {
	d := domainOf(ns)
	s.domainMu.Lock()
	l := s.limiters[d]
	s.domainMu.Unlock()
	if l == nil {
		return nil
	}
	start := s.now()
	waited := false
	for n > 0 {
		k := min(n, l.Burst())
		now := s.now()
		r := l.ReserveN(now, k) // k ≤ burst: always OK
		if delay := r.DelayFrom(now); delay > 0 {
			waited = true
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				r.Cancel()
				return ctx.Err()
			case <-t.C:
			}
		}
		n -= k
	}
	if waited {
		s.met.throttled(d, s.now().Sub(start))
	}
	return nil
}

// admitSub counts a subscription to ns against its domain's quota; false
// with the reason when the quota is reached.
func (s *Server) admitSub(ns string) (ok bool, why string) {
	d := domainOf(ns)
	p := s.policy(ns)
	s.domainMu.Lock()
	defer s.domainMu.Unlock()
	if limit := p.subscriptions(s.share); limit > 0 && s.subs[d] >= limit {
		return false, fmt.Sprintf("domain %s has %d subscriptions at this distributor, its share of the zone's quota (quotas.max_subscriptions %d over %d distributors); served when one ends",
			d, s.subs[d], p.MaxSubscriptions, s.share)
	}
	s.subs[d]++
	return true, ""
}

// releaseSub uncounts an admitted subscription to ns, and makes the sessions
// waiting for room plan again.
func (s *Server) releaseSub(ns string) {
	d := domainOf(ns)
	s.domainMu.Lock()
	if s.subs[d] > 0 {
		s.subs[d]--
	}
	s.domainMu.Unlock()
	waiting := s.policy(ns).MaxSubscriptions > 0
	if waiting {
		for _, ss := range s.sessionList() {
			if ss.overQuota(d) {
				ss.kick()
			}
		}
	}
}
