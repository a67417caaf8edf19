package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/internal/content"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		name    string
		ct      string
		value   string
		want    Rule
		wantErr []string
	}{
		{name: "json", ct: "application/json", value: `{"effect": "allow", "condition": "true", "description": "open"}`,
			want: Rule{Effect: EffectAllow, Condition: "true", Description: "open"}},
		{name: "yaml", ct: "application/yaml", value: "effect: deny\ncondition: principal.team != 'ops'\n",
			want: Rule{Effect: EffectDeny, Condition: "principal.team != 'ops'"}},
		{name: "empty type json", value: `{"effect": "deny", "condition": "false"}`,
			want: Rule{Effect: EffectDeny, Condition: "false"}},
		{name: "empty type yaml", value: "effect: allow\ncondition: \"true\"\n",
			want: Rule{Effect: EffectAllow, Condition: "true"}},
		{name: "bad effect", ct: "application/json", value: `{"effect": "permit", "condition": "true"}`,
			wantErr: []string{`effect "permit"`, `want "allow" or "deny"`}},
		{name: "missing effect", ct: "application/json", value: `{"condition": "true"}`,
			wantErr: []string{"missing effect", `want "allow" or "deny"`}},
		{name: "missing condition", ct: "application/json", value: `{"effect": "allow"}`,
			wantErr: []string{"missing condition", "CEL expression of type bool"}},
		{name: "unknown field", ct: "application/json", value: `{"effect": "allow", "conditon": "true"}`,
			wantErr: []string{`unknown field "conditon"`, "effect, condition and optional description"}},
		{name: "not an object", ct: "application/json", value: `["allow"]`,
			wantErr: []string{"want an object"}},
		{name: "text content type", ct: "text/plain", value: `{"effect": "allow", "condition": "true"}`,
			wantErr: []string{`content type "text/plain"`, "application/json"}},
		{name: "neither json nor yaml", value: "effect: [\n",
			wantErr: []string{"neither JSON nor YAML"}},
		{name: "bad json", ct: "application/json", value: `{"effect": "allow",}`,
			wantErr: []string{"invalid JSON at line 1"}},
	}
	for _, tt := range tests {
		got, err := ParseRule(content.Property{Key: "rules/r1", ContentType: tt.ct, Value: []byte(tt.value)})
		if len(tt.wantErr) == 0 {
			if err != nil {
				t.Errorf("%s: ParseRule error %v, want nil", tt.name, err)
			} else if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s: ParseRule (-want +got):\n%s", tt.name, diff)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: ParseRule = %+v, want an error", tt.name, got)
			continue
		}
		for _, w := range tt.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, err, w)
			}
		}
	}
}

func TestCompiledRuleMatches(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRule(content.Property{Key: "deny/night-writes", ContentType: "application/yaml", Value: []byte(
		"effect: deny\ncondition: now.getHours('UTC') < 6 && request.method != 'GET' && !('oncall' in principal.groups)\n")})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := Compile(env, "deny/night-writes", r)
	if err != nil {
		t.Fatal(err)
	}
	night := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	noon := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   Input
		want bool
	}{
		{"night write", Input{Request: map[string]any{"method": "PUT"}, Principal: map[string]any{"groups": []string{"dev"}}, Now: night}, true},
		{"night read", Input{Request: map[string]any{"method": "GET"}, Principal: map[string]any{"groups": []string{"dev"}}, Now: night}, false},
		{"noon write", Input{Request: map[string]any{"method": "PUT"}, Principal: map[string]any{"groups": []string{"dev"}}, Now: noon}, false},
		{"oncall", Input{Request: map[string]any{"method": "PUT"}, Principal: map[string]any{"groups": []string{"oncall"}}, Now: night}, false},
	}
	for _, tt := range tests {
		got, err := cr.Matches(context.Background(), tt.in)
		if err != nil || got != tt.want {
			t.Errorf("%s: Matches = %v, %v; want %v, nil", tt.name, got, err, tt.want)
		}
	}
	// A missing attribute is an evaluation error, not a silent false.
	_, err = cr.Matches(context.Background(), Input{Now: night})
	if !errors.Is(err, ErrEval) {
		t.Errorf("Matches(no request attributes) error = %v, want ErrEval", err)
	}
}
