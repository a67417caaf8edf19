package service

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// allowPublish takes one publish token from the domain's budget, shared
// by every control replica through etcd (store.TakePublishToken), and
// returns ResourceExhausted/RATE_LIMITED if there is none. A domain without
// publishes_per_second is not limited and costs nothing.
func (s *Service) allowPublish(ctx context.Context, d *lehrpb.Domain) error {
	q := d.GetQuotas()
	perSecond := q.GetPublishesPerSecond()
	if perSecond <= 0 {
		return nil
	}
	burst := int(q.GetPublishBurst())
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	ok, wait, err := s.st.TakePublishToken(ctx, d.GetName(), perSecond, burst, s.now())
	if err != nil {
		return s.apiError(ctx, err)
	}
	if ok {
		return nil
	}
	s.metrics.GetOrCreateCounter(`lehr_control_publishes_throttled_total{domain="` + d.GetName() + `"}`).Inc()
	return apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
		"domain %s allows %g publishes per second (burst %d) across all control replicas; the next is due in %v, retry then",
		d.GetName(), perSecond, burst, wait.Round(time.Millisecond)).
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
