package policy

import (
	"context"
	"errors"
	"fmt"

	"cel.dev/cel-go/cel"

	"lehr.dev/lehr/internal/content"
)

// Decision is what a policy decided for one input.
type Decision struct {
	// Effect is allow or deny.
	Effect Effect
	// Rule is the key of the rule that decided; "" when no rule matched
	// and the default (deny) applied.
	Rule string
}

// Allowed reports whether the decision is allow.
func (d Decision) Allowed() bool { return d.Effect == EffectAllow }

// Set is one version of a policy namespace compiled: every rule, ready to
// evaluate. It is safe for concurrent use.
//
// A Set decides by "deny overrides": the first deny rule (in key order)
// whose condition holds denies; otherwise the first allow rule whose
// condition holds allows; otherwise the default denies. A condition that
// fails to evaluate (a missing key, a type mismatch, the cost limit) fails
// closed: the decision is deny by that rule, with the error.
//
// A Set with no rules is the no-op policy: it allows everything, with no
// rule named. It is what a policy is before it has rules (the live side of
// previewing a new policy) and what previewing a deletion compares with
// (AIP-236).
type Set struct {
	deny, allow []*CompiledRule
	sensitive   []string
}

// CompileSet parses and compiles every property of a policy namespace's
// version as a rule, in env (from NewEnv). The first rule that does not
// parse or compile is the error.
func CompileSet(env *cel.Env, props []content.Property) (*Set, error) {
	s := &Set{}
	for _, p := range props {
		r, err := ParseRule(p)
		if err != nil {
			return nil, err
		}
		c, err := Compile(env, p.Key, r)
		if err != nil {
			return nil, err
		}
		s.add(c)
	}
	return s, nil
}

// NewSet returns the set of rules, given in key order.
func NewSet(rules ...*CompiledRule) *Set {
	s := &Set{}
	for _, c := range rules {
		s.add(c)
	}
	return s
}

// add appends a compiled rule (rules are added in key order).
func (s *Set) add(c *CompiledRule) {
	s.sensitive = append(s.sensitive, c.Sensitive...)
	if c.Effect == EffectDeny {
		s.deny = append(s.deny, c)
	} else {
		s.allow = append(s.allow, c)
	}
}

// Len returns the number of rules.
func (s *Set) Len() int { return len(s.deny) + len(s.allow) }

// Sensitive returns the input paths the set's rules mark sensitive, in
// rule order, possibly with repeats. See Mask.
func (s *Set) Sensitive() []string { return s.sensitive }

// Evaluate decides for in. The error, if any, wraps ErrEval and the
// decision is then deny by the rule that failed.
func (s *Set) Evaluate(ctx context.Context, in Input) (Decision, error) {
	if s.Len() == 0 {
		return Decision{Effect: EffectAllow}, nil
	}
	act, err := cel.NewActivation(map[string]any{
		"request":   orEmpty(in.Request),
		"principal": orEmpty(in.Principal),
		"now":       in.Now,
	})
	if err != nil {
		return Decision{Effect: EffectDeny}, fmt.Errorf("%w: %w", ErrEval, err)
	}
	for _, group := range [][]*CompiledRule{s.deny, s.allow} {
		for _, r := range group {
			ok, err := r.matches(ctx, act)
			if err != nil {
				return Decision{Effect: EffectDeny, Rule: r.Key}, err
			}
			if ok {
				return Decision{Effect: r.Effect, Rule: r.Key}, nil
			}
		}
	}
	return Decision{Effect: EffectDeny}, nil
}

// errNotBool is a condition whose result is not a bool (Compile refuses
// those, so only a broken program gets here).
var errNotBool = errors.New("result is not a bool")

func (r *CompiledRule) matches(ctx context.Context, act any) (bool, error) {
	out, _, err := r.program.ContextEval(ctx, act)
	if err != nil {
		return false, fmt.Errorf("%w %q: %w", ErrEval, r.Key, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w %q: %w: %v", ErrEval, r.Key, errNotBool, out)
	}
	return b, nil
}
