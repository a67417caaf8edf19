// Package policy is the rule model of Lehr's policy namespaces: the format
// of one rule (an effect and a CEL condition), its parsing and compilation
// in the one CEL environment, a namespace's version compiled as a Set that
// decides "deny overrides", and the masking of sensitive input in a
// decision log (Mask). Control admits every rule at publish (Admit:
// compiles it, and refuses a condition over MaxCost on every evaluation;
// control/validate); consumers evaluate the same compiled rules on real
// traffic, and shadow-evaluate a previewed policy beside the live one
// (package preview holds preview's model).
//
// It is a leaf: it imports no role package of Lehr. Imported by
// control/validate, client/consumer, preview and cmd/lehr.
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/jsonyaml"
)

// Effect is what a policy rule decides when its condition holds.
type Effect string

// Effects of a rule.
const (
	EffectAllow Effect = "allow"
	EffectDeny  Effect = "deny"
)

// Rule is one rule of a policy namespace. Each property of a policy
// namespace holds exactly one rule; the property key names the rule. The
// value is a JSON or YAML document with these fields and no others:
//
//	effect       "allow" or "deny" (required)
//	condition    a CEL expression of type bool (required)
//	description  free text for operators (optional)
//	sensitive    input fields the rule reads that decision logs must never
//	             show, as paths "request.<key>[.<key>...]" or
//	             "principal.<key>..." (optional; see Mask)
//
// The property's content type is application/json (or a "+json" type),
// application/yaml (or application/x-yaml, text/yaml, a "+yaml" type), or
// empty, which means "JSON if it parses as JSON, else YAML".
//
// The condition is compiled in the environment NewEnv returns: the CEL
// standard library and three variables,
//
//	request    map(string, dyn)  attributes of the request being decided
//	principal  map(string, dyn)  attributes of the caller
//	now        timestamp         the time of the decision
//
// and its type must be bool (an expression of type dyn, such as
// request.admin, must be compared explicitly: request.admin == true).
// A Set combines the rules of a namespace into decisions (deny overrides
// allow; no match denies; no rules at all is the no-op policy, which
// allows).
type Rule struct {
	Effect      Effect   `json:"effect"`
	Condition   string   `json:"condition"`
	Description string   `json:"description,omitempty"`
	Sensitive   []string `json:"sensitive,omitempty"`
}

// ParseRule decodes and checks the rule held by p: the document must be
// JSON or YAML as its content type says, have no unknown fields, an effect
// of "allow" or "deny" and a non-empty condition. It does not compile the
// condition; see Compile.
func ParseRule(p content.Property) (Rule, error) {
	var doc []byte
	ct := p.ContentType
	if ct == "" {
		if json.Valid(p.Value) {
			doc = p.Value
		} else {
			j, err := jsonyaml.YAMLToJSON(p.Value)
			if err != nil {
				return Rule{}, fmt.Errorf("rule %q is neither JSON nor YAML (%w); want a document like {\"effect\": \"allow\", \"condition\": \"<CEL expression>\"}", p.Key, err)
			}
			doc = j
		}
	} else {
		mediaType, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return Rule{}, fmt.Errorf("rule %q: invalid content type %q: %w", p.Key, ct, err)
		}
		f := jsonyaml.FormatOf(mediaType)
		if f != jsonyaml.JSON && f != jsonyaml.YAML {
			return Rule{}, fmt.Errorf("rule %q has content type %q; policy rules must be %s, %s, or have no content type", p.Key, ct, jsonyaml.JSONForms, jsonyaml.YAMLForms)
		}
		j, err := jsonyaml.ToJSON(f, p.Value)
		if err != nil {
			return Rule{}, fmt.Errorf("rule %q: %w", p.Key, err)
		}
		doc = j
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	var r Rule
	if err := dec.Decode(&r); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w; want an object with fields effect, condition and optional description", p.Key, err)
	}
	switch r.Effect {
	case EffectAllow, EffectDeny:
	case "":
		return Rule{}, fmt.Errorf("rule %q: missing effect; want \"allow\" or \"deny\"", p.Key)
	default:
		return Rule{}, fmt.Errorf("rule %q: effect %q; want \"allow\" or \"deny\"", p.Key, r.Effect)
	}
	if r.Condition == "" {
		return Rule{}, fmt.Errorf("rule %q: missing condition; want a CEL expression of type bool over request, principal and now", p.Key)
	}
	for i, path := range r.Sensitive {
		if err := checkPath(path); err != nil {
			return Rule{}, fmt.Errorf("rule %q: sensitive[%d]: %w", p.Key, i, err)
		}
	}
	return r, nil
}

// checkPath checks a sensitive-field path: "request" or "principal", then
// one or more non-empty map keys, separated by dots.
func checkPath(path string) error {
	root, rest, ok := strings.Cut(path, ".")
	if !ok || (root != "request" && root != "principal") {
		return fmt.Errorf("path %q: want \"request.<key>\" or \"principal.<key>\" (keys of nested maps separated by dots)", path)
	}
	for _, k := range strings.Split(rest, ".") {
		if k == "" {
			return fmt.Errorf("path %q has an empty key", path)
		}
	}
	return nil
}

// NewEnv returns the CEL environment policy conditions compile in: the
// standard library and the variables request, principal (both
// map(string, dyn)) and now (timestamp). The environment is safe for
// concurrent use; build it once and share it.
func NewEnv() (*cel.Env, error) {
	env, err := cel.NewEnv(
		cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("principal", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("now", cel.TimestampType),
	)
	if err != nil {
		return nil, fmt.Errorf("policy: build the rule environment: %w", err)
	}
	return env, nil
}

// MaxCost bounds the runtime cost of evaluating one condition, in CEL
// cost units (roughly one per operation or per element traversed). An
// evaluation that exceeds it fails rather than stalling the caller.
const MaxCost = 1_000_000

// CompiledRule is a rule whose condition is compiled and ready to evaluate.
// It is safe for concurrent use.
type CompiledRule struct {
	Rule
	// Key is the property key the rule came from.
	Key     string
	program cel.Program
}

// Compile compiles r.Condition in env (from NewEnv). key names the
// rule in error messages. The error text is CEL's, with line, column and a
// caret under the problem; a condition whose type is not bool is an error.
func Compile(env *cel.Env, key string, r Rule) (*CompiledRule, error) {
	_, c, err := compile(env, key, r)
	return c, err
}

// programOptions are how every condition is planned. OptOptimize folds
// constants at plan time (a literal list in an "in" becomes a set
// lookup): the rule is planned once and evaluated often.
func programOptions(extra ...cel.EvalOption) []cel.ProgramOption {
	return []cel.ProgramOption{cel.CostLimit(MaxCost), cel.InterruptCheckFrequency(100), cel.EvalOptions(append([]cel.EvalOption{cel.OptOptimize}, extra...)...)}
}

// compile is Compile, also returning the checked AST.
func compile(env *cel.Env, key string, r Rule) (*cel.Ast, *CompiledRule, error) {
	ast, iss := env.CompileSource(common.NewStringSource(r.Condition, key))
	if err := iss.Err(); err != nil {
		return nil, nil, fmt.Errorf("condition of rule %q does not compile: %w", key, err)
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, nil, fmt.Errorf("condition of rule %q has type %s, want bool; compare explicitly, e.g. request.flag == true", key, t)
	}
	prg, err := env.Program(ast, programOptions()...)
	if err != nil {
		return nil, nil, fmt.Errorf("plan condition of rule %q: %w", key, err)
	}
	return ast, &CompiledRule{Rule: r, Key: key, program: prg}, nil
}

// Input is what a condition sees. Nil maps are treated as empty; a zero Now
// is passed as the zero time.
type Input struct {
	Request   map[string]any
	Principal map[string]any
	Now       time.Time
}

// ErrEval is wrapped by errors evaluating a condition (a missing map key,
// a type mismatch at runtime, the cost limit, a canceled context).
var ErrEval = errors.New("policy: evaluate rule")

// Matches evaluates the rule's condition on in and reports whether it holds.
// ctx cancels a long evaluation.
func (r *CompiledRule) Matches(ctx context.Context, in Input) (bool, error) {
	return r.matches(ctx, map[string]any{
		"request":   orEmpty(in.Request),
		"principal": orEmpty(in.Principal),
		"now":       in.Now,
	})
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
