package cache

import (
	"errors"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/proto/lehrpb"
)

// Apply applies the Update u (as the wire decoder returns it: valid, in
// full form) to its namespace and returns the version it produces. It
// decides with update.Check against the cached version (version 0 when the
// namespace is not cached, or its metadata is unreadable) and computes the
// content with update.Apply, verified against u's checksum, before
// anything becomes visible: on any error the previously cached version is
// intact.
//
// A patch writes only the keys it sets or deletes, plus the meta, in one
// transaction. Errors wrap internal/update's refusals (ErrStale, ErrGap,
// ErrBaseMismatch, ErrPatchConflict, ErrChecksumMismatch), ErrCorrupt (the
// cached base is damaged: drop it and fetch a snapshot), ErrInvalid or
// ErrClosed.
func (c *Cache) Apply(u *lehrpb.Update) (content.Version, error) {
	if err := c.enter(); err != nil {
		return content.Version{}, err
	}
	defer c.closeMu.RUnlock()
	ns, what := u.GetNamespace(), "patch"
	if u.GetSnapshot() {
		what = "snapshot"
	}
	if _, _, err := names.Namespace(ns); err != nil {
		return content.Version{}, fmt.Errorf("cache: apply %s: %w: %w", what, ErrInvalid, err)
	}
	if sum := u.GetChecksum(); !validChecksum(sum) {
		return content.Version{}, fmt.Errorf("cache: apply %s to %s@%d: %w: checksum %q, want \"sha256:\" and 64 lowercase hex digits",
			what, ns, u.GetVersion(), ErrInvalid, sum)
	}
	defer c.locks.Lock(ns)()
	var (
		rec record
		err error
	)
	if u.GetSnapshot() {
		rec, err = c.applySnapshot(ns, u)
	} else {
		rec, err = c.applyPatch(ns, u)
	}
	if err != nil {
		if errors.Is(err, update.ErrChecksumMismatch) {
			c.stats.mismatches.Add(1)
		}
		return content.Version{}, fmt.Errorf("cache: apply %s to %s@%d: %w", what, ns, u.GetVersion(), err)
	}
	if u.GetSnapshot() {
		c.stats.snapshots.Add(1)
	} else {
		c.stats.patches.Add(1)
	}
	return rec.version(ns, rec.snap), nil
}

func validChecksum(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	return ok && len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == ""
}

// newRecord is the record of the version u produces, holding snap in
// generation gen.
func newRecord(u *lehrpb.Update, snap content.Snapshot, gen uint64) record {
	return record{Ref: content.Ref{Seq: u.GetVersion(), Checksum: u.GetChecksum()}, Kind: u.GetKind(), Info: u.GetInfo(),
		gen: gen, count: uint64(snap.Len()), snap: snap}
}

func checkKeys(ps []content.Property) error {
	for _, p := range ps {
		if err := names.Key(p.Key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

func (c *Cache) applyPatch(ns string, u *lehrpb.Update) (record, error) {
	set := content.FromProto(u.GetSet())
	if err := checkKeys(set); err != nil {
		return record{}, err
	}
	txn := c.db.NewTransaction(true)
	defer txn.Discard()
	cur, err := getRecord(txn, ns)
	switch {
	case errors.Is(err, ErrNotFound):
		// Nothing cached: the patch's base has not arrived.
		return record{}, update.Check(content.Ref{}, u)
	case err != nil:
		return record{}, err
	}
	if err := update.Check(cur.Ref, u); err != nil {
		return record{}, err
	}
	old, err := readGeneration(txn, ns, cur)
	if err != nil {
		c.stats.corruptions.Add(1)
		return record{}, fmt.Errorf("read base %d: %w", cur.Ref.Seq, err)
	}
	next, err := update.Apply(old, u)
	if err != nil {
		return record{}, err
	}
	rec := newRecord(u, next, cur.gen)
	enc, err := encodeRecord(rec)
	if err != nil {
		return record{}, err
	}
	var keys, bytes uint64
	err = func() error {
		for _, p := range set {
			k, v := propKey(ns, cur.gen, p.Key), encodeValue(p)
			if err := txn.Set(k, v); err != nil {
				return err
			}
			keys, bytes = keys+1, bytes+uint64(len(k)+len(v))
		}
		for _, key := range u.GetDelete() {
			if err := txn.Delete(propKey(ns, cur.gen, key)); err != nil {
				return err
			}
			keys++
		}
		return txn.Set(metaKey(ns), enc)
	}()
	if errors.Is(err, badger.ErrTxnTooBig) {
		// A patch too large for one transaction is written as the snapshot
		// it produces, with the same atomicity.
		txn.Discard()
		rec.gen = cur.gen + 1
		return rec, c.writeStaged(ns, &cur, rec)
	}
	if err == nil {
		err = txn.Commit()
	}
	if err != nil {
		return record{}, fmt.Errorf("write patch: %w", err)
	}
	c.stats.keys.Add(keys + 1)
	c.stats.bytes.Add(bytes + uint64(len(enc)))
	return rec, nil
}

func (c *Cache) applySnapshot(ns string, u *lehrpb.Update) (record, error) {
	var cur *record
	err := c.db.View(func(txn *badger.Txn) error {
		r, err := getRecord(txn, ns)
		if err == nil {
			cur = &r
		}
		return err
	})
	corrupt := errors.Is(err, ErrCorrupt)
	switch {
	case err == nil:
		if err := update.Check(cur.Ref, u); err != nil {
			return record{}, err
		}
	case errors.Is(err, ErrNotFound), corrupt:
	default:
		return record{}, err
	}
	snap, err := update.Apply(content.Snapshot{}, u)
	if err != nil {
		return record{}, err
	}
	if err := checkKeys(snap.Props()); err != nil {
		return record{}, err
	}
	if corrupt {
		// The meta itself is damaged, so its generation is unknown: remove
		// everything of the namespace, then write the snapshot afresh.
		c.log.Warn("replacing namespace with corrupt metadata", "namespace", ns)
		c.stats.corruptions.Add(1)
		if err := c.dropLocked(ns); err != nil {
			return record{}, err
		}
	}
	gen := uint64(1)
	if cur != nil {
		gen = cur.gen + 1
	}
	rec := newRecord(u, snap, gen)
	err = c.writeOneTxn(ns, cur, rec)
	if errors.Is(err, badger.ErrTxnTooBig) {
		err = c.writeStaged(ns, cur, rec)
	}
	if err != nil {
		return record{}, err
	}
	return rec, nil
}

// writeOneTxn writes rec's content as its generation, removes the old
// generation and flips the meta, all in one transaction. It returns
// badger.ErrTxnTooBig (having written nothing) when that does not fit.
func (c *Cache) writeOneTxn(ns string, cur *record, r record) error {
	snap, gen := r.snap, r.gen
	rec, err := encodeRecord(r)
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

// writeStaged writes rec's content as its generation in batches nobody
// reads, then flips the meta to it in one small transaction, then deletes
// the old generation. A crash before the flip leaves the old version;
// after it, the new one. Unreferenced generations are swept by Open.
func (c *Cache) writeStaged(ns string, cur *record, r record) error {
	c.stats.staged.Add(1)
	snap, gen := r.snap, r.gen
	rec, err := encodeRecord(r)
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
	defer c.locks.Lock(ns)()
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
