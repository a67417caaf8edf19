package consumer

import (
	"fmt"
	"os"
	"time"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
)

// View is one immutable, checksum-verified version of a namespace. Byte
// slices it returns are shared: do not modify them.
type View struct {
	namespace string
	version   uint64
	checksum  string
	kind      lehrpb.NamespaceKind
	author    string
	message   string
	created   time.Time
	// rollbackOf is the older version this one republishes (0: none).
	rollbackOf uint64
	snap       content.Snapshot
	// policy is snap's rules compiled, for Evaluate.
	policy compiled
	// shadow is a preview namespace's experiments compiled, for the
	// policy subscription that follows it.
	shadow shadowSet
}

// supersedes reports whether v replaces o as the current view: a newer
// version, or the same version with another checksum — a repair, which the
// agent writes when its copy of a version turns out not to be control's
// (docs/wire.md, "Updates and ordering"). A nil o is the empty view.
func (v *View) supersedes(o *View) bool {
	if o == nil {
		return v.version > 0
	}
	return v.version > o.version || v.version == o.version && v.version > 0 && v.checksum != o.checksum
}

// Namespace returns "domain/name".
func (v *View) Namespace() string { return v.namespace }

// Version returns the version number, 0 for the empty view before any
// content arrived.
func (v *View) Version() uint64 { return v.version }

// Checksum returns the content checksum ("sha256:…"), "" for the empty view.
func (v *View) Checksum() string { return v.checksum }

// Kind returns the namespace kind.
func (v *View) Kind() lehrpb.NamespaceKind { return v.kind }

// Author returns who published the version ("" for the empty view).
func (v *View) Author() string { return v.author }

// Message returns why the version was published.
func (v *View) Message() string { return v.message }

// CreateTime returns when the version was published (zero for the empty view).
func (v *View) CreateTime() time.Time { return v.created }

// RollbackOf returns the older version whose content this version
// republishes — a rollback, by an operator or by a rollout that failed its
// checks — and 0 for any other version. Versions only move forward: a
// rollback is a new version with old content.
func (v *View) RollbackOf() uint64 { return v.rollbackOf }

// Get returns a property's value: the view's own bytes, not a copy,
// shared with every caller and every later Get. Do not modify them; the
// slice's capacity ends with the value, so appending to it copies and
// cannot reach another value.
func (v *View) Get(key string) ([]byte, bool) {
	p, ok := v.snap.Get(key)
	return p.Value, ok
}

// ContentType returns a property's content type ("" if none or absent).
func (v *View) ContentType(key string) string {
	p, _ := v.snap.Get(key)
	return p.ContentType
}

// Keys returns the keys in order.
func (v *View) Keys() []string { return v.snap.Keys() }

// Len returns the number of properties.
func (v *View) Len() int { return v.snap.Len() }

// readView reads and verifies the namespace file at path and returns it
// with the file's stat. When the file is the one last read — last is its
// stat: the same file, size and modification time — it reads nothing and
// returns a nil view with last. The agent replaces a file by renaming a
// new one over it, so an unchanged stat is unchanged content; reading it
// again (start and the watcher both load, an event repeats) would only
// cost a second copy of the data for a while.
//
// The view's values share one buffer of exactly the file's body
// (nsfile.ReadOpen): a view holds one copy of its data.
func readView(path string, last os.FileInfo) (*View, os.FileInfo, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: %w", err)
	}
	if last != nil && os.SameFile(fi, last) && fi.Size() == last.Size() && fi.ModTime().Equal(last.ModTime()) {
		return nil, last, nil
	}
	f, err := nsfile.ReadOpen(fh)
	if err != nil {
		return nil, nil, err
	}
	return &View{
		namespace:  f.Namespace,
		version:    f.Version,
		checksum:   f.Checksum,
		kind:       f.Kind,
		author:     f.Author,
		message:    f.Message,
		created:    f.CreateTime,
		rollbackOf: f.RollbackOf,
		snap:       f.Content,
	}, fi, nil
}

// filePath is where the agent writes namespace ns under filesDir.
func filePath(filesDir, ns string) (string, error) { return nsfile.Path(filesDir, ns) }
