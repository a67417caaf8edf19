package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"lehr.dev/lehr/internal/content"
)

func rule(key, effect, cond string) content.Property {
	return content.Property{Key: key, Value: fmt.Appendf(nil, `{"effect": %q, "condition": %q}`, effect, cond)}
}

func TestSetDecides(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	set, err := CompileSet(env, []content.Property{
		rule("admins", "allow", `principal.role == "admin"`),
		rule("blocked", "deny", `principal.user in ["mallory"]`),
		rule("readers", "allow", `request.method == "GET"`),
		rule("strict", "deny", `request.size > 1000`),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in      Input
		want    Decision
		wantErr bool
	}{
		{"an allow rule matches", Input{Request: map[string]any{"method": "GET", "size": 10}, Principal: map[string]any{"role": "dev", "user": "bob"}}, Decision{EffectAllow, "readers"}, false},
		{"the first allow in key order", Input{Request: map[string]any{"method": "GET", "size": 10}, Principal: map[string]any{"role": "admin", "user": "ann"}}, Decision{EffectAllow, "admins"}, false},
		{"deny overrides allow", Input{Request: map[string]any{"method": "GET", "size": 10}, Principal: map[string]any{"role": "admin", "user": "mallory"}}, Decision{EffectDeny, "blocked"}, false},
		{"nothing matches: default deny", Input{Request: map[string]any{"method": "POST", "size": 10}, Principal: map[string]any{"role": "dev", "user": "bob"}}, Decision{EffectDeny, ""}, false},
		{"an evaluation error fails closed", Input{Request: map[string]any{"method": "GET"}, Principal: map[string]any{"role": "admin", "user": "ann"}}, Decision{EffectDeny, "strict"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := set.Evaluate(context.Background(), tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("Evaluate = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrEval) {
				t.Errorf("error %v does not wrap ErrEval", err)
			}
		})
	}
	if set.Len() != 4 {
		t.Errorf("Len = %d; want 4", set.Len())
	}
	if _, err := CompileSet(env, []content.Property{rule("bad", "allow", `request.x +`)}); err == nil || !strings.Contains(err.Error(), `rule "bad"`) {
		t.Errorf("CompileSet of a broken rule: %v; want an error naming it", err)
	}
}

// BenchmarkEvaluate measures one decision on typical rule sets: 10 and
// 1,000 rules of the shape services write (attribute comparisons and
// list membership), where the deciding rule comes last, so every rule is
// evaluated. bench/RESULTS.md records the figures.
func BenchmarkEvaluate(b *testing.B) {
	env, err := NewEnv()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 1000} {
		var props []content.Property
		for i := range n - 1 {
			props = append(props, rule(fmt.Sprintf("r%04d", i), "deny",
				fmt.Sprintf(`principal.team == "team-%d" && request.path.startsWith("/admin/%d")`, i, i)))
		}
		props = append(props, rule("z-allow", "allow", `request.method in ["GET", "HEAD"] && principal.tier != "blocked"`))
		set, err := CompileSet(env, props)
		if err != nil {
			b.Fatal(err)
		}
		in := Input{Request: map[string]any{"method": "GET", "path": "/api/orders"}, Principal: map[string]any{"team": "payments", "tier": "gold"}}
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				d, err := set.Evaluate(ctx, in)
				if err != nil || !d.Allowed() {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
	}
}

// TestNoOpSetAllows: a policy with no rules is the no-op policy (AIP-236's
// live side of a new policy, and the experiment side of a deletion).
func TestNoOpSetAllows(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	set, err := CompileSet(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := set.Evaluate(context.Background(), Input{Request: map[string]any{"anything": 1}})
	if err != nil || got != (Decision{Effect: EffectAllow}) {
		t.Errorf("no-op Evaluate = %+v, %v; want allow by no rule", got, err)
	}
}

func TestSensitivePaths(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	ok := content.Property{Key: "cards", Value: []byte(`{"effect": "deny", "condition": "request.card.number.startsWith(\"4\")", "sensitive": ["request.card.number", "principal.token"]}`)}
	set, err := CompileSet(env, []content.Property{ok, rule("all", "allow", "true")})
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Sensitive(); len(got) != 2 || got[0] != "request.card.number" || got[1] != "principal.token" {
		t.Errorf("Sensitive = %q", got)
	}
	for _, bad := range []string{`"card"`, `"request"`, `"header.x"`, `"request..x"`, `"request.x."`} {
		p := content.Property{Key: "r", Value: []byte(`{"effect": "deny", "condition": "true", "sensitive": [` + bad + `]}`)}
		if _, err := ParseRule(p); err == nil || !strings.Contains(err.Error(), "sensitive[0]") {
			t.Errorf("sensitive %s: error %v; want one naming sensitive[0]", bad, err)
		}
	}
}
