package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// checkScope checks a rollout-policy scope: a domain name or a namespace
// ("domain/name"). It returns the domain.
func checkScope(scope string) (string, error) {
	if scope == "" {
		return "", invalid(apierror.ReasonInvalidArgument, "scope", `scope is required: a domain ("payments") for its default, or a namespace ("payments/limits") for its own policy`)
	}
	if !strings.Contains(scope, "/") {
		if err := names.Domain(scope); err != nil {
			return "", nameError("scope", err)
		}
		return scope, nil
	}
	d, _, err := names.Namespace(scope)
	if err != nil {
		return "", nameError("scope", err)
	}
	return d, nil
}

// fleet is what policies are validated against: the registered zones and
// the hosts their distributors report connected now.
func (s *Service) fleet(ctx context.Context) (rollout.Fleet, error) {
	zones, err := s.st.ListZones(ctx)
	if err != nil {
		return rollout.Fleet{}, err
	}
	f := rollout.Fleet{Hosts: map[string]int{}, Alerts: s.alerts, Metrics: s.metricsSource != nil}
	for _, z := range zones {
		f.Zones = append(f.Zones, z.GetName())
		sts, err := s.st.ZoneStatus(ctx, z.GetName())
		if err != nil {
			return rollout.Fleet{}, err
		}
		if len(sts) == 0 {
			continue // no live report: unknown, not zero
		}
		n := 0
		for _, st := range sts {
			n += int(st.GetAgents())
		}
		f.Hosts[z.GetName()] = n
	}
	return f, nil
}

// SetRolloutPolicy validates a policy against the registered zones and
// stores it as its scope's next generation. See the proto for the contract.
func (s *Service) SetRolloutPolicy(ctx context.Context, req *lehrpb.SetRolloutPolicyRequest) (_ *lehrpb.RolloutPolicyRecord, err error) {
	defer s.track(ctx, "SetRolloutPolicy", time.Now(), &err)
	if _, err := checkScope(req.GetScope()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	fleet, err := s.fleet(ctx)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	if err := rollout.Validate("policy", req.GetPolicy(), fleet); err != nil {
		var fe *rollout.FieldError
		if errors.As(err, &fe) {
			return nil, invalid(apierror.ReasonInvalidArgument, fe.Field, "%s", fe.Message).WithCause(err)
		}
		return nil, s.apiError(ctx, err)
	}
	if err := s.checkAfter(ctx, req.GetScope(), req.GetPolicy().GetAfter()); err != nil {
		return nil, err
	}
	rec, err := s.putPolicy(ctx, req.GetScope(), &lehrpb.RolloutPolicyRecord{Policy: req.GetPolicy()}, req.GetAuthor(), req.GetMessage(), req.GetExpectedGeneration())
	if err != nil {
		return nil, err
	}
	s.log.Info("rollout policy set", "scope", req.GetScope(), "generation", rec.GetGeneration(), "author", rec.GetAuthor())
	return rec, nil
}

// maxAfterWalk bounds the namespaces checkAfter visits looking for a cycle
// (one etcd read each): a real chain of dependencies is a few long; a
// tenant cannot make a policy write read the store thousands of times.
const maxAfterWalk = 1000

// checkAfter checks a policy's after (dependency order) against its scope
// and the other namespaces' policies: only a namespace's own policy may
// name namespaces, never itself, and no cycle may form through the
// policies of the namespaces it names (the error names the cycle). Two
// policies closing a cycle set at the same moment are not caught here:
// each rollout then waits for the other, saying so.
func (s *Service) checkAfter(ctx context.Context, scope string, after []string) error {
	if len(after) == 0 {
		return nil
	}
	if !strings.Contains(scope, "/") {
		return invalid(apierror.ReasonInvalidArgument, "policy.after",
			"only a namespace's own policy may name namespaces to roll out after: as domain %s's default it would make each of its namespaces wait, some for themselves; set it on the namespaces that need it (lehr policy set %s/NAME …)", scope, scope)
	}
	for i, ns := range after {
		if ns == scope {
			return invalid(apierror.ReasonInvalidArgument, fmt.Sprintf("policy.after[%d]", i), "%s is the policy's own namespace; a namespace cannot roll out after itself", ns)
		}
	}
	// Depth first through the namespaces' own policies (a domain's
	// default names none), from each one named, looking for scope.
	visited := map[string]bool{}
	var path []string
	var walk func(ns string) ([]string, error)
	walk = func(ns string) ([]string, error) {
		if ns == scope {
			return append(slices.Clone(path), ns), nil
		}
		if visited[ns] {
			return nil, nil
		}
		visited[ns] = true
		if len(visited) > maxAfterWalk {
			return nil, invalid(apierror.ReasonInvalidArgument, "policy.after",
				"the namespaces it names and theirs, transitively, are more than %d; name fewer", maxAfterWalk).WithLimit("%d namespaces", maxAfterWalk)
		}
		rec, err := s.st.RolloutPolicy(ctx, ns)
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		if rec.GetDeleted() {
			return nil, nil
		}
		path = append(path, ns)
		defer func() { path = path[:len(path)-1] }()
		for _, next := range rec.GetPolicy().GetAfter() {
			if cycle, err := walk(next); cycle != nil || err != nil {
				return cycle, err
			}
		}
		return nil, nil
	}
	for i, ns := range after {
		path = []string{scope}
		cycle, err := walk(ns)
		if err != nil {
			return err
		}
		if cycle != nil {
			return invalid(apierror.ReasonInvalidArgument, fmt.Sprintf("policy.after[%d]", i),
				"a cycle: %s; each would wait for the other forever. Remove %s from this policy, or %s from %s's",
				strings.Join(cycle, " → "), ns, cycle[len(cycle)-1], cycle[len(cycle)-2])
		}
	}
	return nil
}

// putPolicy stores rec (a policy or a deletion) with who asked and why,
// mapping store errors to the API's.
func (s *Service) putPolicy(ctx context.Context, scope string, rec *lehrpb.RolloutPolicyRecord, author, message string, gen uint64) (*lehrpb.RolloutPolicyRecord, error) {
	c := s.attribute(ctx, author)
	rec.Author, rec.TransportIdentity, rec.Message = c.author, c.transport, message
	if rec.GetPolicy() != nil { // a deletion frees space; a new policy is content
		if err := s.admitContent(rec); err != nil {
			return nil, err
		}
	}
	out, err := s.st.PutRolloutPolicy(ctx, scope, rec, gen)
	if err != nil {
		return nil, s.policyError(ctx, err)
	}
	return out, nil
}

// DeleteRolloutPolicy removes a scope's policy; the scope falls back to its
// domain's policy or the built-in default. Deleting a policy already
// deleted returns the deletion record, so a retry is harmless.
func (s *Service) DeleteRolloutPolicy(ctx context.Context, req *lehrpb.DeleteRolloutPolicyRequest) (_ *lehrpb.RolloutPolicyRecord, err error) {
	defer s.track(ctx, "DeleteRolloutPolicy", time.Now(), &err)
	if _, err := checkScope(req.GetScope()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	rec, err := s.putPolicy(ctx, req.GetScope(), &lehrpb.RolloutPolicyRecord{Deleted: true}, req.GetAuthor(), req.GetMessage(), req.GetExpectedGeneration())
	if err != nil {
		return nil, err
	}
	if rec == nil { // nothing to delete: say what is there
		cur, err := s.st.RolloutPolicy(ctx, req.GetScope())
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		if cur == nil {
			return nil, apierror.New(codes.NotFound, apierror.ReasonNotFound, "scope", "%s has no rollout policy of its own to delete", req.GetScope())
		}
		return cur, nil
	}
	s.log.Info("rollout policy deleted", "scope", req.GetScope(), "generation", rec.GetGeneration(), "author", rec.GetAuthor())
	return rec, nil
}

// GetRolloutPolicy returns a scope's stored policy and the policy in effect.
func (s *Service) GetRolloutPolicy(ctx context.Context, req *lehrpb.GetRolloutPolicyRequest) (_ *lehrpb.GetRolloutPolicyResponse, err error) {
	defer s.track(ctx, "GetRolloutPolicy", time.Now(), &err)
	dname, err := checkScope(req.GetScope())
	if err != nil {
		return nil, err
	}
	if _, err := s.domainOf(ctx, dname, "scope"); err != nil {
		return nil, s.apiError(ctx, err)
	}
	stored, eff, src, err := s.effectivePolicy(ctx, req.GetScope())
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.GetRolloutPolicyResponse{Stored: stored, Effective: eff, Source: src}, nil
}

// effectivePolicy returns the scope's own live record (nil if none) and the
// policy in effect for it: the namespace's, else its domain's, else the
// built-in default.
func (s *Service) effectivePolicy(ctx context.Context, scope string) (*lehrpb.RolloutPolicyRecord, *lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, error) {
	live := func(scope string) (*lehrpb.RolloutPolicyRecord, error) {
		rec, err := s.st.RolloutPolicy(ctx, scope)
		if err != nil || rec == nil || rec.GetDeleted() {
			return nil, err
		}
		return rec, nil
	}
	own, err := live(scope)
	if err != nil {
		return nil, nil, 0, err
	}
	if d, _, nerr := names.Namespace(scope); nerr == nil {
		if own != nil {
			return own, own.GetPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, nil
		}
		dom, err := live(d)
		if err != nil {
			return nil, nil, 0, err
		}
		if dom != nil {
			return nil, dom.GetPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, nil
		}
	} else if own != nil {
		return own, own.GetPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, nil
	}
	return own, s.defaultPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_BUILT_IN, nil
}

// EffectiveRolloutPolicy returns the rollout policy in effect for namespace
// ns, where it comes from and its generation (0 for the built-in one): the
// strategist's view of the policies.
func (s *Service) EffectiveRolloutPolicy(ctx context.Context, ns string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
	d, _, err := names.Namespace(ns)
	if err != nil {
		return nil, 0, 0, err
	}
	live := func(scope string) (*lehrpb.RolloutPolicyRecord, error) {
		rec, err := s.st.RolloutPolicy(ctx, scope)
		if err != nil || rec.GetDeleted() {
			return nil, err
		}
		return rec, nil
	}
	own, err := live(ns)
	if err != nil {
		return nil, 0, 0, err
	}
	var dom *lehrpb.RolloutPolicyRecord
	if own == nil {
		if dom, err = live(d); err != nil {
			return nil, 0, 0, err
		}
	}
	p, src, gen := s.policyInEffect(own, dom)
	return p, src, gen, nil
}

// policyInEffect is the policy in effect for a namespace whose own live
// policy record is own and whose domain's is dom (nil where none): the
// namespace's, else the domain's, else the built-in default; with where
// it comes from and its generation (0 for the built-in one).
func (s *Service) policyInEffect(own, dom *lehrpb.RolloutPolicyRecord) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64) {
	switch {
	case own != nil:
		return own.GetPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, own.GetGeneration()
	case dom != nil:
		return dom.GetPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, dom.GetGeneration()
	}
	return s.defaultPolicy(), lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_BUILT_IN, 0
}

// defaultPolicy is the built-in policy of a domain that set none.
func (s *Service) defaultPolicy() *lehrpb.RolloutPolicy {
	if s.defPolicy != nil {
		return s.defPolicy
	}
	return rollout.Default()
}

// RolloutPolicyHistory lists a scope's policy changes, newest first.
func (s *Service) RolloutPolicyHistory(ctx context.Context, req *lehrpb.RolloutPolicyHistoryRequest) (_ *lehrpb.RolloutPolicyHistoryResponse, err error) {
	defer s.track(ctx, "RolloutPolicyHistory", time.Now(), &err)
	if _, err := checkScope(req.GetScope()); err != nil {
		return nil, err
	}
	if n := req.GetPageSize(); n < 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "page_size", "page_size is %d; want 0 (meaning 100) to 1000", n)
	}
	recs, err := s.st.RolloutPolicyHistory(ctx, req.GetScope(), req.GetBeforeGeneration(), int(req.GetPageSize()))
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.RolloutPolicyHistoryResponse{Records: recs}, nil
}

// policyError maps a store error of a policy change: a stale generation
// names expected_generation; a missing domain or namespace names scope.
func (s *Service) policyError(ctx context.Context, err error) error {
	var ge *store.GenerationError
	var nf *store.NotFoundError
	switch {
	case errors.As(err, &ge):
		return apierror.New(codes.FailedPrecondition, apierror.ReasonStaleVersion, "expected_generation",
			"the rollout policy of %s is at generation %d, not %d; re-read it and retry", ge.Scope, ge.Current, ge.Expected)
	case errors.As(err, &nf):
		how := "lehr domain create " + nf.Name
		if nf.What == "namespace" {
			how = "lehr push " + nf.Name + " FILE"
		}
		return apierror.New(codes.NotFound, apierror.ReasonNotFound, "scope", "%s %q does not exist; create it first (%s)", nf.What, nf.Name, how)
	}
	return s.apiError(ctx, err)
}
