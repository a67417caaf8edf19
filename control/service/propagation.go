package service

import (
	"context"
	"time"

	"lehr.dev/lehr/control/propagation"
	"lehr.dev/lehr/proto/lehrpb"
)

// GetPropagationStatus returns what the strategist's leader measured of
// the recent updates' propagation (control/propagation), read from the
// store so that every replica answers the same. Every user may read it.
func (s *Service) GetPropagationStatus(ctx context.Context, _ *lehrpb.GetPropagationStatusRequest) (_ *lehrpb.PropagationStatus, err error) {
	defer s.track(ctx, "GetPropagationStatus", time.Now(), &err)
	rec, err := s.st.Propagation(ctx)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return propagation.Status(rec), nil
}
