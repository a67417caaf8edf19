package validate

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestCELValidator(t *testing.T) {
	ns := &lehrpb.Namespace{Name: "pay/admission", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY}
	vs, v := NewRegistry(Options{}).For(ns)
	if v != nil || len(vs) != 1 || vs[0].Name() != NameCEL {
		t.Fatalf("For(policy) = %v, %v; want the cel validator", validatorNames(vs), v)
	}
	rule := func(key, body string) content.Property {
		return content.Property{Key: key, ContentType: "application/json", Value: []byte(body)}
	}
	failed := func(key string) *Violation {
		return &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonValidationFailed, Key: key, Field: "value"}
	}
	tests := []struct {
		name    string
		changed []content.Property
		want    *Violation
		wantIn  []string
	}{
		{name: "valid rules", changed: []content.Property{
			rule("deny/off-hours", `{"effect": "deny", "condition": "now.getHours('UTC') < 6 && request.method != 'GET'"}`),
			rule("allow/admins", `{"effect": "allow", "condition": "'admin' in principal.groups"}`),
			{Key: "allow/yaml", ContentType: "application/yaml", Value: []byte("effect: allow\ncondition: request.size < 1024\ndescription: small requests\n")},
		}},
		{name: "syntax error", changed: []content.Property{rule("ok", `{"effect": "allow", "condition": "true"}`), rule("bad", `{"effect": "allow", "condition": "request.user =="}`)},
			want: failed("bad"), wantIn: []string{`invalid policy rule in namespace "pay/admission"`, `condition of rule "bad" does not compile`, "bad:1:", "Syntax error", "^"}},
		{name: "undeclared variable", changed: []content.Property{rule("r", `{"effect": "deny", "condition": "user.name == 'x'"}`)},
			want: failed("r"), wantIn: []string{"undeclared reference to 'user'"}},
		{name: "non-bool output", changed: []content.Property{rule("r", `{"effect": "deny", "condition": "request.size + 1"}`)},
			want: failed("r"), wantIn: []string{"has type", "want bool"}},
		{name: "string output", changed: []content.Property{rule("r", `{"effect": "deny", "condition": "'yes'"}`)},
			want: failed("r"), wantIn: []string{"has type string, want bool"}},
		{name: "dyn output", changed: []content.Property{rule("r", `{"effect": "allow", "condition": "request.admin"}`)},
			want: failed("r"), wantIn: []string{"has type dyn, want bool", "request.flag == true"}},
		{name: "bad effect", changed: []content.Property{rule("r", `{"effect": "maybe", "condition": "true"}`)},
			want: failed("r"), wantIn: []string{`effect "maybe"`, `want "allow" or "deny"`}},
		{name: "not a rule", changed: []content.Property{{Key: "r", ContentType: "application/octet-stream", Value: []byte{0}}},
			want: failed("r"), wantIn: []string{"policy rules must be application/json"}},
	}
	for _, tt := range tests {
		got := vs[0].Validate(context.Background(), ns, tt.changed)
		checkViolation(t, tt.name, got, tt.want, tt.wantIn)
	}
}
