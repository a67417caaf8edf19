package service

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// rolloutOf returns the rollout of version seq of ns, or its latest when
// seq is 0.
func (s *Service) rolloutOf(ctx context.Context, ns string, seq uint64) (*lehrpb.Rollout, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, nameError("namespace", err)
	}
	if seq != 0 {
		r, err := s.st.Rollout(ctx, ns, seq)
		if err != nil {
			return nil, withField(s.apiError(ctx, err), "version")
		}
		return r, nil
	}
	rs, err := s.st.Rollouts(ctx, ns)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	if len(rs) == 0 {
		return nil, apierror.New(codes.NotFound, apierror.ReasonNotFound, "namespace",
			"%s has no rollout: a namespace's first version goes everywhere at once, and a control started with --rollouts=false runs none", ns)
	}
	return rs[len(rs)-1], nil
}

// GetRollout returns one rollout: a version's, or a namespace's latest.
func (s *Service) GetRollout(ctx context.Context, req *lehrpb.GetRolloutRequest) (_ *lehrpb.Rollout, err error) {
	defer s.track(ctx, "GetRollout", time.Now(), &err)
	return s.rolloutOf(ctx, req.GetNamespace(), req.GetVersion())
}

// ListRollouts lists rollouts of one namespace or of all.
func (s *Service) ListRollouts(ctx context.Context, req *lehrpb.ListRolloutsRequest) (_ *lehrpb.ListRolloutsResponse, err error) {
	defer s.track(ctx, "ListRollouts", time.Now(), &err)
	if ns := req.GetNamespace(); ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, nameError("namespace", err)
		}
	}
	rs, err := s.st.Rollouts(ctx, req.GetNamespace())
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	out := &lehrpb.ListRolloutsResponse{}
	for _, r := range rs {
		st := r.GetState()
		if req.GetActiveOnly() && st != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING && st != lehrpb.RolloutState_ROLLOUT_STATE_PAUSED {
			continue
		}
		out.Rollouts = append(out.Rollouts, r)
	}
	return out, nil
}

// ListRolloutEvents returns a rollout's event log.
func (s *Service) ListRolloutEvents(ctx context.Context, req *lehrpb.ListRolloutEventsRequest) (_ *lehrpb.ListRolloutEventsResponse, err error) {
	defer s.track(ctx, "ListRolloutEvents", time.Now(), &err)
	r, err := s.rolloutOf(ctx, req.GetNamespace(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	evs, err := s.st.RolloutEvents(ctx, r.GetNamespace(), r.GetVersion())
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.ListRolloutEventsResponse{Events: evs}, nil
}

// UpdateRollout queues an operator's action for the strategist.
func (s *Service) UpdateRollout(ctx context.Context, req *lehrpb.UpdateRolloutRequest) (_ *lehrpb.Rollout, err error) {
	defer s.track(ctx, "UpdateRollout", time.Now(), &err)
	switch req.GetAction() {
	case lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME,
		lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE:
	default:
		return nil, invalid(apierror.ReasonInvalidArgument, "action", "action %v: want PAUSE, RESUME, ABORT or PROMOTE", req.GetAction())
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	r, err := s.rolloutOf(ctx, req.GetNamespace(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	if st := r.GetState(); st != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING && st != lehrpb.RolloutState_ROLLOUT_STATE_PAUSED {
		return nil, apierror.New(codes.FailedPrecondition, apierror.ReasonInvalidArgument, "version",
			"rollout %s is %s: only a running or paused rollout can be changed", r.GetId(), strings.ToLower(strings.TrimPrefix(st.String(), "ROLLOUT_STATE_")))
	}
	c := s.attribute(ctx, req.GetAuthor())
	cmd := &lehrpb.RolloutCommand{RolloutId: r.GetId(), Action: req.GetAction(), Author: c.author,
		Message: req.GetMessage(), Time: timestamppb.New(s.now())}
	if err := s.st.QueueRolloutCommand(ctx, r.GetNamespace(), r.GetVersion(), cmd); err != nil {
		return nil, s.apiError(ctx, err)
	}
	s.log.Info("rollout command queued", "rollout", r.GetId(), "action", req.GetAction(), "author", cmd.GetAuthor())
	return r, nil
}
