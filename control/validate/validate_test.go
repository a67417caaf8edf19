package validate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// checkViolation compares got with want ignoring Message, and checks that
// the message contains every string in msg.
func checkViolation(t *testing.T, name string, got, want *Violation, msg []string) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Violation{}, "Message")); diff != "" {
		t.Errorf("%s: violation mismatch (-want +got):\n%s\n(got message: %v)", name, diff, got)
		return
	}
	if got == nil {
		return
	}
	for _, m := range msg {
		if !strings.Contains(got.Message, m) {
			t.Errorf("%s: message %q does not contain %q", name, got.Message, m)
		}
	}
	if !strings.HasPrefix(got.Error(), "validate: ") {
		t.Errorf("%s: Error() = %q, want prefix %q", name, got.Error(), "validate: ")
	}
}

func TestForDomain(t *testing.T) {
	tests := []struct {
		name string
		q    *lehrpb.Quotas
		want Limits
	}{
		{"nil", nil, DefaultLimits()},
		{"zero", &lehrpb.Quotas{}, DefaultLimits()},
		{"lower", &lehrpb.Quotas{MaxValueBytes: 1000, MaxNamespaceBytes: 5000, MaxProperties: 10},
			Limits{MaxValueBytes: 1000, MaxNamespaceBytes: 5000, MaxProperties: 10}},
		{"higher never raises", &lehrpb.Quotas{MaxValueBytes: 1 << 30, MaxNamespaceBytes: 1 << 40, MaxProperties: 1 << 20}, DefaultLimits()},
		{"negative ignored", &lehrpb.Quotas{MaxValueBytes: -1, MaxNamespaceBytes: -1, MaxProperties: -1}, DefaultLimits()},
		{"mixed", &lehrpb.Quotas{MaxProperties: 7},
			Limits{MaxValueBytes: MaxValueBytes, MaxNamespaceBytes: MaxNamespaceBytes, MaxProperties: 7}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, ForDomain(tt.q)); diff != "" {
			t.Errorf("ForDomain(%s) (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestProperty(t *testing.T) {
	prop := func(key, ct, value string) content.Property {
		return content.Property{Key: key, ContentType: ct, Value: []byte(value)}
	}
	invalidContent := func(key, field string) *Violation {
		return &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent, Key: key, Field: field}
	}
	small := Limits{MaxValueBytes: 10}
	tests := []struct {
		name   string
		p      content.Property
		l      Limits
		want   *Violation
		wantIn []string // substrings of the message
	}{
		// Accepted.
		{name: "opaque", p: prop("a/b", "", "\xff\x00 anything")},
		{name: "octet-stream", p: prop("a", "application/octet-stream", "\xff\xfe")},
		{name: "json", p: prop("a", "application/json", `{"rps": 10}`)},
		{name: "json with charset", p: prop("a", "application/json; charset=utf-8", `[1,2]`)},
		{name: "json scalar", p: prop("a", "application/json", `"s"`)},
		{name: "+json suffix", p: prop("a", "application/vnd.lehr.limits+json", `{}`)},
		{name: "upper case type", p: prop("a", "Application/JSON", `{}`)},
		{name: "yaml", p: prop("a", "application/yaml", "rps: 10\nzones: [a, b]\n")},
		{name: "x-yaml", p: prop("a", "application/x-yaml", "a: 1")},
		{name: "text/yaml", p: prop("a", "text/yaml", "- 1\n- 2\n")},
		{name: "+yaml suffix", p: prop("a", "application/vnd.x+yaml", "a: 1")},
		{name: "empty yaml", p: prop("a", "application/yaml", "")},
		{name: "text utf-8", p: prop("a", "text/plain", "héllo wörld")},
		{name: "text us-ascii", p: prop("a", "text/plain; charset=US-ASCII", "hello")},
		{name: "value at domain cap", p: prop("a", "", "0123456789"), l: small},
		{name: "value at hard cap", p: prop("a", "", strings.Repeat("x", MaxValueBytes))},
		{name: "content type at cap", p: prop("a", "application/"+strings.Repeat("x", MaxContentType-len("application/")), "")},

		// Key grammar.
		{name: "empty key", p: prop("", "", "v"),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidName, Field: "key"},
			wantIn: []string{`invalid key ""`, "empty"}},
		{name: "dot-dot key", p: prop("../etc/passwd", "", "v"),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidName, Key: "../etc/passwd", Field: "key"},
			wantIn: []string{`"../etc/passwd"`, "'/'-separated segments", "not starting with '.'"}},
		{name: "space in key", p: prop("a b", "", "v"),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidName, Key: "a b", Field: "key"},
			wantIn: []string{"A-Z, a-z, 0-9"}},
		{name: "long key", p: prop(strings.Repeat("k", 257), "", "v"),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidName, Key: strings.Repeat("k", 257), Field: "key"},
			wantIn: []string{"257 bytes, limit 256"}},

		// Value size.
		{name: "value over domain cap", p: prop("a", "", "01234567890"), l: small,
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonValueTooLarge, Key: "a", Field: "value", Limit: "10 bytes"},
			wantIn: []string{"11 bytes", "at most 10 bytes"}},
		{name: "value over hard cap", p: prop("a", "", strings.Repeat("x", MaxValueBytes+1)),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonValueTooLarge, Key: "a", Field: "value", Limit: "524288 bytes"},
			wantIn: []string{"524289 bytes", "at most 524288 bytes"}},

		// Content type syntax.
		{name: "content type too long", p: prop("a", "application/"+strings.Repeat("x", MaxContentType), "{}"),
			want:   &Violation{Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent, Key: "a", Field: "content_type", Limit: "128 bytes"},
			wantIn: []string{"140 bytes", "at most 128 bytes"}},
		{name: "malformed media type", p: prop("a", "application/json;;", "{}"),
			want: invalidContent("a", "content_type"), wantIn: []string{"not a valid media type", "type/subtype"}},
		{name: "no subtype", p: prop("a", "text", "x"),
			want: invalidContent("a", "content_type"), wantIn: []string{"no subtype", "type/subtype"}},
		{name: "foreign charset", p: prop("a", "text/plain; charset=latin1", "x"),
			want: invalidContent("a", "content_type"), wantIn: []string{`charset "latin1"`, "charset=utf-8"}},

		// Content.
		{name: "bad json", p: prop("a", "application/json", "{\n  \"rps\": ,\n}"),
			want: invalidContent("a", "value"), wantIn: []string{"invalid JSON at line 2, column 10 (byte offset 11)", "invalid character ','", "exactly one JSON document"}},
		{name: "empty json", p: prop("a", "application/json", ""),
			want: invalidContent("a", "value"), wantIn: []string{"invalid JSON at line 1, column 1 (byte offset 0)", "unexpected end of JSON input"}},
		{name: "two json documents", p: prop("a", "application/json", "{} {}"),
			want: invalidContent("a", "value"), wantIn: []string{"invalid JSON at line 1, column 4 (byte offset 3)", "exactly one JSON document"}},
		{name: "bad +json", p: prop("k", "application/problem+json", "{'single': 1}"),
			want: invalidContent("k", "value"), wantIn: []string{"invalid JSON", `"+json" types`}},
		{name: "json invalid utf-8", p: prop("a", "application/json", "\"\xff\""),
			want: invalidContent("a", "value"), wantIn: []string{"invalid UTF-8 at byte offset 1", "UTF-8 JSON"}},
		{name: "bad yaml", p: prop("a", "application/yaml", "a: b\n c: d\n"),
			want: invalidContent("a", "value"), wantIn: []string{"invalid YAML", "line 2", "application/yaml, application/x-yaml, text/yaml"}},
		{name: "duplicate yaml key", p: prop("a", "text/yaml", "a: 1\na: 2\n"),
			want: invalidContent("a", "value"), wantIn: []string{`key "a" appears twice (line 2)`, "no duplicate keys"}},
		{name: "yaml tab indent", p: prop("a", "application/x-yaml", "a:\n\tb: 1\n"),
			want: invalidContent("a", "value"), wantIn: []string{"invalid YAML"}},
		{name: "text invalid utf-8", p: prop("a", "text/csv", "ok,\xc3\x28"),
			want: invalidContent("a", "value"), wantIn: []string{"invalid UTF-8 at byte offset 3", "text/* values must be valid UTF-8"}},
	}
	for _, tt := range tests {
		got := Property(tt.p, tt.l)
		checkViolation(t, tt.name, got, tt.want, tt.wantIn)
	}
}

func TestSnapshot(t *testing.T) {
	snap := func(n, valueLen int) content.Snapshot {
		ps := make([]content.Property, n)
		for i := range ps {
			ps[i] = content.Property{Key: strings.Repeat("k", 4) + string(rune('a'+i%26)) + strings.Repeat("0", i/26), Value: make([]byte, valueLen)}
		}
		s, err := content.New(ps)
		if err != nil {
			t.Fatalf("content.New: %v", err)
		}
		return s
	}
	big := make([]content.Property, 33)
	for i := range big {
		big[i] = content.Property{Key: "k" + strings.Repeat("x", i), Value: make([]byte, MaxValueBytes)}
	}
	bigSnap, err := content.New(big)
	if err != nil {
		t.Fatalf("content.New: %v", err)
	}
	tests := []struct {
		name   string
		s      content.Snapshot
		l      Limits
		want   *Violation
		wantIn []string
	}{
		{name: "empty", s: content.Snapshot{}},
		{name: "within", s: snap(10, 5), l: Limits{MaxNamespaceBytes: 100, MaxProperties: 10}},
		{name: "over domain size", s: snap(10, 6), l: Limits{MaxNamespaceBytes: 100},
			want:   &Violation{Code: codes.ResourceExhausted, Reason: apierror.ReasonNamespaceTooLarge, Limit: "100 bytes"},
			wantIn: []string{"110 bytes", "at most 100 bytes"}},
		{name: "over hard size", s: bigSnap,
			want:   &Violation{Code: codes.ResourceExhausted, Reason: apierror.ReasonNamespaceTooLarge, Limit: "16777216 bytes"},
			wantIn: []string{"at most 16777216 bytes"}},
		{name: "too many", s: snap(11, 0), l: Limits{MaxProperties: 10},
			want:   &Violation{Code: codes.ResourceExhausted, Reason: apierror.ReasonTooManyProperties, Limit: "10 properties"},
			wantIn: []string{"11 properties", "at most 10 properties"}},
		{name: "too many hard cap", s: snap(MaxProperties+1, 0),
			want:   &Violation{Code: codes.ResourceExhausted, Reason: apierror.ReasonTooManyProperties, Limit: "10000 properties"},
			wantIn: []string{"10001 properties"}},
	}
	for _, tt := range tests {
		checkViolation(t, tt.name, Snapshot(tt.s, tt.l), tt.want, tt.wantIn)
	}
}

// TestViolationToAPIError checks that a violation carries everything an
// apierror needs, the way control converts it.
func TestViolationToAPIError(t *testing.T) {
	v := Property(content.Property{Key: "a", Value: make([]byte, 11)}, Limits{MaxValueBytes: 10})
	e := apierror.New(v.Code, v.Reason, "properties[0]."+v.Field, "%s", v.Message).WithLimit("%s", v.Limit)
	if got, want := e.Error(), `lehr: InvalidArgument VALUE_TOO_LARGE (field properties[0].value): value of "a" is 11 bytes; a value may be at most 10 bytes (limit 10 bytes)`; got != want {
		t.Errorf("apierror = %q, want %q", got, want)
	}
}
