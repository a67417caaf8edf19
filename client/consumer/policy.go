package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"

	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

// ErrNoPolicy is returned by Evaluate on a subscription that has no
// version yet, or whose namespace is not a policy namespace.
var ErrNoPolicy = errors.New("consumer: no policy to evaluate")

// compiled is a view's rules, compiled the first time the view is asked
// to decide.
type compiled struct {
	once sync.Once
	set  *policy.Set
	err  error
}

// Evaluate decides for in with the rules of the current version of a
// policy namespace (docs/design.md, "Policy decisions"): the first deny
// rule that matches denies, else the first allow rule that matches
// allows, else the default denies. Rules are compiled once per version,
// on the first Evaluate after it arrived. A rule that fails to evaluate
// fails closed: the decision is deny, with the error (wrapping
// policy.ErrEval). Safe for concurrent use.
//
// The experiments being previewed for the policy (docs/preview.md) are
// evaluated on the same input, never enforced: each result is counted
// against the live one and disagreements are logged to
// Options.DecisionLog. The first Evaluate starts following the policy's
// preview namespace; experiments apply from when it arrives.
func (s *Subscription) Evaluate(ctx context.Context, in policy.Input) (policy.Decision, error) {
	v := s.View()
	deny := policy.Decision{Effect: policy.EffectDeny}
	switch {
	case v.Version() == 0:
		return deny, fmt.Errorf("%w: %s has no version yet (wait with Next or OnChange)", ErrNoPolicy, s.ns)
	case v.Kind() != lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY:
		return deny, fmt.Errorf("%w: %s is a %s namespace, not a policy one", ErrNoPolicy, s.ns, v.Kind())
	}
	set, err := v.policySet(s.c.policyEnv)
	if err != nil {
		return deny, fmt.Errorf("consumer: %s version %d: %w", s.ns, v.Version(), err)
	}
	d, err := set.Evaluate(ctx, in)
	if p := s.previewer(); p != nil {
		p.count(d)
		p.evaluate(ctx, v, set, d, in)
	}
	return d, err
}

// policySet returns the view's rules compiled in the environment env
// returns.
func (v *View) policySet(env func() (*cel.Env, error)) (*policy.Set, error) {
	v.policy.once.Do(func() {
		var e *cel.Env
		if e, v.policy.err = env(); v.policy.err == nil {
			v.policy.set, v.policy.err = policy.CompileSet(e, v.snap.Props())
		}
	})
	return v.policy.set, v.policy.err
}
