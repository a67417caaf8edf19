package validate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/jsonyaml"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

// Validator is a namespace-specific check. Validate sees the properties
// that a publish adds or changes (all of them for a snapshot) and the
// namespace they belong to.
type Validator interface {
	// Name identifies the validator in errors and metrics, e.g. "jsonschema".
	Name() string
	Validate(ctx context.Context, ns *lehrpb.Namespace, changed []content.Property) *Violation
}

// Validator names.
const (
	NameJSONSchema = "jsonschema"
	NameCEL        = "cel"
)

// For returns the validators that apply to ns: JSON Schema if the namespace
// has one, CEL rule compilation for policy namespaces. An invalid schema is
// a *Violation on field "json_schema".
//
// For compiles from scratch on every call; servers should keep one Registry
// and call its For method, which caches.
func For(ns *lehrpb.Namespace) ([]Validator, *Violation) {
	return NewRegistry(Options{}).For(ns)
}

// Options configure a Registry. The zero value is valid.
type Options struct {
	// MaxSchemas bounds how many compiled JSON Schemas are cached. Zero
	// means 1024. When full, an arbitrary entry is evicted.
	MaxSchemas int
}

// Registry builds validators for namespaces and caches what they compile:
// JSON Schemas by schema text, and the CEL environment for policy rules.
// It is safe for concurrent use. The zero Registry is not usable; use
// NewRegistry.
type Registry struct {
	maxSchemas int

	envOnce sync.Once
	env     *cel.Env
	envErr  error

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema // by schema text
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) *Registry {
	if opts.MaxSchemas <= 0 {
		opts.MaxSchemas = 1024
	}
	return &Registry{maxSchemas: opts.MaxSchemas, schemas: make(map[string]*jsonschema.Schema)}
}

// For returns the validators that apply to ns, in order: JSON Schema if
// ns.JsonSchema is set, then CEL rule compilation if ns is a policy
// namespace. It returns no validators for a plain config namespace. A schema
// that does not compile is a *Violation with Field "json_schema", Reason
// apierror.ReasonInvalidArgument and Code InvalidArgument.
func (r *Registry) For(ns *lehrpb.Namespace) ([]Validator, *Violation) {
	var vs []Validator
	if text := ns.GetJsonSchema(); text != "" {
		s, err := r.schema(text)
		if err != nil {
			return nil, &Violation{
				Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidArgument, Field: "json_schema",
				Message: fmt.Sprintf("json_schema of namespace %q is not a valid JSON Schema: %v", ns.GetName(), err),
			}
		}
		vs = append(vs, &schemaValidator{schema: s})
	}
	if ns.GetKind() == lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY {
		env, err := r.ruleEnv()
		if err != nil {
			return nil, &Violation{Code: codes.Internal, Reason: apierror.ReasonInternal, Message: err.Error()}
		}
		vs = append(vs, &celValidator{env: env})
	}
	return vs, nil
}

// CompileSchema compiles a JSON Schema text the way For does, so control can
// reject a bad json_schema when a namespace is created. The error says what
// is wrong.
func (r *Registry) CompileSchema(text string) error {
	_, err := r.schema(text)
	return err
}

func (r *Registry) ruleEnv() (*cel.Env, error) {
	r.envOnce.Do(func() { r.env, r.envErr = policy.NewEnv() })
	return r.env, r.envErr
}

// schemaURL names the namespace's schema inside the compiler. It is never
// fetched.
const schemaURL = "https://lehr.dev/namespace-schema.json"

// errNoRemoteRefs is returned for any $ref outside the schema itself.
var errNoRemoteRefs = errors.New("validate: $ref outside the schema is not allowed; inline the referenced schema or use $defs")

type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) { return nil, errNoRemoteRefs }

// schema returns the compiled schema for text, compiling it on a miss.
func (r *Registry) schema(text string) (*jsonschema.Schema, error) {
	r.mu.Lock()
	s, ok := r.schemas[text]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := compileSchema(text)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.schemas) >= r.maxSchemas {
		for k := range r.schemas {
			delete(r.schemas, k)
			break
		}
	}
	r.schemas[text] = s
	return s, nil
}

func compileSchema(text string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		if se := jsonyaml.CheckJSON([]byte(text)); se != nil {
			err = se
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		var sve *jsonschema.SchemaValidationError
		if errors.As(err, &sve) {
			return nil, fmt.Errorf("does not conform to the JSON Schema meta-schema: %s", schemaErrorText(sve.Err))
		}
		return nil, err
	}
	return s, nil
}

// schemaValidator applies a namespace's JSON Schema to JSON and YAML values.
type schemaValidator struct {
	schema *jsonschema.Schema
}

func (*schemaValidator) Name() string { return NameJSONSchema }

// Validate checks every changed property whose content type is JSON or YAML
// (YAML is converted to JSON first) against the schema. Other content types
// are not checked.
func (v *schemaValidator) Validate(ctx context.Context, ns *lehrpb.Namespace, changed []content.Property) *Violation {
	for _, p := range changed {
		if err := ctx.Err(); err != nil {
			return canceled(err)
		}
		if p.ContentType == "" {
			continue
		}
		mediaType, _, err := mime.ParseMediaType(p.ContentType)
		if err != nil {
			continue // Property reports malformed content types.
		}
		f := jsonyaml.FormatOf(mediaType)
		if f != jsonyaml.JSON && f != jsonyaml.YAML {
			continue
		}
		fail := func(reason, format string, args ...any) *Violation {
			return &Violation{
				Code: codes.InvalidArgument, Reason: reason,
				Key: p.Key, Field: "value", Message: fmt.Sprintf(format, args...),
			}
		}
		j, err := jsonyaml.ToJSON(f, p.Value)
		if err != nil {
			return fail(apierror.ReasonInvalidContent, "value of %q does not match content type %q: %v", p.Key, p.ContentType, err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			return fail(apierror.ReasonInvalidContent, "value of %q is not JSON: %v", p.Key, err)
		}
		if err := v.schema.Validate(inst); err != nil {
			return fail(apierror.ReasonValidationFailed, "value of %q does not match the JSON Schema of namespace %q: %s", p.Key, ns.GetName(), schemaErrorText(err))
		}
	}
	return nil
}

// maxSchemaErrors bounds how many schema failures one message lists.
const maxSchemaErrors = 5

// schemaErrorText flattens a schema validation error into "at '/port': got
// string, want integer; at ..." using the innermost causes.
func schemaErrorText(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var leaves []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e.Error())
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) > maxSchemaErrors {
		more := len(leaves) - maxSchemaErrors
		leaves = append(leaves[:maxSchemaErrors], fmt.Sprintf("and %d more", more))
	}
	return strings.Join(leaves, "; ")
}

// celValidator compiles each changed property of a policy namespace as a
// Rule.
type celValidator struct {
	env *cel.Env
}

func (*celValidator) Name() string { return NameCEL }

// Validate parses and compiles every changed property as a policy Rule,
// and refuses a condition over policy.MaxCost on every evaluation
// (policy.Admit).
func (v *celValidator) Validate(ctx context.Context, ns *lehrpb.Namespace, changed []content.Property) *Violation {
	for _, p := range changed {
		if err := ctx.Err(); err != nil {
			return canceled(err)
		}
		r, err := policy.ParseRule(p)
		if err == nil {
			_, err = policy.Admit(ctx, v.env, p.Key, r)
		}
		if err != nil {
			if ctx.Err() != nil {
				return canceled(ctx.Err())
			}
			viol := &Violation{
				Code: codes.InvalidArgument, Reason: apierror.ReasonValidationFailed,
				Key: p.Key, Field: "value",
				Message: fmt.Sprintf("invalid policy rule in namespace %q: %v", ns.GetName(), err),
			}
			var ce *policy.CostError
			if errors.As(err, &ce) {
				viol.Limit = fmt.Sprintf("%d cost units per evaluation", policy.MaxCost)
			}
			return viol
		}
	}
	return nil
}

// canceled reports a context error as a violation with the matching code.
func canceled(err error) *Violation {
	code := codes.Canceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	return &Violation{Code: code, Reason: apierror.ReasonUnavailable, Message: "validation stopped: " + err.Error()}
}
