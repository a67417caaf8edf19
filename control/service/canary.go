package service

import (
	"context"
	"errors"
	"time"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Evaluate starts a canary evaluation, or returns the one with the same id
// unchanged. The leading strategist judges it at each look of its bake.
func (s *Service) Evaluate(ctx context.Context, req *lehrpb.EvaluateRequest) (_ *lehrpb.CanaryEvaluation, err error) {
	defer s.track(ctx, "Evaluate", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	if req.GetVersion() == 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "version", "version is required: the version the canary hosts hold")
	}
	id := store.EvaluationID(req.GetNamespace(), req.GetVersion(), req.GetName())
	if _, _, _, err := store.ParseEvaluationID(id); err != nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "name", "%v", err)
	}
	for i, t := range req.GetTrials() {
		if err := names.Zone(t.GetZone()); err != nil {
			return nil, nameError(propField("trials", i, "zone"), err)
		}
	}
	ev, err := s.evals.Create(ctx, &lehrpb.CanaryEvaluation{
		Id: id, Namespace: req.GetNamespace(), Version: req.GetVersion(), Trials: req.GetTrials(),
		Config: req.GetConfig(), ChangeTime: req.GetChangeTime(), Bake: req.GetBake(),
	})
	if err != nil {
		var fe *evaluation.FieldError
		if errors.As(err, &fe) {
			return nil, invalid(apierror.ReasonInvalidArgument, fe.Field, "%s", fe.Message)
		}
		return nil, s.apiError(ctx, err)
	}
	return ev, nil
}

// GetCanaryEvaluation returns an evaluation; with wait, once it is DONE or
// at the call's deadline.
func (s *Service) GetCanaryEvaluation(ctx context.Context, req *lehrpb.GetCanaryEvaluationRequest) (_ *lehrpb.CanaryEvaluation, err error) {
	defer s.track(ctx, "GetCanaryEvaluation", time.Now(), &err)
	if _, _, _, err := store.ParseEvaluationID(req.GetId()); err != nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "id", "%v", err)
	}
	ev, err := s.evals.Get(ctx, req.GetId(), req.GetWait())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "id")
	}
	return ev, nil
}

// ListCanaryEvaluations lists the evaluations of a namespace, or of all.
func (s *Service) ListCanaryEvaluations(ctx context.Context, req *lehrpb.ListCanaryEvaluationsRequest) (_ *lehrpb.ListCanaryEvaluationsResponse, err error) {
	defer s.track(ctx, "ListCanaryEvaluations", time.Now(), &err)
	if ns := req.GetNamespace(); ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, nameError("namespace", err)
		}
	}
	evs, err := s.evals.List(ctx, req.GetNamespace())
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.ListCanaryEvaluationsResponse{Evaluations: evs}, nil
}
