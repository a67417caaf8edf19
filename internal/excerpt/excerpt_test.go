package excerpt

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	long := strings.Repeat("k", 100<<10)
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"a/b", `"a/b"`},
		{"sp ace\x00", `"sp ace\x00"`},
		{strings.Repeat("a", MaxQuoted), `"` + strings.Repeat("a", MaxQuoted) + `"`},
		{strings.Repeat("a", MaxQuoted+1), `"` + strings.Repeat("a", MaxQuoted) + `…" (257 bytes)`},
		{long, `"` + strings.Repeat("k", MaxQuoted) + `…" (102400 bytes)`},
		// A cut inside "é" (2 bytes) backs up to the rune's start.
		{strings.Repeat("a", MaxQuoted-1) + "éé", `"` + strings.Repeat("a", MaxQuoted-1) + `…" (259 bytes)`},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%d bytes) = %s; want %s", len(tt.in), got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 100, "short"},
		{strings.Repeat("x", 100), 100, strings.Repeat("x", 100)},
		{strings.Repeat("x", 101), 100, strings.Repeat("x", 100-len("… (101 bytes)")) + "… (101 bytes)"},
		{strings.Repeat("x", 40), 1, strings.Repeat("x", 32-len("… (40 bytes)")) + "… (40 bytes)"}, // n below 32 is 32
		{strings.Repeat("é", 100), 64, strings.Repeat("é", 24) + "… (200 bytes)"},
	}
	for _, tt := range tests {
		got := Truncate(tt.in, tt.n)
		if got != tt.want {
			t.Errorf("Truncate(%d bytes, %d) = %q; want %q", len(tt.in), tt.n, got, tt.want)
		}
		if len(got) > max(tt.n, 32) || !utf8.ValidString(got) {
			t.Errorf("Truncate(%d bytes, %d) = %d bytes, valid UTF-8 %v; want at most %d, valid", len(tt.in), tt.n, len(got), utf8.ValidString(got), tt.n)
		}
	}
}
