package service

import (
	"context"
	"math"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// limiters holds one publish rate limiter per domain. The limits of one
// control process: several replicas each allow the domain's rate.
type limiters struct {
	mu sync.Mutex
	m  map[string]*domainLimiter
}

type domainLimiter struct {
	perSecond float64
	burst     int
	lim       *rate.Limiter
}

// allowPublish takes one publish token from the domain's limiter and
// returns ResourceExhausted/RATE_LIMITED if there is none. A domain without
// publishes_per_second is not limited.
func (s *Service) allowPublish(d *lehrpb.Domain) error {
	q := d.GetQuotas()
	perSecond := q.GetPublishesPerSecond()
	if perSecond <= 0 {
		return nil
	}
	burst := int(q.GetPublishBurst())
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	now := s.now()
	s.limiters.mu.Lock()
	l := s.limiters.m[d.GetName()]
	if l == nil || l.perSecond != perSecond || l.burst != burst {
		l = &domainLimiter{perSecond: perSecond, burst: burst, lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
		s.limiters.m[d.GetName()] = l
	}
	ok := l.lim.AllowN(now, 1)
	s.limiters.mu.Unlock()
	if ok {
		return nil
	}
	return apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
		"domain %s allows %g publishes per second (burst %d); retry later", d.GetName(), perSecond, burst).
		WithLimit("%g/s burst %d", perSecond, burst)
}

// runValidators runs ns's validators on the changed properties. fieldOf
// maps a violating key to its request field.
func (s *Service) runValidators(ctx context.Context, ns *lehrpb.Namespace, changed []content.Property, fieldOf func(key, sub string) string) error {
	vs, v := s.registry.For(ns)
	if v != nil {
		// The namespace's stored schema no longer builds; that is our fault,
		// not the caller's.
		return apierror.New(codes.FailedPrecondition, v.Reason, "json_schema",
			"namespace %s has validators that do not build: %s", ns.GetName(), v.Message)
	}
	for _, val := range vs {
		if v := val.Validate(ctx, ns, changed); v != nil {
			field := ""
			if v.Key != "" {
				field = fieldOf(v.Key, v.Field)
			}
			e := violationError(field, v)
			if e.Reason == "" {
				e.Reason = apierror.ReasonValidationFailed
			}
			e.Message = val.Name() + ": " + e.Message
			return e
		}
	}
	return nil
}
