package validate

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

const limitsSchema = `{
  "type": "object",
  "properties": {
    "rps":   {"type": "integer", "minimum": 1},
    "owner": {"type": "string", "format": "email"},
    "zones": {"type": "array", "items": {"$ref": "#/$defs/zone"}}
  },
  "required": ["rps"],
  "additionalProperties": false,
  "$defs": {"zone": {"type": "string", "pattern": "^[a-z0-9-]+$"}}
}`

func validatorNames(vs []Validator) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name())
	}
	return out
}

func TestFor(t *testing.T) {
	config := lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG
	policy := lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY
	badSchema := func() *Violation {
		return &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidArgument, Field: "json_schema"}
	}
	tests := []struct {
		name      string
		ns        *lehrpb.Namespace
		wantNames []string
		want      *Violation
		wantIn    []string
	}{
		{name: "plain config", ns: &lehrpb.Namespace{Name: "d/c", Kind: config}},
		{name: "config with schema", ns: &lehrpb.Namespace{Name: "d/c", Kind: config, JsonSchema: limitsSchema}, wantNames: []string{"jsonschema"}},
		{name: "policy", ns: &lehrpb.Namespace{Name: "d/p", Kind: policy}, wantNames: []string{"cel"}},
		{name: "policy with schema", ns: &lehrpb.Namespace{Name: "d/p", Kind: policy, JsonSchema: `{"type":"object"}`}, wantNames: []string{"jsonschema", "cel"}},
		{name: "schema not json", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"type": `},
			want: badSchema(), wantIn: []string{`json_schema of namespace "d/c" is not a valid JSON Schema`, "invalid JSON at line 1"}},
		{name: "schema breaks metaschema", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"type": 3}`},
			want: badSchema(), wantIn: []string{"does not conform to the JSON Schema meta-schema", "at '/type'"}},
		{name: "schema bad regexp", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"pattern": "(a"}`},
			want: badSchema(), wantIn: []string{"not a valid JSON Schema", "pattern"}},
		{name: "schema remote ref", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"$ref": "https://example.com/s.json"}`},
			want: badSchema(), wantIn: []string{"https://example.com/s.json", "$ref outside the schema is not allowed"}},
		{name: "schema file ref", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"$ref": "file:///etc/passwd"}`},
			want: badSchema(), wantIn: []string{"$ref outside the schema is not allowed"}},
		{name: "schema missing local ref", ns: &lehrpb.Namespace{Name: "d/c", JsonSchema: `{"$ref": "#/$defs/nope"}`},
			want: badSchema(), wantIn: []string{"not a valid JSON Schema"}},
	}
	r := NewRegistry(Options{})
	for _, tt := range tests {
		for _, f := range []struct {
			name string
			fn   func(*lehrpb.Namespace) ([]Validator, *Violation)
		}{{"Registry.For", r.For}, {"For", For}} {
			vs, v := f.fn(tt.ns)
			checkViolation(t, f.name+" "+tt.name, v, tt.want, tt.wantIn)
			if diff := cmp.Diff(tt.wantNames, validatorNames(vs)); diff != "" {
				t.Errorf("%s %s: validators (-want +got):\n%s", f.name, tt.name, diff)
			}
		}
	}
}

func TestSchemaValidator(t *testing.T) {
	ns := &lehrpb.Namespace{Name: "pay/limits", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, JsonSchema: limitsSchema}
	vs, v := NewRegistry(Options{}).For(ns)
	if v != nil || len(vs) != 1 {
		t.Fatalf("For = %v, %v; want one validator", vs, v)
	}
	failed := func(key string) *Violation {
		return &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonValidationFailed, Key: key, Field: "value"}
	}
	prop := func(key, ct, value string) content.Property {
		return content.Property{Key: key, ContentType: ct, Value: []byte(value)}
	}
	tests := []struct {
		name    string
		changed []content.Property
		want    *Violation
		wantIn  []string
	}{
		{name: "nothing changed"},
		{name: "valid json", changed: []content.Property{prop("a", "application/json", `{"rps": 5, "zones": ["us-1"]}`)}},
		{name: "valid yaml", changed: []content.Property{prop("a", "application/yaml", "rps: 5\nowner: ops@example.com\n")}},
		{name: "valid +json", changed: []content.Property{prop("a", "application/vnd.lehr+json", `{"rps": 1}`)}},
		{name: "text not checked", changed: []content.Property{prop("a", "text/plain", "anything")}},
		{name: "opaque not checked", changed: []content.Property{prop("a", "", "anything")}},
		{name: "wrong type", changed: []content.Property{prop("a", "application/json", `{"rps": 5}`), prop("b", "application/json", `{"rps": "many"}`)},
			want: failed("b"), wantIn: []string{`value of "b" does not match the JSON Schema of namespace "pay/limits"`, "at '/rps'", "got string, want integer"}},
		{name: "missing required", changed: []content.Property{prop("a", "application/json", `{}`)},
			want: failed("a"), wantIn: []string{"missing property 'rps'"}},
		{name: "minimum", changed: []content.Property{prop("a", "application/json", `{"rps": 0}`)},
			want: failed("a"), wantIn: []string{"at '/rps'", "minimum"}},
		{name: "additional property", changed: []content.Property{prop("a", "application/json", `{"rps": 1, "rsp": 2}`)},
			want: failed("a"), wantIn: []string{"additional properties 'rsp' not allowed"}},
		{name: "ref pattern in array", changed: []content.Property{prop("a", "application/json", `{"rps": 1, "zones": ["ok", "Not OK"]}`)},
			want: failed("a"), wantIn: []string{"at '/zones/1'", "does not match pattern"}},
		{name: "format asserted", changed: []content.Property{prop("a", "application/json", `{"rps": 1, "owner": "nobody"}`)},
			want: failed("a"), wantIn: []string{"at '/owner'", "email"}},
		{name: "yaml converted", changed: []content.Property{prop("y", "text/yaml", "rps: fast\n")},
			want: failed("y"), wantIn: []string{"at '/rps'", "got string, want integer"}},
		{name: "unparsable json", changed: []content.Property{prop("a", "application/json", `{`)},
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent, Key: "a", Field: "value"},
			wantIn: []string{"invalid JSON"}},
	}
	for _, tt := range tests {
		got := vs[0].Validate(context.Background(), ns, tt.changed)
		checkViolation(t, tt.name, got, tt.want, tt.wantIn)
	}
}

func TestSchemaErrorsAreBounded(t *testing.T) {
	ns := &lehrpb.Namespace{Name: "d/n", JsonSchema: `{"type": "array", "items": {"type": "integer"}}`}
	vs, v := For(ns)
	if v != nil {
		t.Fatalf("For: %v", v)
	}
	got := vs[0].Validate(context.Background(), ns, []content.Property{
		{Key: "a", ContentType: "application/json", Value: []byte(`["a","b","c","d","e","f","g","h"]`)},
	})
	if got == nil {
		t.Fatal("Validate = nil, want a violation")
	}
	checkViolation(t, "bounded", got, &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonValidationFailed, Key: "a", Field: "value"},
		[]string{"at '/0'", "at '/4'", "and 3 more"})
}

func TestRegistryCachesSchemas(t *testing.T) {
	r := NewRegistry(Options{MaxSchemas: 2})
	a, err := r.schema(`{"type": "object"}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.schema(`{"type": "object"}`)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same schema text compiled twice; want one cached *Schema")
	}
	for i := range 5 {
		if _, err := r.schema(fmt.Sprintf(`{"maxLength": %d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	n := len(r.schemas)
	r.mu.Unlock()
	if n != 2 {
		t.Errorf("cache holds %d schemas, want MaxSchemas = 2", n)
	}
}

// TestRegistryConcurrent runs For and Validate from many goroutines; run
// with -race.
func TestRegistryConcurrent(t *testing.T) {
	r := NewRegistry(Options{})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := &lehrpb.Namespace{Name: "d/p", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
				JsonSchema: fmt.Sprintf(`{"type": "object", "maxProperties": %d}`, 10+i%3)}
			vs, v := r.For(ns)
			if v != nil {
				errs <- v.Error()
				return
			}
			changed := []content.Property{{Key: "r", ContentType: "application/json", Value: []byte(`{"effect": "allow", "condition": "request.n > 1"}`)}}
			for _, vd := range vs {
				if v := vd.Validate(context.Background(), ns, changed); v != nil {
					errs <- vd.Name() + ": " + v.Error()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestValidateCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ns := &lehrpb.Namespace{Name: "d/p", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, JsonSchema: `{}`}
	vs, v := For(ns)
	if v != nil {
		t.Fatal(v)
	}
	for _, vd := range vs {
		got := vd.Validate(ctx, ns, []content.Property{{Key: "a", Value: []byte(`{}`)}})
		if got == nil || got.Code != codes.Canceled {
			t.Errorf("%s.Validate(canceled ctx) = %v, want code Canceled", vd.Name(), got)
		}
	}
}
