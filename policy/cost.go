package policy

import (
	"context"
	"errors"
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/interpreter"
)

// CostError is a rule whose condition exceeds MaxCost on every
// evaluation: hosts would deny every request by it (the cost limit fails
// closed). Admit returns it.
type CostError struct {
	// Key is the rule's property key.
	Key string
	// Min is the estimated cost of the condition's cheapest evaluation.
	Min uint64
}

func (e *CostError) Error() string {
	return fmt.Sprintf("condition of rule %q costs at least %d to evaluate (estimated), over the limit of %d per evaluation: every evaluation would fail, and deny, at the hosts; make it cheaper, e.g. without nested comprehensions over large lists",
		e.Key, e.Min, MaxCost)
}

// Admit is what control checks before it stores a rule: it compiles r as
// Compile does and refuses, with a *CostError, a condition that exceeds
// MaxCost on every evaluation. Hosts compile with Compile, which never
// refuses for cost: a version stored before keeps its meaning there (the
// rule fails closed).
//
// A condition is refused only when both of these exceed MaxCost:
//
//   - cel-go's static estimate of its cheapest evaluation
//     (cel.Env.EstimateCost, minimum): it accounts for every operator
//     that may stop early (&&, ||, ?:, exists, all), so it is a lower
//     bound of the plain program's cost on any input; input of unknown
//     size counts as empty, so a comprehension over request or principal
//     is never what refuses a rule;
//   - one evaluation of the program hosts run, every input unknown (CEL's
//     partial evaluation): the estimate is of the plain program, and the
//     hosts' is optimized — constant lists and maps built once, "in" on a
//     constant list a set lookup — which can cost far less (a 1,000-element
//     list mapped through "x in" the same list: estimated 1,023,023,
//     evaluated 13,003).
//
// The evaluation runs only for a rule the estimate flags, and stops at
// MaxCost or when ctx ends. A condition the estimator cannot estimate is
// admitted; the limit at the hosts still holds.
func Admit(ctx context.Context, env *cel.Env, key string, r Rule) (*CompiledRule, error) {
	ast, c, err := compile(env, key, r)
	if err != nil {
		return nil, err
	}
	est, err := env.EstimateCost(ast, sizeless{})
	if err != nil || est.Min <= MaxCost {
		return c, nil
	}
	over, err := overOnUnknownInput(ctx, env, ast)
	if err != nil {
		return nil, fmt.Errorf("condition of rule %q: confirm its estimated cost: %w", key, err)
	}
	if !over {
		return c, nil
	}
	return nil, &CostError{Key: key, Min: est.Min}
}

// overOnUnknownInput evaluates ast as hosts plan it, with request,
// principal and now unknown, and reports whether it stopped at MaxCost.
func overOnUnknownInput(ctx context.Context, env *cel.Env, ast *cel.Ast) (bool, error) {
	prg, err := env.Program(ast, programOptions(cel.OptPartialEval)...)
	if err != nil {
		return false, err
	}
	vars, err := cel.PartialVars(map[string]any{}, cel.AttributePattern("request"), cel.AttributePattern("principal"), cel.AttributePattern("now"))
	if err != nil {
		return false, err
	}
	_, _, err = prg.ContextEval(ctx, vars)
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	}
	return false, nil // done, or failed for another reason: not provably over
}

// sizeless is the cost estimator of Admit: it knows nothing about the
// size of inputs (nil: cel-go's defaults, under which an input's size is
// unknown, from empty to unbounded).
type sizeless struct{}

func (sizeless) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return nil
}
func (sizeless) EstimateSize(element cost.AstNode) *cost.SizeEstimate { return nil }
