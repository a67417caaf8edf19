package consumer

import (
	"context"
	"errors"
	"testing"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

func writePolicy(t *testing.T, dir string, version uint64, rules ...string) {
	t.Helper()
	var props []content.Property
	for i := 0; i < len(rules); i += 2 {
		props = append(props, content.Property{Key: rules[i], Value: []byte(rules[i+1]), ContentType: "application/json"})
	}
	snap, err := content.New(props)
	if err != nil {
		t.Fatal(err)
	}
	f := nsfile.FromVersion(content.Version{Namespace: ns, Seq: version, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
		Info: &lehrpb.VersionInfo{Author: "test"}, Content: snap})
	if err := nsfile.Write(dir, f); err != nil {
		t.Fatalf("write version %d: %v", version, err)
	}
}

// Evaluate decides with the rules of the version the subscription holds,
// and follows new versions; without a policy version it says why.
func TestEvaluate(t *testing.T) {
	dir := t.TempDir()
	_, s := newOffline(t, dir)
	ctx := context.Background()
	get := policy.Input{Request: map[string]any{"method": "GET"}}
	if _, err := s.Evaluate(ctx, get); !errors.Is(err, ErrNoPolicy) {
		t.Fatalf("Evaluate before any version: %v; want ErrNoPolicy", err)
	}
	write(t, dir, 1, "limit", "10")
	v := next(t, s, nil)
	if _, err := s.Evaluate(ctx, get); !errors.Is(err, ErrNoPolicy) {
		t.Fatalf("Evaluate on a config namespace: %v; want ErrNoPolicy", err)
	}
	writePolicy(t, dir, 2, "readers", `{"effect": "allow", "condition": "request.method == \"GET\""}`)
	v = next(t, s, v)
	for _, tc := range []struct {
		in   policy.Input
		want policy.Decision
	}{
		{get, policy.Decision{Effect: policy.EffectAllow, Rule: "readers"}},
		{policy.Input{Request: map[string]any{"method": "POST"}}, policy.Decision{Effect: policy.EffectDeny}},
	} {
		if got, err := s.Evaluate(ctx, tc.in); err != nil || got != tc.want {
			t.Errorf("version 2, %v: %+v, %v; want %+v", tc.in.Request, got, err, tc.want)
		}
	}
	writePolicy(t, dir, 3, "readers", `{"effect": "allow", "condition": "request.method == \"GET\""}`,
		"freeze", `{"effect": "deny", "condition": "request.method != \"\""}`)
	next(t, s, v)
	if got, err := s.Evaluate(ctx, get); err != nil || got != (policy.Decision{Effect: policy.EffectDeny, Rule: "freeze"}) {
		t.Errorf("version 3: %+v, %v; want deny by freeze", got, err)
	}
}
