package service

import (
	"context"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

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
