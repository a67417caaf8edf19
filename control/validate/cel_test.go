package validate

import (
	"context"
	"strconv"
	"strings"
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
	overCost := func(key string) *Violation {
		v := failed(key)
		v.Limit = "1000000 cost units per evaluation"
		return v
	}
	list := make([]string, 1000)
	for i := range list {
		list[i] = strconv.Itoa(i)
	}
	l := "[" + strings.Join(list, ",") + "]"
	nestedMap := l + ".map(x, " + l + ".map(y, x * y)).size() > 0"
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
		// Over policy.MaxCost on every evaluation: refused, naming the rule,
		// its estimated cost and the limit.
		{name: "over the cost limit", changed: []content.Property{rule("ok", `{"effect": "allow", "condition": "true"}`),
			rule("deny/costly", `{"effect": "deny", "condition": "`+nestedMap+`"}`)},
			want: overCost("deny/costly"), wantIn: []string{`invalid policy rule in namespace "pay/admission"`, `condition of rule "deny/costly" costs at least`, "limit of 1000000"}},
		{name: "over the cost limit on some inputs only", changed: []content.Property{
			rule("allow/some", `{"effect": "allow", "condition": "request.items.all(x, request.items.all(y, x != y))"}`)}},
	}
	for _, tt := range tests {
		got := vs[0].Validate(context.Background(), ns, tt.changed)
		checkViolation(t, tt.name, got, tt.want, tt.wantIn)
	}
}
