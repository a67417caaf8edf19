package content

import "lehr.dev/lehr/proto/lehrpb"

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

// Verify reports whether Content hashes to Checksum, returning the
// computed checksum either way.
func (v *Version) Verify() (sum string, ok bool) {
	sum = v.Content.Checksum()
	return sum, sum == v.Checksum
}
