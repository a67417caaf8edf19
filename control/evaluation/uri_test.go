package evaluation

import (
	"strings"
	"testing"
)

func TestConsolePathRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in, id, err string
	}{
		{in: "pay/limits@42/stage-1", id: "pay/limits@42/stage-1"},
		{in: "https://lehr.example.com:8443/console/canary/pay/limits@42/stage-1", id: "pay/limits@42/stage-1"},
		{in: "https://lehr.example.com/console/canary/pay/limits@42/a%20b", id: "pay/limits@42/a b"},
		{in: "/console/canary/pay/limits@42/stage-1", id: "pay/limits@42/stage-1"},
		{in: "https://proxy.example.com/ops/console/canary/pay/limits@42/stage-1", id: "pay/limits@42/stage-1"},
		{in: "https://lehr.example.com/console/canary/", err: "names no evaluation"},
		{in: "https://lehr.example.com/console/rollouts/pay/limits/42", id: "https://lehr.example.com/console/rollouts/pay/limits/42"},
	} {
		id, err := IDOfURI(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("IDOfURI(%q) = %q, %v; want an error saying %q", tc.in, id, err, tc.err)
		case tc.err == "" && (err != nil || id != tc.id):
			t.Errorf("IDOfURI(%q) = %q, %v; want %q", tc.in, id, err, tc.id)
		}
	}
	for _, id := range []string{"pay/limits@42/stage-1", "pay/limits@42/a b", "pay/limits@42/x%y"} {
		if got, err := IDOfURI("https://h" + ConsolePath(id)); err != nil || got != id {
			t.Errorf("IDOfURI(ConsolePath(%q)) = %q, %v", id, got, err)
		}
	}
}

func TestCheckConsoleURL(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"https://lehr.example.com:8443", true},
		{"http://127.0.0.1:7402", true},
		{"https://proxy.example.com/lehr/", true},
		{"lehr.example.com", false},
		{"ftp://lehr.example.com", false},
		{"https://user:pw@lehr.example.com", false},
		{"https://lehr.example.com/?a=b", false},
		{"https://lehr.example.com/#x", false},
	} {
		if err := CheckConsoleURL(tc.in); (err == nil) != tc.ok {
			t.Errorf("CheckConsoleURL(%q) = %v; want ok %v", tc.in, err, tc.ok)
		}
	}
}
