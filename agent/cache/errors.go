package cache

import "errors"

// Sentinel errors. Errors returned by the cache wrap them with the
// namespace and versions involved; use errors.Is.
var (
	// ErrNotFound: the namespace is not in the cache.
	ErrNotFound = errors.New("cache: namespace not cached")
	// ErrChecksumMismatch: the content an update would produce does not
	// hash to the checksum the update states. Nothing was written; the
	// previous version is intact. Ask for a snapshot.
	ErrChecksumMismatch = errors.New("cache: checksum mismatch")
	// ErrCorrupt: the stored namespace does not match its own checksum or
	// cannot be decoded (bit rot, a bug). Drop the namespace and ask for a
	// snapshot.
	ErrCorrupt = errors.New("cache: corrupt namespace")
	// ErrBaseMismatch: a patch is based on a version other than the cached
	// one. Ask for the delta from the cached version, or a snapshot.
	ErrBaseMismatch = errors.New("cache: patch base is not the cached version")
	// ErrStale: the update's version is older than the cached one (or, for
	// a patch, not newer). Versions are never applied out of order.
	ErrStale = errors.New("cache: version older than the cached one")
	// ErrInvalid: the request itself is malformed (bad namespace name,
	// missing checksum). Nothing was written.
	ErrInvalid = errors.New("cache: invalid request")
	// ErrClosed: the cache was closed.
	ErrClosed = errors.New("cache: closed")
)
