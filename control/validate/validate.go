// Package validate checks content before control stores it: the built-in
// checks (names, sizes, property count, content types) and pluggable
// validators (JSON Schema per namespace, CEL compilation of policy rules).
// Every check reports a *Violation saying which key and field, why, and the
// limit; control turns it into an API error naming the request field.
//
// Only package control and its subpackages import validate.
//
// SKELETON: signatures and contracts are final; bodies are being filled in.
package validate

import (
	"context"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Hard caps: the most any domain quota may allow.
const (
	MaxValueBytes     = 512 << 10 // 512 KiB per value
	MaxNamespaceBytes = 16 << 20  // 16 MiB per version (keys + values)
	MaxProperties     = 10000
	MaxMessageBytes   = 1024 // version message
	MaxAuthorBytes    = 256
	MaxContentType    = 128
)

// Limits are the caps in force for one namespace.
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
// than the hard caps, the hard caps otherwise.
func ForDomain(q *lehrpb.Quotas) Limits {
	return DefaultLimits()
}

// Violation is one reason content was rejected.
type Violation struct {
	Code codes.Code // InvalidArgument or ResourceExhausted
	// Reason is an apierror reason, e.g. apierror.ReasonValueTooLarge.
	Reason string
	// Key is the property at fault ("" for namespace-wide violations).
	Key string
	// Field is the part of the property at fault: "key", "value",
	// "content_type", or "" for namespace-wide violations.
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
func Property(p content.Property, l Limits) *Violation {
	return nil
}

// Snapshot checks a whole version: total size and property count.
func Snapshot(s content.Snapshot, l Limits) *Violation {
	return nil
}

// Validator is a namespace-specific check. Validate sees the properties
// that a publish adds or changes (all of them for a snapshot) and the
// namespace they belong to.
type Validator interface {
	// Name identifies the validator in errors and metrics, e.g. "jsonschema".
	Name() string
	Validate(ctx context.Context, ns *lehrpb.Namespace, changed []content.Property) *Violation
}

// For returns the validators that apply to ns: JSON Schema if the namespace
// has one, CEL rule compilation for policy namespaces. An invalid schema is
// a *Violation on field "json_schema".
func For(ns *lehrpb.Namespace) ([]Validator, *Violation) {
	return nil, nil
}
