// Package termtext makes text that Lehr did not write itself safe to show
// on a terminal: what control stored, what distributors and agents
// reported, a server's error messages, a namespace's values. Clean escapes
// what could drive the terminal or forge a column or a line; Printable and
// Short decide how a value is shown. Every text output of the lehr CLI and
// of the "lehr dev" tour (testenv/devtour) goes through it.
//
// Importable by every package of Lehr: it imports nothing of ours.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s as a terminal may show it: every control character (C0
// — tab, newline and carriage return included — DEL and C1), every
// bidirectional-text control and line separator, and every byte that is
// not UTF-8 becomes a Go escape (\x1b, \n, \u202e, \xff); the rest is
// kept, backslashes too. So an escape sequence in a --message, an author
// or a report cannot drive the terminal that shows it, nor forge a column
// or a line. Clean is idempotent.
func Clean(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if mustEscape(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case !mustEscape(r, n):
			b.WriteString(s[i : i+n])
		case r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// mustEscape reports whether Clean escapes the rune r, of n bytes.
func mustEscape(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1, unicode.IsControl(r):
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069: // bidi controls
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// Printable reports whether b is text to show as it is: UTF-8 without
// what Clean escapes, but for newlines, tabs and the carriage return of a
// CRLF line end. A value that is not is shown as hex or as its size
// (Short).
func Printable(b []byte) bool {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == '\n', r == '\t', r == '\r' && i+1 < len(b) && b[i+1] == '\n':
		case mustEscape(r, n):
			return false
		}
		i += n
	}
	return true
}

// ShortLen is the longest value shown in full by Short, in runes.
const ShortLen = 60

// Short formats a value on one short line: printable text as it is (cut
// at ShortLen runes or the first line end, the cut said with the value's
// size), anything else as its size. An empty value is "".
func Short(v []byte) string {
	if len(v) == 0 {
		return `""`
	}
	if !Printable(v) {
		return fmt.Sprintf("(binary, %d bytes)", len(v))
	}
	s := string(v)
	cut := false
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s, cut = s[:i], true
	}
	if utf8.RuneCountInString(s) > ShortLen {
		s, cut = string([]rune(s)[:ShortLen]), true
	}
	if cut {
		s += fmt.Sprintf("… (%d bytes)", len(v))
	}
	return s
}
