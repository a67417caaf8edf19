package names

import (
	"errors"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	tests := []struct {
		kind  string
		value string
		ok    bool
	}{
		{"domain", "payments", true},
		{"domain", "a", true},
		{"domain", "a-1", true},
		{"domain", "", false},
		{"domain", "Payments", false},
		{"domain", "1abc", false},
		{"domain", "abc-", false},
		{"domain", strings.Repeat("a", 63), true},
		{"domain", strings.Repeat("a", 64), false},
		{"zone", "us-east-1a", true},
		{"zone", "us_east", false},
		{"namespace", "payments/fraud-rules", true},
		{"namespace", "payments/v1.2_x", true},
		{"namespace", "payments/0", true},
		{"namespace", "payments", false},
		{"namespace", "payments/", false},
		{"namespace", "/x", false},
		{"namespace", "payments/a/b", false},
		{"namespace", "payments/.hidden", false},
		{"namespace", "payments/x.", false},
		{"namespace", "Pay/x", false},
		{"namespace", "payments/" + strings.Repeat("a", 128), true},
		{"namespace", "payments/" + strings.Repeat("a", 129), false},
		{"key", "limits/rps", true},
		{"key", "a", true},
		{"key", "A_b.c-d/e", true},
		{"key", "", false},
		{"key", "/abs", false},
		{"key", "trailing/", false},
		{"key", "a//b", false},
		{"key", "../etc/passwd", false},
		{"key", "a/./b", false},
		{"key", ".hidden", false},
		{"key", "-flag", false},
		{"key", "sp ace", false},
		{"key", "ünï", false},
		{"key", strings.Repeat("k", 256), true},
		{"key", strings.Repeat("k", 257), false},
	}
	for _, tt := range tests {
		var err error
		switch tt.kind {
		case "domain":
			err = Domain(tt.value)
		case "zone":
			err = Zone(tt.value)
		case "namespace":
			_, _, err = Namespace(tt.value)
		case "key":
			err = Key(tt.value)
		}
		if (err == nil) != tt.ok {
			t.Errorf("%s(%q) error = %v, want ok=%v", tt.kind, tt.value, err, tt.ok)
		}
		if err != nil {
			var ne *Error
			if !errors.As(err, &ne) || ne.Kind != tt.kind || ne.Reason == "" {
				t.Errorf("%s(%q) error %v is not a *names.Error of kind %s with a reason", tt.kind, tt.value, err, tt.kind)
			}
		}
	}
}

func TestNamespaceParts(t *testing.T) {
	d, n, err := Namespace("payments/fraud-rules")
	if err != nil || d != "payments" || n != "fraud-rules" {
		t.Fatalf(`Namespace("payments/fraud-rules") = %q, %q, %v`, d, n, err)
	}
}

// An error quotes at most a bounded prefix of the value it refuses, and
// its length; the value itself is kept whole for callers.
func TestErrorQuotesBoundedPrefix(t *testing.T) {
	long := strings.Repeat("k", 100<<10)
	err := Key(long)
	var ne *Error
	if !errors.As(err, &ne) || ne.Value != long {
		t.Fatalf("Key(100 KiB) = %v; want a *names.Error holding the value", err)
	}
	if msg := err.Error(); len(msg) > 400 || !strings.Contains(msg, `kkk…" (102400 bytes)`) || !strings.Contains(msg, "102400 bytes, limit 256") {
		t.Errorf("Key(100 KiB) error is %d bytes: %.300s; want the value's start, its length and the limit", len(msg), msg)
	}
	if got, want := Domain("Pay").Error(), `names: invalid domain "Pay": `+labelRule; got != want {
		t.Errorf("Domain(\"Pay\") = %q; want %q (a short value quoted whole)", got, want)
	}
}

func TestService(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"checkout", true}, {"checkout-api", true}, {"a", true}, {"api.v2_x", true}, {"9", true},
		{"", false}, {"-api", false}, {"api-", false}, {"Checkout", false}, {"a b", false},
		{strings.Repeat("a", 63), true}, {strings.Repeat("a", 64), false},
	} {
		if err := Service(tc.s); (err == nil) != tc.ok {
			t.Errorf("Service(%q) = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
	for _, tc := range []struct{ program, want string }{
		{"checkout", "checkout"},
		{"Checkout API", "checkout-api"},
		{"api.test", "api.test"},
		{"__debug_bin123", "debug_bin123"},
		{"---", ""},
		{"", ""},
		{"Ωmega", "mega"},
		{strings.Repeat("x", 70) + "-", strings.Repeat("x", 63)},
	} {
		got := ServiceOf(tc.program)
		if got != tc.want {
			t.Errorf("ServiceOf(%q) = %q, want %q", tc.program, got, tc.want)
		}
		if got != "" && Service(got) != nil {
			t.Errorf("ServiceOf(%q) = %q, not a valid service", tc.program, got)
		}
	}
}
