// Package names holds the grammar of every name in Lehr: domains, namespaces,
// zones and property keys. Control validates names before storing anything;
// agents and consumers validate them again before a name becomes a file path.
//
// The grammar (also in docs/design.md, "Names"):
//
//	domain     = label                  e.g. "payments"
//	zone       = label                  e.g. "us-east-1a"
//	label      = [a-z] ([a-z0-9-]{0,61} [a-z0-9])?      (1–63 bytes)
//	name       = [a-z0-9] ([a-z0-9._-]{0,126} [a-z0-9])? (1–128 bytes)
//	namespace  = domain "/" name        e.g. "payments/fraud-rules"
//	key        = segment ("/" segment)*  at most 256 bytes
//	service    = [a-z0-9] ([a-z0-9._-]{0,61} [a-z0-9])?  (1–63 bytes)
//	segment    = [A-Za-z0-9_] [A-Za-z0-9_.-]*
//
// Keys therefore never start with "/" or ".", never contain "..", empty
// segments or bytes outside ASCII letters, digits, "_", ".", "-" and "/".
package names

import (
	"fmt"
	"strings"

	"lehr.dev/lehr/internal/excerpt"
)

// Limits of the grammar.
const (
	MaxLabelLen = 63
	MaxNameLen  = 128
	MaxKeyLen   = 256
)

// The grammar's rules as byte loops rather than regular expressions: a
// distributor checks the namespace of every Ack, one per delivery, and a
// regexp match cost more than the rest of the Ack's validation
// (names_test.go checks these against the regular expressions of the
// grammar above, kept there as the reference).
var (
	labelRE   = matcher(func(s string) bool { return ruled(s, MaxLabelLen, isLower, isLowerDigitDash, isLowerDigit) })
	nameRE    = matcher(func(s string) bool { return ruled(s, MaxNameLen, isLowerDigit, isNameByte, isLowerDigit) })
	segmentRE = matcher(func(s string) bool { return ruled(s, -1, isSegmentFirst, isSegmentByte, isSegmentByte) })
	serviceRE = matcher(func(s string) bool { return ruled(s, MaxLabelLen, isLowerDigit, isNameByte, isLowerDigit) })
)

// matcher is a rule with a regexp's MatchString.
type matcher func(string) bool

// MatchString reports whether s follows the rule.
func (m matcher) MatchString(s string) bool { return m(s) }

// ruled reports whether s is 1 to max bytes (max < 0: no bound) whose
// first byte satisfies first, last byte (when there are two or more)
// last, and every byte between mid.
func ruled(s string, max int, first, mid, last func(byte) bool) bool {
	n := len(s)
	if n == 0 || max >= 0 && n > max || !first(s[0]) {
		return false
	}
	if n == 1 {
		return true
	}
	for i := 1; i < n-1; i++ {
		if !mid(s[i]) {
			return false
		}
	}
	return last(s[n-1])
}

func isLower(c byte) bool          { return 'a' <= c && c <= 'z' }
func isLowerDigit(c byte) bool     { return isLower(c) || '0' <= c && c <= '9' }
func isLowerDigitDash(c byte) bool { return isLowerDigit(c) || c == '-' }
func isNameByte(c byte) bool       { return isLowerDigit(c) || c == '.' || c == '_' || c == '-' }
func isSegmentFirst(c byte) bool   { return isLowerDigit(c) || 'A' <= c && c <= 'Z' || c == '_' }
func isSegmentByte(c byte) bool    { return isSegmentFirst(c) || c == '.' || c == '-' }

// Error describes why a name is invalid. Field is filled in by callers that
// know which request field held the name.
type Error struct {
	Kind   string // "domain", "namespace", "zone" or "key"
	Value  string // the whole value; messages show Quoted
	Reason string
}

// Quoted returns Value quoted for a message: whole if it is at most
// excerpt.MaxQuoted bytes, else its prefix and its length, so that an
// error about a 100 KiB key is not itself 100 KiB.
func (e *Error) Quoted() string { return excerpt.Quote(e.Value) }

func (e *Error) Error() string {
	return fmt.Sprintf("names: invalid %s %s: %s", e.Kind, e.Quoted(), e.Reason)
}

func invalid(kind, value, reason string) error {
	return &Error{Kind: kind, Value: value, Reason: reason}
}

const labelRule = "want 1-63 bytes of a-z, 0-9 and '-', starting with a letter and not ending with '-'"

// Domain reports whether d is a valid domain name.
func Domain(d string) error {
	if !labelRE.MatchString(d) {
		return invalid("domain", d, labelRule)
	}
	return nil
}

// Zone reports whether z is a valid zone name.
func Zone(z string) error {
	if !labelRE.MatchString(z) {
		return invalid("zone", z, labelRule)
	}
	return nil
}

// Namespace reports whether ns is a valid "domain/name" and returns its parts.
func Namespace(ns string) (domain, name string, err error) {
	domain, name, ok := strings.Cut(ns, "/")
	if !ok {
		return "", "", invalid("namespace", ns, `want "domain/name"`)
	}
	if err := Domain(domain); err != nil {
		return "", "", invalid("namespace", ns, "domain part: "+labelRule)
	}
	if !nameRE.MatchString(name) {
		return "", "", invalid("namespace", ns,
			"name part: want 1-128 bytes of a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit")
	}
	return domain, name, nil
}

// Service reports whether s is a valid name of a consumer's service.
func Service(s string) error {
	if !serviceRE.MatchString(s) {
		return invalid("service", s, "want 1-63 bytes of a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit")
	}
	return nil
}

// ServiceOf turns a program's name into a service name: lower case, each
// run of other bytes one '-', trimmed to the grammar's ends and 63 bytes;
// "" when nothing is left ("Checkout API" → "checkout-api"). Pass the
// program's base name, not its path.
func ServiceOf(program string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(program) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	s := b.String()
	if len(s) > MaxLabelLen {
		s = s[:MaxLabelLen]
	}
	s = strings.TrimFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') })
	if Service(s) != nil {
		return ""
	}
	return s
}

// Key reports whether k is a valid property key.
func Key(k string) error {
	if k == "" {
		return invalid("key", k, "empty")
	}
	if len(k) > MaxKeyLen {
		return invalid("key", k, fmt.Sprintf("%d bytes, limit %d", len(k), MaxKeyLen))
	}
	for _, seg := range strings.Split(k, "/") {
		if !segmentRE.MatchString(seg) {
			return invalid("key", k,
				"want '/'-separated segments of A-Z, a-z, 0-9, '_', '.', '-', each non-empty and not starting with '.' or '-'")
		}
	}
	return nil
}

// PreviewSuffix ends the name of a policy namespace's preview namespace,
// which control alone writes (docs/preview.md): the experiments being
// previewed of "payments/firewall" travel in "payments/firewall--preview".
const PreviewSuffix = "--preview"

// Preview returns the preview namespace of policy namespace ns. It may be
// too long to be valid when ns's name is within len(PreviewSuffix) bytes
// of MaxNameLen; check it with Namespace.
func Preview(ns string) string { return ns + PreviewSuffix }

// IsPreview reports whether ns is a preview namespace.
func IsPreview(ns string) bool { return strings.HasSuffix(ns, PreviewSuffix) }

// Experiment reports whether id is a valid policy experiment id (the last
// segment of an experiment's name): a label, like a domain.
func Experiment(id string) error {
	if !labelRE.MatchString(id) {
		return invalid("experiment id", id, labelRule)
	}
	return nil
}

// Resource names of the policy-preview API (AIP-236; docs/preview.md):
// policy namespace "{domain}/{policy}" is "domains/{domain}/policies/{policy}",
// its experiment {id} "domains/{domain}/policies/{policy}/experiments/{id}".
const (
	PolicyResourcePrefix = "domains/"
	PoliciesSegment      = "/policies/"
	ExperimentsSegment   = "/experiments/"
)

// PolicyResource returns the resource name of policy namespace ns.
func PolicyResource(ns string) string {
	d, n, _ := strings.Cut(ns, "/")
	return PolicyResourcePrefix + d + PoliciesSegment + n
}

// ExperimentResource returns the resource name of experiment id of ns.
func ExperimentResource(ns, id string) string { return PolicyResource(ns) + ExperimentsSegment + id }
