// Package validate checks content before control stores it: the built-in
// checks (names, sizes, property count, content types) and pluggable
// validators (JSON Schema per namespace, CEL compilation of policy rules).
// Every check reports a *Violation saying which key and field, why, and the
// limit; control turns it into an API error naming the request field.
//
// Imported by control/service and bench. The policy rule
// format is package policy's, which consumers evaluate with.
//
// # Limits and status codes
//
// The hard caps below are the most any domain quota may allow; ForDomain
// lowers them to a domain's quotas, never raises them. Codes follow gRPC
// semantics:
//
//   - codes.InvalidArgument: the request is wrong whatever the server's
//     state — a key breaking the grammar, one value over the per-value cap,
//     a malformed content type, a value that does not parse as its content
//     type, a value rejected by the namespace's JSON Schema or policy rules.
//   - codes.ResourceExhausted: a version would exceed a namespace-wide quota
//     (total bytes, property count). Whether a patch does depends on what the
//     namespace already holds, so this is a quota, not a malformed request.
//
// # Content types
//
// A property's content type is optional ("" means opaque bytes). When set it
// must be at most MaxContentType bytes and parse with mime.ParseMediaType.
// The value is then checked against it:
//
//   - application/json and any "+json" type: one valid JSON document
//     (RFC 8259, UTF-8).
//   - application/yaml, application/x-yaml, text/yaml and any "+yaml" type:
//     valid YAML that converts to JSON (string map keys).
//   - any other text/* type: valid UTF-8; a charset parameter, if present,
//     must be utf-8 or us-ascii.
//   - everything else: opaque, not inspected.
//
// # Policy rules
//
// Each property of a policy namespace is one rule, a JSON or YAML document:
//
//	{"effect": "allow" | "deny", "condition": "<CEL expression>", "description": "..."}
//
// See policy.Rule for the full contract. A rule whose condition exceeds
// policy.MaxCost on every evaluation is refused (policy.Admit).
package validate

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Hard caps: the most any domain quota may allow.
const (
	MaxValueBytes     = 512 << 10 // 512 KiB per value
	MaxNamespaceBytes = 16 << 20  // 16 MiB per version (keys + values)
	MaxProperties     = 10000
	MaxMessageBytes   = 1024 // version message
	MaxAuthorBytes    = 256
	MaxRequestIDBytes = 128 // request_id: printable ASCII
	MaxContentType    = 128
)

// Limits are the caps in force for one namespace. A zero or negative field
// means the hard cap, so the zero Limits equals DefaultLimits.
type Limits struct {
	MaxValueBytes     int64
	MaxNamespaceBytes int64
	MaxProperties     int
}

// DefaultLimits returns the hard caps.
func DefaultLimits() Limits {
	return Limits{MaxValueBytes: MaxValueBytes, MaxNamespaceBytes: MaxNamespaceBytes, MaxProperties: MaxProperties}
}

// ForDomain returns the limits for a domain: its quotas where set and lower
// than the hard caps, the hard caps otherwise. A nil q gives the hard caps.
func ForDomain(q *lehrpb.Quotas) Limits {
	l := DefaultLimits()
	if v := q.GetMaxValueBytes(); v > 0 && v < l.MaxValueBytes {
		l.MaxValueBytes = v
	}
	if v := q.GetMaxNamespaceBytes(); v > 0 && v < l.MaxNamespaceBytes {
		l.MaxNamespaceBytes = v
	}
	if v := int(q.GetMaxProperties()); v > 0 && v < l.MaxProperties {
		l.MaxProperties = v
	}
	return l
}

// effective replaces unset fields with the hard caps.
func (l Limits) effective() Limits {
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = MaxValueBytes
	}
	if l.MaxNamespaceBytes <= 0 {
		l.MaxNamespaceBytes = MaxNamespaceBytes
	}
	if l.MaxProperties <= 0 {
		l.MaxProperties = MaxProperties
	}
	return l
}

// Violation is one reason content was rejected.
type Violation struct {
	Code codes.Code // InvalidArgument or ResourceExhausted
	// Reason is an apierror reason, e.g. apierror.ReasonValueTooLarge.
	Reason string
	// Key is the property at fault ("" for namespace-wide violations).
	Key string
	// Field is the part of the property at fault: "key", "value",
	// "content_type", or "" for namespace-wide violations. For a namespace
	// whose JSON Schema does not compile it is "json_schema".
	Field string
	// Message says what is wrong and what is allowed.
	Message string
	// Limit, if a limit was exceeded, e.g. "524288 bytes".
	Limit string
}

func (v *Violation) Error() string { return "validate: " + v.Message }

// Property checks one property on its own: key grammar, value size and
// content type (JSON and YAML types must parse, text/* must be UTF-8, the
// media type must be well formed and at most MaxContentType bytes).
// Checks run in that order and the first failure is returned.
func Property(p content.Property, l Limits) *Violation {
	l = l.effective()
	if err := names.Key(p.Key); err != nil {
		msg := err.Error()
		if ne, ok := err.(*names.Error); ok {
			msg = fmt.Sprintf("invalid key %s: %s", ne.Quoted(), ne.Reason)
		}
		return &Violation{
			Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidName,
			Key: p.Key, Field: "key", Message: msg,
		}
	}
	if n := int64(len(p.Value)); n > l.MaxValueBytes {
		return &Violation{
			Code: codes.InvalidArgument, Reason: apierror.ReasonValueTooLarge,
			Key: p.Key, Field: "value",
			Message: fmt.Sprintf("value of %q is %d bytes; a value may be at most %d bytes", p.Key, n, l.MaxValueBytes),
			Limit:   fmt.Sprintf("%d bytes", l.MaxValueBytes),
		}
	}
	return checkContent(p)
}

// Snapshot checks a whole version: total size (keys plus values) and
// property count. It does not check the properties one by one; see Property.
func Snapshot(s content.Snapshot, l Limits) *Violation {
	l = l.effective()
	if n := s.Size(); n > l.MaxNamespaceBytes {
		return &Violation{
			Code: codes.ResourceExhausted, Reason: apierror.ReasonNamespaceTooLarge,
			Message: fmt.Sprintf("the version would hold %d bytes of keys and values; a namespace may hold at most %d bytes", n, l.MaxNamespaceBytes),
			Limit:   fmt.Sprintf("%d bytes", l.MaxNamespaceBytes),
		}
	}
	if n := s.Len(); n > l.MaxProperties {
		return &Violation{
			Code: codes.ResourceExhausted, Reason: apierror.ReasonTooManyProperties,
			Message: fmt.Sprintf("the version would hold %d properties; a namespace may hold at most %d properties", n, l.MaxProperties),
			Limit:   fmt.Sprintf("%d properties", l.MaxProperties),
		}
	}
	return nil
}
