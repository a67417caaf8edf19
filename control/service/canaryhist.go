package service

import (
	"context"
	"time"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// GetCanaryHistory returns what the canary judge learned of a namespace's
// checks from its kept evaluations (docs/canary.md, "Learning from
// history"); an empty history when it learned nothing.
func (s *Service) GetCanaryHistory(ctx context.Context, req *lehrpb.GetCanaryHistoryRequest) (_ *lehrpb.CanaryHistory, err error) {
	defer s.track(ctx, "GetCanaryHistory", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	h, err := s.evals.History(ctx, req.GetNamespace())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "namespace")
	}
	return h, nil
}

// ForgetCanaryHistory deletes what the judge learned of a namespace's
// checks, or of one check: the domain's operators (acl.go), audited.
func (s *Service) ForgetCanaryHistory(ctx context.Context, req *lehrpb.ForgetCanaryHistoryRequest) (_ *lehrpb.ForgetCanaryHistoryResponse, err error) {
	defer s.track(ctx, "ForgetCanaryHistory", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	n, freed, err := s.evals.Forget(ctx, store.Guard{}, req.GetNamespace(), req.GetCheck())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "namespace")
	}
	what := "every check"
	if req.GetCheck() != "" {
		what = "check " + req.GetCheck()
	}
	noteAudit(ctx, "forgot %d learned sample(s) of %s, %d bytes", n, what, freed)
	s.log.Info("control: forgot a namespace's canary history", "namespace", req.GetNamespace(), "check", req.GetCheck(),
		"samples", n, "bytes", freed, "by", s.attribute(ctx, "").author)
	return &lehrpb.ForgetCanaryHistoryResponse{SamplesForgotten: int32(n), BytesFreed: freed}, nil
}
