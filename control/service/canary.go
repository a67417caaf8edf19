package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

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
	if err := checkTrials(req.GetTrials()); err != nil {
		return nil, err
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
	return s.withURI(ev), nil
}

// withURI returns ev with its console URI (CanaryEvaluation.uri) set: a
// copy, since ev may be the store's.
func (s *Service) withURI(ev *lehrpb.CanaryEvaluation) *lehrpb.CanaryEvaluation {
	out := proto.CloneOf(ev)
	out.Uri = s.consoleURL + evaluation.ConsolePath(ev.GetId())
	return out
}

// checkTrials checks the trials a caller names: at most
// evaluation.MaxTrials, one per zone, at most evaluation.MaxTrialHosts
// hosts named in all, each id 1 to evaluation.MaxHostIDBytes bytes. The
// strategist's own trials (the hosts of its cohorts) do not pass here.
func checkTrials(trials []*lehrpb.CanaryTrial) error {
	if n := len(trials); n > evaluation.MaxTrials {
		return tooMany("trials", n, evaluation.MaxTrials)
	}
	zones := make(map[string]int, len(trials))
	named := 0
	for i, t := range trials {
		if err := names.Zone(t.GetZone()); err != nil {
			return nameError(propField("trials", i, "zone"), err)
		}
		if j, dup := zones[t.GetZone()]; dup {
			return invalid(apierror.ReasonInvalidArgument, propField("trials", i, "zone"),
				"zone %q has a trial already, trials[%d]; name each zone's hosts in one trial", t.GetZone(), j)
		}
		zones[t.GetZone()] = i
		for _, l := range []struct {
			field string
			hosts []string
		}{{"canary_hosts", t.GetCanaryHosts()}, {"control_hosts", t.GetControlHosts()}} {
			if named += len(l.hosts); named > evaluation.MaxTrialHosts {
				return invalid(apierror.ReasonInvalidArgument, propField("trials", i, l.field),
					"the trials name more than %d hosts; at most %d in all, canary and control hosts together (a trial naming none watches its zone's hosts)",
					evaluation.MaxTrialHosts, evaluation.MaxTrialHosts).WithLimit("%d entries", evaluation.MaxTrialHosts)
			}
			for j, h := range l.hosts {
				if h == "" || len(h) > evaluation.MaxHostIDBytes {
					return invalid(apierror.ReasonInvalidArgument, propField("trials", i, fmt.Sprintf("%s[%d]", l.field, j)),
						"host id is %d bytes; want 1 to %d", len(h), evaluation.MaxHostIDBytes).WithLimit("%d bytes", evaluation.MaxHostIDBytes)
				}
			}
		}
	}
	return nil
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
	return s.withURI(ev), nil
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
	for i, ev := range evs {
		evs[i] = s.withURI(ev)
	}
	return &lehrpb.ListCanaryEvaluationsResponse{Evaluations: evs}, nil
}
