package cache

import "errors"

// Sentinel errors. Errors returned by the cache wrap them with the
// namespace and versions involved; use errors.Is. Apply's refusals of an
// update wrap internal/update's errors instead (ErrStale, ErrGap,
// ErrBaseMismatch, ErrPatchConflict, ErrChecksumMismatch): the cache
// decides with update.Check and update.Apply, as every agent does.
var (
	// ErrNotFound: the namespace is not in the cache.
	ErrNotFound = errors.New("cache: namespace not cached")
	// ErrCorrupt: the stored namespace does not match its own checksum or
	// cannot be decoded (bit rot, a bug). Drop the namespace and ask for a
	// snapshot.
	ErrCorrupt = errors.New("cache: corrupt namespace")
	// ErrInvalid: the request itself is malformed (bad namespace name,
	// missing checksum). Nothing was written.
	ErrInvalid = errors.New("cache: invalid request")
	// ErrClosed: the cache was closed.
	ErrClosed = errors.New("cache: closed")
	// ErrDamaged: Open could not open the database (a damaged manifest,
	// value log or table; Badger's own checks failed, or it panicked).
	// The cache is a cache: move it aside (Quarantine) and start empty.
	ErrDamaged = errors.New("cache: database damaged")
	// ErrInUse: another process holds the database's directory lock.
	ErrInUse = errors.New("cache: database in use by another process")
)
