// Package excerpt bounds how much of a caller's input an error message or
// a record may repeat. A refused request must not cost more to explain
// than to refuse: an error that quoted a 100 KiB key whole would travel
// back three times in its gRPC status and be written to the audit log.
//
// Importable by every package of Lehr: it imports nothing of ours.
package excerpt

import (
	"strconv"
	"unicode/utf8"
)

// MaxQuoted is how many bytes of a value Quote shows. Every valid name
// and key of Lehr (internal/names) is shorter, so a value is cut only
// when it is over its own limit anyway.
const MaxQuoted = 256

// Quote returns s quoted like strconv.Quote (and fmt's %q) if it is at
// most MaxQuoted bytes, else the quoted first MaxQuoted bytes (cut on a
// UTF-8 boundary) followed by an ellipsis and the length of s:
//
//	"aaaa…" (102400 bytes)
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(prefix(s, MaxQuoted)+"…") + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// Truncate returns s if it is at most n bytes, else a prefix of s (cut on
// a UTF-8 boundary) followed by "… (N bytes)", N being len(s), all of at
// most n bytes. Valid UTF-8 stays valid, so the result can go into a
// protobuf string field. n below 32 is taken as 32.
func Truncate(s string, n int) string {
	n = max(n, 32)
	if len(s) <= n {
		return s
	}
	tail := "… (" + strconv.Itoa(len(s)) + " bytes)"
	return prefix(s, n-len(tail)) + tail
}

// prefix returns the longest prefix of s of at most n bytes that does
// not end inside a UTF-8 sequence.
func prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	cut := n
	// Back up over continuation bytes, at most a rune's length.
	for cut > 0 && n-cut < utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 here anyway: cut where asked
	}
	return s[:cut]
}
