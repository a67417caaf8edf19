package service

// The committed version's comparison (docs/preview.md, "The committed
// version's canary"): while a committed policy experiment's version rolls
// out, the policy's preview namespace also carries the version it
// replaced (preview.Comparison), so that hosts at the committed version
// count the decisions it changed — the signal the rollout's expected
// check "policy disagreement" reads. syncPreview adds it; the strategist
// calling RolloutEnded makes syncPreview drop it.

import (
	"context"
	"errors"
	"slices"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// expectsDisagreement reports whether checks, a version's expected
// checks, expect the share of decisions it changes: the version is a
// committed experiment whose rollout canaries it.
func expectsDisagreement(checks []*lehrpb.CanaryCheck) bool {
	return slices.ContainsFunc(checks, func(c *lehrpb.CanaryCheck) bool { return c.GetName() == canary.PolicyDisagreementCheckName })
}

// comparison returns the comparison the preview namespace of policy ns
// carries now, nil for none. The rule: the policy's latest version is
// compared with the version it replaced (its parent) while it expects a
// disagreement (a committed experiment's version with a canary; see
// CommitPolicyExperiment) and its rollout has not ended — including
// before the strategist started it, which is when the commit writes the
// comparison, so that it reaches the hosts before the version does.
func (s *Service) comparison(ctx context.Context, ns string) (*preview.Comparison, error) {
	head, err := s.st.GetNamespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	latest := head.GetLatestVersion()
	if latest == 0 || head.GetDeleteTime() != nil {
		return nil, nil
	}
	checks, err := s.st.ExpectedChecks(ctx, ns, latest)
	if err != nil || !expectsDisagreement(checks) {
		return nil, err
	}
	var nf *store.NotFoundError
	switch r, err := s.st.Rollout(ctx, ns, latest); {
	case errors.As(err, &nf): // not started yet
	case err != nil:
		return nil, err
	case !rollout.Active(r):
		return nil, nil
	}
	info, err := s.st.Version(ctx, ns, latest)
	if err != nil {
		return nil, err
	}
	replaced := info.GetParent()
	if replaced == 0 {
		return nil, nil
	}
	_, snap, err := s.st.Content(ctx, ns, replaced)
	if errors.As(err, &nf) {
		// Compacted away: nothing to compare with. The canary analysis
		// then sees no decision change and fails the stage, which is
		// what a rollback of a version whose base is gone must do too.
		s.log.Warn("control: the version a committed experiment replaced is gone; hosts cannot compare with it", "namespace", ns, "version", latest, "replaced", replaced)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &preview.Comparison{Policy: PolicyName(ns), Committed: latest, Replaced: replaced, Rules: snap.Props()}, nil
}

// RolloutEnded is told of every rollout that ended (the strategist's
// strategist.Options.Ended). When it is a committed experiment's, the
// hosts stop comparing the version with the one it replaced: the policy's
// preview namespace is written again, without the comparison. A failure
// is logged; the comparison then stays until the policy's preview
// namespace is next written (any experiment started, stopped, changed,
// committed or deleted), costing the hosts at the version an evaluation
// per decision, as a previewed experiment does.
func (s *Service) RolloutEnded(ctx context.Context, r *lehrpb.Rollout) {
	if !expectsDisagreement(r.GetExpectedChecks()) {
		return
	}
	if err := s.syncPreview(ctx, r.GetNamespace()); err != nil {
		s.log.Warn("control: a committed experiment's rollout ended, but withdrawing its comparison from the hosts failed", "rollout", r.GetId(), "err", err)
	}
}
