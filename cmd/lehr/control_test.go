package main

import (
	"strings"
	"testing"
)

// lehr control's identity flags (issue 28, item 6): --help teaches how
// local accounts and certificate users are named and mapped, and a bad
// --local-users or --fleet-admins is a usage error saying what it wants.
func TestControlIdentityFlags(t *testing.T) {
	code, stdout, stderr := runCLI(t, nil, "control", "--help")
	if code != exitOK || stderr != "" {
		t.Fatalf("lehr control --help: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"\n  --local-users ACCOUNT=USER", "\n  --fleet-admins identities", "unix:ACCOUNT", "--local-users alice=alice", "never the\nCommonName"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("lehr control --help lacks %q:\n%s", want, stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--local-users", "alice"}, "want ACCOUNT=USER"},
		{[]string{"--local-users", "alice=alice,alice=bob"}, "mapped twice"},
		{[]string{"--local-users", "alice=a b"}, "not a user name"},
		{[]string{"--fleet-admins", "ops,a b"}, "unix:<account>"},
		{[]string{"--fleet-admins", "spiffe://lehr/user/ops"}, "neither a user name"},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"control", "--data-dir", t.TempDir()}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("lehr control %s: exit %d, stderr %q; want a usage error saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// lehr control's --alerts-* flags (issue 35): --help teaches the source
// and what it supports, and bad values are usage errors naming the flag.
func TestControlAlertsFlags(t *testing.T) {
	code, stdout, stderr := runCLI(t, nil, "control", "--help")
	if code != exitOK || stderr != "" {
		t.Fatalf("lehr control --help: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"\n  --alerts-url URL", "\n  --alerts-interval duration", "\n  --alerts-timeout duration", "\n  --alerts-ca file", "vmalert", "/api/v1/alerts", "not\nAlertmanager", "\n  --metrics-url URL", "/api/v1/query_range"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("lehr control --help lacks %q", want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--alerts-url", "prometheus:9090"}, "--alerts-url: URL \"prometheus:9090\": want http://HOST:PORT"},
		{[]string{"--alerts-url", "http://p:9090/api/v1/alerts?x=1"}, "want no query"},
		{[]string{"--alerts-ca", "ca.crt"}, "give it too"},
		{[]string{"--alerts-url", "http://p:9090", "--alerts-ca", "ca.crt"}, "for an https --alerts-url"},
		{[]string{"--alerts-url", "https://p:9090", "--alerts-cert", "c.crt"}, "pass both --alerts-cert and --alerts-key"},
		{[]string{"--alerts-url", "https://p:9090", "--alerts-ca", "/nonexistent/ca.crt"}, "--alerts-ca: open /nonexistent/ca.crt"},
		{[]string{"--alerts-url", "http://p:9090", "--alerts-timeout", "0s"}, "--alerts-timeout 0s: want a positive duration"},
		{[]string{"--alerts-url", "http://p:9090", "--alerts-interval", "-1s"}, "--alerts-interval -1s: want a positive duration"},
		// The metrics source of checks written as queries (issue 36).
		{[]string{"--metrics-url", "prometheus:9090"}, "--metrics-url: URL \"prometheus:9090\": want http://HOST:PORT"},
		{[]string{"--metrics-url", "http://p:9090/api/v1/query_range?x=1"}, "want no query"},
		{[]string{"--metrics-ca", "ca.crt"}, "give it too"},
		{[]string{"--metrics-url", "http://p:9090", "--metrics-ca", "ca.crt"}, "for an https --metrics-url"},
		{[]string{"--metrics-url", "https://p:9090", "--metrics-key", "c.key"}, "pass both --metrics-cert and --metrics-key"},
		{[]string{"--metrics-url", "https://p:9090", "--metrics-ca", "/nonexistent/ca.crt"}, "--metrics-ca: open /nonexistent/ca.crt"},
		{[]string{"--metrics-url", "http://p:9090", "--metrics-timeout", "0s"}, "--metrics-timeout 0s: want a positive duration"},
		{[]string{"--metrics-url", "http://p:9090", "--metrics-step", "1500ms"}, "--metrics-step 1.5s: want whole seconds"},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"control", "--data-dir", t.TempDir()}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("lehr control %s: exit %d, stderr %q; want a usage error saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}
