package content

import (
	"fmt"

	"lehr.dev/lehr/proto/lehrpb"
)

// Version is one immutable version of a namespace: which one it is, its
// metadata, and its content. It is the one in-memory form of a version
// shared by control's reads, the distributor's version cache, update
// building and application, and the agent's cache. Treat every field as
// read-only once the version is built.
type Version struct {
	// Namespace is "domain/name".
	Namespace string
	// Seq is the version's sequence number, at least 1.
	Seq uint64
	// Checksum is Content.Checksum(), kept so that large namespaces are not
	// hashed again by every user.
	Checksum string
	// Kind of the namespace.
	Kind lehrpb.NamespaceKind
	// Info describes the version as control recorded it (author, message,
	// time, parent, source…); nil when unknown.
	Info *lehrpb.VersionInfo
	// Content is the version's properties.
	Content Snapshot
}

// Header returns a copy of v without its content: who it is (namespace,
// number, checksum, kind, info), for a holder that must not keep the
// properties alive (a cache bounds them). A nil v gives nil.
func (v *Version) Header() *Version {
	if v == nil {
		return nil
	}
	h := *v
	h.Content = Snapshot{}
	return &h
}

// Ref returns which version v is: its sequence number and checksum. A nil
// v gives the zero Ref.
func (v *Version) Ref() Ref {
	if v == nil {
		return Ref{}
	}
	return Ref{Seq: v.Seq, Checksum: v.Checksum}
}

// Verify reports whether Content hashes to Checksum, returning the
// computed checksum either way.
func (v *Version) Verify() (sum string, ok bool) {
	sum = v.Content.Checksum()
	return sum, sum == v.Checksum
}

// Ref names one version of a namespace (which namespace is known from
// context): its sequence number and the checksum of its content. It is
// what a holder announces, what a goal names and what an update is
// checked against. Two copies are the same version exactly when their
// Refs are equal (==): the same number with another checksum is other
// content — a corrupt copy, or a store restored from a backup. Ref is
// comparable, so it can key a map.
//
// The zero Ref means no version (nothing held, no goal). Ref is an
// in-memory type only: wire messages and files keep their own version and
// checksum fields.
type Ref struct {
	// Seq is the version's sequence number; 0 means none.
	Seq uint64
	// Checksum is the checksum of the version's content
	// (Snapshot.Checksum), "sha256:" and 64 hex digits; empty when unknown.
	Checksum string
}

// String returns r as "7 (sha256:0123456789ab…)": the sequence number and
// the start of the checksum ("no checksum" when empty), for logs and
// errors.
func (r Ref) String() string {
	return fmt.Sprintf("%d (%s)", r.Seq, shortChecksum(r.Checksum))
}

// shortChecksum abbreviates a checksum to its prefix and 12 hex digits.
func shortChecksum(s string) string {
	const prefix = len("sha256:")
	if s == "" {
		return "no checksum"
	}
	if len(s) > prefix+12 {
		return s[:prefix+12] + "…"
	}
	return s
}
