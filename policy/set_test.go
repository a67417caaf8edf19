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
