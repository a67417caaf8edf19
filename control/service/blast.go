package service

// Global blasts at publish (issue 29): under the rollout strategist a
// version whose policy is a global blast does not wait for the
// strategist's next round — nor, after a leader died, for the next leader
// (its election lease, 5 s) — to reach the hosts. The publish's own
// commit starts its rollout as the strategist would (rollout.AtPublish):
// the version, every zone's goal, the rollout record entered in its only
// stage and the rollout in flight it supersedes are one etcd transaction
// (store.RolloutAtCommit). The strategist then finds the rollout started
// and steps it on the evidence as any other: health gates, rollback,
// success. A freeze window or a max_concurrent still makes the strategist
// start it (Admit's waits), as before.

import (
	"context"
	"strings"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// commitVersion commits c with commit (the store's Commit), starting the
// version's rollout in the commit when its policy is a global blast
// (atPublish).
func (s *Service) commitVersion(ctx context.Context, commit func(context.Context, store.Commit) (*lehrpb.VersionInfo, error), c store.Commit) (*lehrpb.VersionInfo, error) {
	p := s.atPublish(&c)
	info, err := commit(ctx, c)
	if err == nil {
		p.done(ctx)
	}
	return info, err
}

// atPublish lets c start its version's rollout when the strategist would
// otherwise (c leaves goals alone: GoalsNone) and the policy says a
// global blast. Call its done after c committed.
func (s *Service) atPublish(c *store.Commit) *publishRollout {
	if c.Goals != store.GoalsNone {
		return nil // every zone at once already, or no rollouts at all
	}
	checks := c.ExpectedChecks
	c.Rollout = &store.RolloutAtCommit{Decide: func(in store.CommitRollout) (*store.StartedRollout, error) {
		p, src, gen := s.policyInEffect(in.NamespacePolicy, in.DomainPolicy)
		d, ok, err := rollout.AtPublish(rollout.PublishInput{
			Info: in.Info, Zones: in.Zones, Policy: p, Source: src, Generation: gen,
			ExpectedChecks: checks, Read: in.Read, Now: in.Now,
		})
		if err != nil || !ok {
			return nil, err
		}
		return d.Records(), nil
	}}
	return &publishRollout{s: s, at: c.Rollout}
}

// publishRollout is a commit's rollout started at publish.
type publishRollout struct {
	s  *Service
	at *store.RolloutAtCommit
}

// done does, after the commit, what the strategist does after it starts a
// rollout: audit its goal moves, and tell RolloutEnded of the rollout it
// superseded. A nil p, or a commit that started nothing, does nothing.
func (p *publishRollout) done(ctx context.Context) {
	if p == nil || p.at.Started == nil {
		return
	}
	s := p.s
	for _, rr := range p.at.Started.Rollouts {
		r := rr.Rollout
		if !rollout.Active(r) {
			s.log.Info("rollout superseded", "rollout", r.GetId(), "by", "publish")
			s.RolloutEnded(ctx, r)
			continue
		}
		var msgs, zones []string
		for _, e := range rr.Events {
			msgs = append(msgs, e.GetKind()+": "+e.GetMessage())
		}
		for _, g := range p.at.Started.Goals {
			zones = append(zones, g.GetZone())
		}
		d, _, _ := strings.Cut(r.GetNamespace(), "/")
		// As the strategist audits its goal moves (strategist.audit).
		s.Audit(&lehrpb.AuditRecord{Method: "MoveGoals", Author: rollout.Author, TransportIdentity: "rollout " + r.GetId(),
			Target: r.GetNamespace(), Domain: d, Version: r.GetVersion(),
			Message: strings.Join(msgs, "; ") + " (goals of " + strings.Join(zones, ", ") + ")"})
		s.log.Info("rollout started at publish: a global blast, every zone at once", "rollout", r.GetId(), "zones", len(zones))
	}
}
