package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// constList is the CEL literal [0, 1, …, n-1].
func constList(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// Admit refuses a condition that is over the cost limit on every
// evaluation, and only such a condition: the table's refused rules fail
// every evaluation at the hosts (checked below), the admitted ones are
// cheap on some input (or on every one).
func TestAdmitCost(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	l := constList(1000)
	tests := []struct {
		name, cond string
		refused    bool
	}{
		{"constant", "true", false},
		{"ordinary", "request.method == 'GET' && 'admin' in principal.groups", false},
		{"time", "now.getHours('UTC') < 6 && request.method != 'GET'", false},
		{"comprehension over input", "principal.groups.exists(g, g.startsWith('ops-'))", false},
		{"nested comprehension over input", "request.items.all(x, request.items.all(y, x != y || x == y))", false},
		{"comprehension over a constant list", l + ".exists(x, x == request.n)", false},
		// Over the limit on some inputs only: exists stops at the first match.
		{"nested exists over constant lists", l + ".exists(x, " + l + ".exists(y, x * y == request.n))", false},
		// Estimated over (a linear "in" per element), cheap as hosts plan it
		// (a set lookup).
		{"in a constant list, per element", l + ".map(x, x in " + l + ").size() > 0", false},
		{"nested map over constant lists", l + ".map(x, " + l + ".map(y, x * y)).size() > 0", true},
		{"nested map reading input", l + ".map(x, " + l + ".map(y, x * y + request.n)).size() > principal.k", true},
		{"nested filter", l + ".filter(x, " + l + ".filter(y, x < y).size() > 0).size() > 0", true},
	}
	for _, tt := range tests {
		r := Rule{Effect: EffectDeny, Condition: tt.cond}
		c, err := Admit(context.Background(), env, "deny/costly", r)
		var ce *CostError
		switch {
		case tt.refused && !errors.As(err, &ce):
			t.Errorf("%s: Admit = %v; want a *CostError", tt.name, err)
			continue
		case !tt.refused && (err != nil || c == nil):
			t.Errorf("%s: Admit = %v; want it admitted", tt.name, err)
			continue
		case !tt.refused:
			continue
		}
		if ce.Key != "deny/costly" || ce.Min <= MaxCost {
			t.Errorf("%s: %+v; want the rule's key and an estimate over %d", tt.name, ce, MaxCost)
		}
		for _, want := range []string{`rule "deny/costly"`, fmt.Sprintf("at least %d", ce.Min), fmt.Sprintf("limit of %d", MaxCost)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", tt.name, err, want)
			}
		}
		// What the refusal claims: at the hosts, every evaluation fails.
		hostRule, err := Compile(env, "deny/costly", r)
		if err != nil {
			t.Fatalf("%s: Compile: %v", tt.name, err)
		}
		for _, in := range []Input{{Request: map[string]any{"n": 1}, Principal: map[string]any{"k": 0}}, {Request: map[string]any{"n": 7}, Principal: map[string]any{"k": 3}}} {
			if ok, err := hostRule.Matches(context.Background(), in); !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), "cost limit") {
				t.Errorf("%s: at a host on %v: %v, %v; want the cost limit", tt.name, in, ok, err)
			}
		}
	}
}

// Admit reports what Compile reports for a condition that does not compile.
func TestAdmitCompileErrors(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Admit(context.Background(), env, "r", Rule{Effect: EffectAllow, Condition: "request.size + 1"})
	if err == nil || !strings.Contains(err.Error(), "want bool") {
		t.Errorf("Admit(non-bool) = %v; want Compile's error", err)
	}
}
