package termtext

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain text, é ✓ 日本 \ufffd \\x1b", "plain text, é ✓ 日本 \ufffd \\x1b"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"bell\x07 del\x7f nul\x00", `bell\x07 del\x7f nul\x00`},
		{"c1 \u009b2J next\u0085", `c1 \u009b2J next\u0085`},
		{"rtl \u202eevil\u202c \u2066iso\u2069 \u200f \u061c", `rtl \u202eevil\u202c \u2066iso\u2069 \u200f \u061c`},
		{"ls \u2028 ps \u2029", `ls \u2028 ps \u2029`},
		{"bad \xff\xfe utf8 \xe2\x82", `bad \xff\xfe utf8 \xe2\x82`},
	} {
		if got := Clean(tc.in); got != tc.want {
			t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := Clean(Clean(tc.in)); got != tc.want {
			t.Errorf("Clean twice (%q) = %q, want %q (Clean is idempotent)", tc.in, got, tc.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", true},
		{"plain, é ✓ 日本", true},
		{"two\nlines\tand a tab", true},
		{"crlf\r\nline end", true},
		{"bare\rreturn", false},
		{"return at the end\r", false},
		{"\x1b[2J", false},
		{"rtl \u202e", false},
		{"\x00\xff", false},
	} {
		if got := Printable([]byte(tc.in)); got != tc.want {
			t.Errorf("Printable(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestShort(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"250", "250"},
		{`{"a":1}`, `{"a":1}`},
		{"one\ntwo", "one… (7 bytes)"},
		{strings.Repeat("é", 61), strings.Repeat("é", 60) + "… (122 bytes)"},
		{"\x00\xff", "(binary, 2 bytes)"},
	}
	for _, tt := range tests {
		if got := Short([]byte(tt.in)); got != tt.want {
			t.Errorf("Short(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
