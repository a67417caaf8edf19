package cache

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	badger "github.com/dgraph-io/badger/v4"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Meta describes a cached version. An update's Meta describes the version
// the update produces, in full.
type Meta struct {
	// Version is the version's sequence number.
	Version uint64
	// Checksum is the canonical checksum of the version's content
	// ("sha256:" and 64 hex digits); an update is verified against it.
	Checksum string
	// Kind of the namespace.
	Kind lehrpb.NamespaceKind
	// Info describes the version (author, message, time…); optional.
	Info *lehrpb.VersionInfo
}

// Update is a snapshot, which replaces every property, or a patch against
// the cached version Base. Build one with SnapshotUpdate or PatchUpdate.
type Update struct {
	// IsPatch selects Patch and Base; otherwise Snapshot is used.
	IsPatch  bool
	Snapshot content.Snapshot
	Patch    content.Patch
	Base     uint64
}

// SnapshotUpdate returns an update that replaces the namespace with s.
func SnapshotUpdate(s content.Snapshot) Update { return Update{Snapshot: s} }

// PatchUpdate returns an update that applies p to version base.
func PatchUpdate(base uint64, p content.Patch) Update {
	return Update{IsPatch: true, Patch: p, Base: base}
}

func (c *Cache) lockNS(ns string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(ns))
	return &c.locks[h.Sum32()%uint32(len(c.locks))]
}

func validChecksum(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	return ok && len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == ""
}

// Apply applies u to namespace ns, producing the version m, and returns the
// resulting content. It computes the resulting content and verifies that it
// hashes to m.Checksum before anything becomes visible: on any error the
// previously cached version is intact.
//
// A snapshot is accepted when m.Version is at least the cached version
// (equal rewrites the version, e.g. to repair it); a patch requires the
// cached version to be u.Base and m.Version to be newer. A patch writes only
// the keys it sets or deletes, plus the meta, in one transaction. Errors
// wrap ErrInvalid, ErrChecksumMismatch, ErrNotFound (patch without a cached
// base), ErrBaseMismatch, ErrStale, ErrCorrupt (the cached base is damaged:
// drop it and fetch a snapshot) or ErrClosed.
func (c *Cache) Apply(ns string, m Meta, u Update) (content.Snapshot, error) {
	if err := c.enter(); err != nil {
		return content.Snapshot{}, err
	}
	defer c.closeMu.RUnlock()
	what := "snapshot"
	if u.IsPatch {
		what = "patch"
	}
	if _, _, err := names.Namespace(ns); err != nil {
		return content.Snapshot{}, fmt.Errorf("apply %s: %w: %w", what, ErrInvalid, err)
	}
	if !validChecksum(m.Checksum) {
		return content.Snapshot{}, fmt.Errorf("apply %s to %s@%d: %w: checksum %q, want \"sha256:\" and 64 lowercase hex digits",
			what, ns, m.Version, ErrInvalid, m.Checksum)
	}
	mu := c.lockNS(ns)
	mu.Lock()
	defer mu.Unlock()
	var (
		snap content.Snapshot
		err  error
	)
	if u.IsPatch {
		snap, err = c.applyPatch(ns, m, u)
	} else {
		snap, err = c.applySnapshot(ns, m, u.Snapshot)
	}
	if err != nil {
		if errors.Is(err, ErrChecksumMismatch) {
			c.stats.mismatches.Add(1)
		}
		return content.Snapshot{}, fmt.Errorf("cache: apply %s to %s@%d: %w", what, ns, m.Version, err)
	}
	if u.IsPatch {
		c.stats.patches.Add(1)
	} else {
		c.stats.snapshots.Add(1)
	}
	return snap, nil
}

func checkKeys(ps []content.Property) error {
	for _, p := range ps {
		if err := names.Key(p.Key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

func (c *Cache) applyPatch(ns string, m Meta, u Update) (content.Snapshot, error) {
	if err := checkKeys(u.Patch.Set); err != nil {
		return content.Snapshot{}, err
	}
	txn := c.db.NewTransaction(true)
	defer txn.Discard()
	cur, err := getRecord(txn, ns)
	if err != nil {
		return content.Snapshot{}, err
	}
	if cur.Version != u.Base {
		return content.Snapshot{}, fmt.Errorf("%w: patch base %d, cached %d", ErrBaseMismatch, u.Base, cur.Version)
	}
	if m.Version <= cur.Version {
		return content.Snapshot{}, fmt.Errorf("%w: patch to version %d, cached %d", ErrStale, m.Version, cur.Version)
	}
	old, err := readGeneration(txn, ns, cur)
	if err != nil {
		c.stats.corruptions.Add(1)
		return content.Snapshot{}, fmt.Errorf("read base %d: %w", cur.Version, err)
	}
	next, err := old.Apply(u.Patch)
	if err != nil {
		return content.Snapshot{}, fmt.Errorf("%w: patch does not apply to version %d: %w", ErrInvalid, cur.Version, err)
	}
	if sum := next.Checksum(); sum != m.Checksum {
		return content.Snapshot{}, fmt.Errorf("%w: patched content hashes to %s, update states %s", ErrChecksumMismatch, sum, m.Checksum)
	}
	rec, err := encodeRecord(record{Meta: m, gen: cur.gen, count: uint64(next.Len())})
	if err != nil {
		return content.Snapshot{}, err
	}
	var keys, bytes uint64
	err = func() error {
		for _, p := range u.Patch.Set {
			k, v := propKey(ns, cur.gen, p.Key), encodeValue(p)
			if err := txn.Set(k, v); err != nil {
				return err
			}
			keys, bytes = keys+1, bytes+uint64(len(k)+len(v))
		}
		for _, key := range u.Patch.Delete {
			if err := txn.Delete(propKey(ns, cur.gen, key)); err != nil {
				return err
			}
			keys++
		}
		return txn.Set(metaKey(ns), rec)
	}()
	if errors.Is(err, badger.ErrTxnTooBig) {
		// A patch too large for one transaction is written as the snapshot
		// it produces, with the same atomicity.
		txn.Discard()
		return next, c.writeStaged(ns, &cur, m, next, cur.gen+1)
	}
	if err == nil {
		err = txn.Commit()
	}
	if err != nil {
		return content.Snapshot{}, fmt.Errorf("write patch: %w", err)
	}
	c.stats.keys.Add(keys + 1)
	c.stats.bytes.Add(bytes + uint64(len(rec)))
	return next, nil
}

func (c *Cache) applySnapshot(ns string, m Meta, snap content.Snapshot) (content.Snapshot, error) {
	if err := checkKeys(snap.Props()); err != nil {
		return content.Snapshot{}, err
	}
	if sum := snap.Checksum(); sum != m.Checksum {
		return content.Snapshot{}, fmt.Errorf("%w: snapshot hashes to %s, update states %s", ErrChecksumMismatch, sum, m.Checksum)
	}
	var cur *record
	err := c.db.View(func(txn *badger.Txn) error {
		r, err := getRecord(txn, ns)
		if err == nil {
			cur = &r
		}
		return err
	})
	switch {
	case err == nil:
		if m.Version < cur.Version {
			return content.Snapshot{}, fmt.Errorf("%w: snapshot of version %d, cached %d", ErrStale, m.Version, cur.Version)
		}
	case errors.Is(err, ErrNotFound):
	case errors.Is(err, ErrCorrupt):
		// The meta itself is damaged, so its generation is unknown: remove
		// everything of the namespace, then write the snapshot afresh.
		c.log.Warn("replacing namespace with corrupt metadata", "namespace", ns, "err", err)
		c.stats.corruptions.Add(1)
		if err := c.dropLocked(ns); err != nil {
			return content.Snapshot{}, err
		}
	default:
		return content.Snapshot{}, err
	}
	gen := uint64(1)
	if cur != nil {
		gen = cur.gen + 1
	}
	err = c.writeOneTxn(ns, cur, m, snap, gen)
	if errors.Is(err, badger.ErrTxnTooBig) {
		err = c.writeStaged(ns, cur, m, snap, gen)
	}
	if err != nil {
		return content.Snapshot{}, err
	}
	return snap, nil
}

// writeOneTxn writes snap as generation gen, removes the old generation and
// flips the meta, all in one transaction. It returns badger.ErrTxnTooBig
// (having written nothing) when that does not fit.
func (c *Cache) writeOneTxn(ns string, cur *record, m Meta, snap content.Snapshot, gen uint64) error {
	rec, err := encodeRecord(record{Meta: m, gen: gen, count: uint64(snap.Len())})
	if err != nil {
		return err
	}
	txn := c.db.NewTransaction(true)
	defer txn.Discard()
	// Keys to delete: leftovers of an interrupted drop in the new
	// generation, and the whole old generation. Collected before writing.
	var dels [][]byte
	leftovers, err := listKeys(txn, genPrefix(ns, gen))
	if err != nil {
		return err
	}
	for _, k := range leftovers {
		if _, ok := snap.Get(string(k[len(genPrefix(ns, gen)):])); !ok {
			dels = append(dels, k)
		}
	}
	if cur != nil {
		old, err := listKeys(txn, genPrefix(ns, cur.gen))
		if err != nil {
			return err
		}
		dels = append(dels, old...)
	}
	var keys, bytes uint64
	for _, p := range snap.Props() {
		k, v := propKey(ns, gen, p.Key), encodeValue(p)
		if err := txn.Set(k, v); err != nil {
			return err
		}
		keys, bytes = keys+1, bytes+uint64(len(k)+len(v))
	}
	for _, k := range dels {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	if err := txn.Set(metaKey(ns), rec); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	c.stats.keys.Add(keys + uint64(len(dels)) + 1)
	c.stats.bytes.Add(bytes + uint64(len(rec)))
	return nil
}

// writeStaged writes snap as generation gen in batches nobody reads, then
// flips the meta to gen in one small transaction, then deletes the old
// generation. A crash before the flip leaves the old version; after it, the
// new one. Unreferenced generations are swept by Open.
func (c *Cache) writeStaged(ns string, cur *record, m Meta, snap content.Snapshot, gen uint64) error {
	c.stats.staged.Add(1)
	rec, err := encodeRecord(record{Meta: m, gen: gen, count: uint64(snap.Len())})
	if err != nil {
		return err
	}
	if _, err := c.deletePrefix(genPrefix(ns, gen)); err != nil {
		return fmt.Errorf("clear generation %d: %w", gen, err)
	}
	wb := c.db.NewWriteBatch()
	defer wb.Cancel()
	var keys, bytes uint64
	for _, p := range snap.Props() {
		k, v := propKey(ns, gen, p.Key), encodeValue(p)
		if err = wb.Set(k, v); err != nil {
			break
		}
		keys, bytes = keys+1, bytes+uint64(len(k)+len(v))
	}
	if err == nil {
		err = wb.Flush()
	}
	c.stats.keys.Add(keys)
	c.stats.bytes.Add(bytes)
	if err != nil {
		if _, cerr := c.deletePrefix(genPrefix(ns, gen)); cerr != nil {
			c.log.Warn("could not remove a partially staged generation; Open will", "namespace", ns, "generation", gen, "err", cerr)
		}
		return fmt.Errorf("stage generation %d: %w", gen, err)
	}
	if err := c.db.Update(func(txn *badger.Txn) error { return txn.Set(metaKey(ns), rec) }); err != nil {
		return fmt.Errorf("switch to generation %d: %w", gen, err)
	}
	c.stats.keys.Add(1)
	c.stats.bytes.Add(uint64(len(rec)))
	if cur != nil {
		if _, err := c.deletePrefix(genPrefix(ns, cur.gen)); err != nil {
			// The new version is in place; the old generation is garbage.
			c.log.Warn("could not remove the previous generation; Open will", "namespace", ns, "generation", cur.gen, "err", err)
		}
	}
	return nil
}

// Drop removes namespace ns from the cache. Dropping a namespace that is not
// cached is not an error. The namespace disappears atomically; if removing
// its properties fails afterwards the error is returned and Open sweeps
// them.
func (c *Cache) Drop(ns string) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.closeMu.RUnlock()
	if _, _, err := names.Namespace(ns); err != nil {
		return fmt.Errorf("cache: drop: %w: %w", ErrInvalid, err)
	}
	mu := c.lockNS(ns)
	mu.Lock()
	defer mu.Unlock()
	if err := c.dropLocked(ns); err != nil {
		return fmt.Errorf("cache: drop %s: %w", ns, err)
	}
	return nil
}

func (c *Cache) dropLocked(ns string) error {
	if err := c.db.Update(func(txn *badger.Txn) error { return txn.Delete(metaKey(ns)) }); err != nil {
		return fmt.Errorf("delete meta: %w", err)
	}
	c.stats.keys.Add(1)
	if _, err := c.deletePrefix(nsPropPrefix(ns)); err != nil {
		return fmt.Errorf("delete properties: %w", err)
	}
	return nil
}

// deletePrefix deletes every key with the prefix in batches and returns how
// many it deleted.
func (c *Cache) deletePrefix(prefix []byte) (int, error) {
	var keys [][]byte
	err := c.db.View(func(txn *badger.Txn) error {
		var err error
		keys, err = listKeys(txn, prefix)
		return err
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	return len(keys), c.deleteKeys(keys)
}

func (c *Cache) deleteKeys(keys [][]byte) error {
	wb := c.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	c.stats.keys.Add(uint64(len(keys)))
	return nil
}

// listKeys returns copies of the keys with the prefix, reading no values.
func listKeys(txn *badger.Txn, prefix []byte) ([][]byte, error) {
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = prefix
	it := txn.NewIterator(opts)
	defer it.Close()
	var keys [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	return keys, nil
}
