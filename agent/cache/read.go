package cache

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
)

// Entry is what the agent announces for one cached namespace when it
// (re)connects to a distributor.
type Entry struct {
	Namespace string
	// Ref is the version cached: its number and checksum.
	Ref content.Ref
}

// getRecord reads the meta of ns. Errors wrap ErrNotFound or ErrCorrupt.
func getRecord(txn *badger.Txn, ns string) (record, error) {
	item, err := txn.Get(metaKey(ns))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return record{}, fmt.Errorf("%w: %s", ErrNotFound, ns)
	}
	if err != nil {
		return record{}, fmt.Errorf("read meta of %s: %w", ns, err)
	}
	var rec record
	err = item.Value(func(v []byte) error {
		var err error
		rec, err = decodeRecord(v)
		return err
	})
	if err != nil {
		return record{}, fmt.Errorf("%w: meta of %s: %w", ErrCorrupt, ns, err)
	}
	return rec, nil
}

// readGeneration reads the properties the record points at and verifies
// their count and checksum. Errors wrap ErrCorrupt.
func readGeneration(txn *badger.Txn, ns string, rec record) (content.Snapshot, error) {
	prefix := genPrefix(ns, rec.gen)
	opts := badger.DefaultIteratorOptions
	opts.Prefix = prefix
	it := txn.NewIterator(opts)
	defer it.Close()
	props := make([]content.Property, 0, rec.count)
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		key := string(item.Key()[len(prefix):])
		v, err := item.ValueCopy(nil)
		if err != nil {
			// With VerifyValueChecksum, a damaged value-log entry lands here.
			return content.Snapshot{}, fmt.Errorf("%w: %s@%d: read %q: %w", ErrCorrupt, ns, rec.Ref.Seq, key, err)
		}
		p, err := decodeValue(key, v)
		if err != nil {
			return content.Snapshot{}, fmt.Errorf("%w: %s@%d: decode %q: %w", ErrCorrupt, ns, rec.Ref.Seq, key, err)
		}
		props = append(props, p)
	}
	if uint64(len(props)) != rec.count {
		return content.Snapshot{}, fmt.Errorf("%w: %s@%d: %d properties stored, meta says %d",
			ErrCorrupt, ns, rec.Ref.Seq, len(props), rec.count)
	}
	snap, err := content.New(props)
	if err != nil {
		return content.Snapshot{}, fmt.Errorf("%w: %s@%d: %w", ErrCorrupt, ns, rec.Ref.Seq, err)
	}
	if sum := snap.Checksum(); sum != rec.Ref.Checksum {
		return content.Snapshot{}, fmt.Errorf("%w: %s@%d: content hashes to %s, meta says %s",
			ErrCorrupt, ns, rec.Ref.Seq, sum, rec.Ref.Checksum)
	}
	return snap, nil
}

// Get returns the cached version of ns, its content verified against its
// checksum. Errors wrap ErrNotFound, ErrCorrupt (drop the namespace and
// fetch a snapshot), ErrInvalid or ErrClosed.
func (c *Cache) Get(ns string) (content.Version, error) {
	if err := c.enter(); err != nil {
		return content.Version{}, err
	}
	defer c.closeMu.RUnlock()
	if _, _, err := names.Namespace(ns); err != nil {
		return content.Version{}, fmt.Errorf("cache: get: %w: %w", ErrInvalid, err)
	}
	var (
		rec  record
		snap content.Snapshot
	)
	err := c.db.View(func(txn *badger.Txn) error {
		var err error
		if rec, err = getRecord(txn, ns); err != nil {
			return err
		}
		snap, err = readGeneration(txn, ns, rec)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			c.stats.corruptions.Add(1)
		}
		return content.Version{}, fmt.Errorf("cache: get %s: %w", ns, err)
	}
	return rec.version(ns, snap), nil
}

// List returns the version and checksum of every cached namespace, in
// namespace order. It reads only the meta keys (a few dozen bytes each), so
// it is fast however large the namespaces are; it does not verify content
// (Get does). A namespace whose meta cannot be decoded is left out and
// logged, so the distributor sends it afresh.
func (c *Cache) List() ([]Entry, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.closeMu.RUnlock()
	var out []Entry
	err := c.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(metaPrefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			ns := string(item.Key()[len(metaPrefix):])
			var rec record
			err := item.Value(func(v []byte) error {
				var err error
				rec, err = decodeRecord(v)
				return err
			})
			if err != nil {
				c.stats.corruptions.Add(1)
				c.log.Warn("skipping namespace with corrupt metadata", "namespace", ns, "err", err)
				continue
			}
			out = append(out, Entry{Namespace: ns, Ref: rec.Ref})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache: list: %w", err)
	}
	return out, nil
}

// sweep deletes properties that no meta points at: generations left by an
// interrupted staged update or drop. Namespaces whose meta is corrupt are
// left alone (a snapshot replaces them whole).
func (c *Cache) sweep() (int, error) {
	gens := make(map[string]uint64)
	corrupt := make(map[string]bool)
	var garbage [][]byte
	err := c.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(metaPrefix)
		it := txn.NewIterator(opts)
		for it.Rewind(); it.Valid(); it.Next() {
			ns := string(it.Item().Key()[len(metaPrefix):])
			err := it.Item().Value(func(v []byte) error {
				rec, err := decodeRecord(v)
				gens[ns] = rec.gen
				return err
			})
			if err != nil {
				corrupt[ns] = true
			}
		}
		it.Close()

		opts = badger.DefaultIteratorOptions
		opts.Prefix = []byte(propPrefix)
		opts.PrefetchValues = false
		it = txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			ns, gen, ok := parsePropKey(k)
			if ok && corrupt[ns] {
				continue
			}
			if cur, found := gens[ns]; !ok || !found || gen != cur {
				garbage = append(garbage, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil || len(garbage) == 0 {
		return 0, err
	}
	return len(garbage), c.deleteKeys(garbage)
}
