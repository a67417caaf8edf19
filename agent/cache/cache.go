// Package cache is the agent's durable cache of namespace versions, kept in
// Badger on the host's disk. For every namespace the agent holds it stores the
// current version's metadata and properties, applies snapshots and patches
// atomically after verifying the resulting checksum, verifies the checksum
// again on every read, and lists (namespace, version, checksum) cheaply for
// the reconnect handshake, so an intact cache costs nothing on reconnect.
//
// Imported by agent.
//
// # Layout
//
// Keys (namespaces are validated with package names, so neither part
// contains a byte that could make one key a prefix of another's family):
//
//	m/<ns>                          meta: version, checksum, kind, generation, count, VersionInfo
//	p/<ns>/<gen as 16 hex>/<key>    one property: uvarint(len(content type)) content type, value
//
// A namespace's properties live under the generation its meta names. A patch
// sets and deletes keys of the current generation and rewrites the meta in
// one Badger transaction, so it writes only the changed keys. A snapshot
// writes a new generation and flips the meta to it; when that fits one
// transaction it is one transaction, otherwise (Badger's ErrTxnTooBig) the
// new generation is staged in batches that no reader can see, the meta is
// flipped in a final small transaction, and the old generation is deleted
// afterwards. Either way a crash leaves the previous or the new version, and
// generations no meta names are swept when the cache is opened.
package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"lehr.dev/lehr/internal/keylock"
)

// Options configure a Cache. Only Dir is required.
type Options struct {
	// Dir is the directory of the Badger database; created if missing.
	// One Cache at a time may use it (Badger locks it).
	Dir string
	// Logger receives the cache's and Badger's warnings and errors (Badger's
	// info messages at debug level). Nil means slog.Default().
	Logger *slog.Logger
	// NoSync makes commits return before their data reaches the disk. The
	// zero value is durable: every commit is fsynced, so an applied version
	// survives a machine crash. For tests and benchmarks only.
	NoSync bool
	// ValueLogGCInterval is how often the value log is garbage collected
	// to reclaim the space of replaced values. Zero means 10 minutes;
	// negative disables it (RunGC still works).
	ValueLogGCInterval time.Duration
}

// Cache is the agent's namespace cache. Its methods are safe for concurrent
// use; updates of one namespace are serialised, different namespaces
// proceed in parallel.
type Cache struct {
	db  *badger.DB
	log *slog.Logger
	dir string

	// Lock order: closeMu (read) first, then the namespace's lock.
	// dropLocked (…Locked) expects its caller to hold the namespace's lock.
	locks keylock.Map // per-namespace update locks

	// closeMu is held for reading by every operation and for writing by
	// Close, which therefore waits for operations in flight.
	closeMu sync.RWMutex
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup

	stats counters
}

// Tuning for a small footprint. The agent runs on every host next to the
// services it feeds, so it trades write throughput (it applies a few updates
// per second at most) for a resident set of a few tens of MiB.
const (
	// Memtables are the in-memory write buffers; Badger allocates each as
	// one Go-heap arena of the table size plus 30% for a transaction batch
	// (2.6 MiB here). 2 MiB instead of Badger's 64 MiB (and our earlier
	// 8 MiB): the arena counts as live heap, so a 10 MiB arena doubled the
	// GC's heap goal and the agent's RSS carried that much garbage
	// (measured with the bench's footprint scenario: 30.9-33.6 MiB RSS
	// holding 100 namespaces with 8 MiB, 29.0-30.8 with 2 MiB; live heap
	// 11-13 MB → 3-4 MB). One transaction may hold about 300 KiB of keys,
	// small values and value pointers (15% of the table; values of 1 KiB
	// and more count as pointers); larger snapshots and patches take the
	// staged path described in the package comment, which keeps them
	// atomic. The memtable's WAL file is mapped at twice the table size.
	memTableSize = 2 << 20
	// Two memtables (one being written, one being flushed) instead of 5.
	numMemtables = 2
	// Values of at least 1 KiB go to the value log; the LSM tree then holds
	// keys and small values only, so compaction rewrites little and a
	// transaction counts 14 bytes per large value instead of the value.
	valueThreshold = 1 << 10
	// Value log files of 64 MiB instead of 1 GiB: less address space and
	// finer-grained garbage collection. A value (at most 512 KiB) fits.
	valueLogFileSize = 64 << 20
	// Two compactors, the minimum Badger accepts short of none.
	numCompactors = 2
	// Compact level 0 after 3 tables (default 5), stall writers at 8
	// (default 15): fewer tables to search on reads, less memory held.
	numLevelZeroTables      = 3
	numLevelZeroTablesStall = 8
	// Level 1 target size 8 MiB (default 10 MiB); tables 2 MiB (default).
	baseLevelSize = 8 << 20
	baseTableSize = 2 << 20
	// Goroutines Badger's Stream framework uses (default 8).
	numGoroutines = 2
	// Discard ratio at which a value log file is rewritten by GC.
	gcDiscardRatio = 0.5
)

func badgerOptions(o Options, log *slog.Logger) badger.Options {
	bo := badger.DefaultOptions(o.Dir).
		WithLogger(slogAdapter{log}).
		WithSyncWrites(!o.NoSync).
		WithMemTableSize(memTableSize).
		WithNumMemtables(numMemtables).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(valueLogFileSize).
		WithNumCompactors(numCompactors).
		WithNumLevelZeroTables(numLevelZeroTables).
		WithNumLevelZeroTablesStall(numLevelZeroTablesStall).
		WithBaseLevelSize(baseLevelSize).
		WithBaseTableSize(baseTableSize).
		WithNumGoroutines(numGoroutines).
		// Configuration compresses well but is small; without compression
		// Badger needs no block cache (256 MiB by default) and reads blocks
		// straight from the memory-mapped tables.
		WithCompression(options.None).
		WithBlockCacheSize(0).
		// Table indexes and bloom filters stay in memory (0 = no separate
		// cache); they are a few KiB per table at our sizes.
		WithIndexCacheSize(0).
		// Check the CRC of every value read from the value log, so bit rot
		// surfaces as an error rather than as a wrong value.
		WithVerifyValueChecksum(true).
		// Badger's metrics are process-global expvars; the agent exports its
		// own through its metrics set.
		WithMetricsEnabled(false)
	return bo
}

// Open opens (or creates) the cache in o.Dir, sweeps generations left
// unreferenced by a crash, and starts value-log garbage collection.
func Open(o Options) (*Cache, error) {
	if o.Dir == "" {
		return nil, errors.New("cache: Options.Dir is empty; want the directory of the agent's cache")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := openDB(o, log)
	if err != nil {
		return nil, err
	}
	interval := o.ValueLogGCInterval
	if interval == 0 {
		interval = 10 * time.Minute
	}
	if interval > 0 {
		c.wg.Go(func() { c.gcLoop(interval) })
	}
	return c, nil
}

// openDB opens the database and sweeps unreferenced generations,
// classifying a failure: ErrInUse for another process's lock, the error
// itself for one that is not the database's (permissions), ErrDamaged for
// the rest — including a panic of Badger's on a damaged table.
func openDB(o Options, log *slog.Logger) (c *Cache, err error) {
	var db *badger.DB
	defer func() {
		if p := recover(); p != nil {
			if db != nil {
				closeAfterPanic(db)
			}
			c, err = nil, fmt.Errorf("cache: open badger in %s: %w: panic: %v", o.Dir, ErrDamaged, p)
		}
	}()
	db, err = badger.Open(badgerOptions(o, log))
	if err != nil {
		switch {
		case strings.Contains(err.Error(), "Cannot acquire directory lock"):
			err = fmt.Errorf("%w: %w", ErrInUse, err)
		case errors.Is(err, fs.ErrPermission):
		default:
			err = fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		return nil, fmt.Errorf("cache: open badger in %s: %w", o.Dir, err)
	}
	c = &Cache{db: db, log: log, dir: o.Dir, stop: make(chan struct{})}
	n, err := c.sweep()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cache: sweep unreferenced generations in %s: %w: %w", o.Dir, ErrDamaged, err)
	}
	if n > 0 {
		log.Warn("removed properties of unreferenced generations (interrupted update or drop)", "keys", n)
	}
	return c, nil
}

// closeAfterPanic closes a database that panicked on damaged data, as far
// as it can: the directory lock must go before the directory is moved.
func closeAfterPanic(db *badger.DB) {
	defer func() { _ = recover() }()
	_ = db.Close()
}

// Quarantine moves a damaged cache directory aside, to dir +
// ".damaged-" + now as YYYYMMDDThhmmssZ, so Open can start an empty one
// there while the old one stays for inspection. Older quarantined copies of
// dir are removed first: at most one is kept. It returns the new path.
func Quarantine(dir string, now time.Time) (string, error) {
	clean := filepath.Clean(dir)
	old, err := filepath.Glob(clean + ".damaged-*")
	if err != nil {
		return "", fmt.Errorf("cache: quarantine %s: %w", dir, err)
	}
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			return "", fmt.Errorf("cache: remove an older quarantined cache: %w", err)
		}
	}
	to := clean + ".damaged-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(clean, to); err != nil {
		return "", fmt.Errorf("cache: quarantine %s: %w", dir, err)
	}
	return to, nil
}

// Close stops garbage collection, waits for operations in flight and
// closes the database. It is idempotent; later calls return nil and other
// methods return ErrClosed.
func (c *Cache) Close() error {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	c.closeMu.Unlock()
	c.wg.Wait()
	if err := c.db.Close(); err != nil {
		return fmt.Errorf("cache: close badger: %w", err)
	}
	return nil
}

// enter marks an operation in flight; the caller must call c.closeMu.RUnlock.
func (c *Cache) enter() error {
	c.closeMu.RLock()
	if c.closed {
		c.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (c *Cache) gcLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if err := c.RunGC(); err != nil && !errors.Is(err, ErrClosed) {
				c.log.Warn("value log garbage collection failed", "err", err)
			}
		}
	}
}

// RunGC rewrites value log files in which at least half the data belongs to
// replaced or deleted values, until none is left. It runs periodically on
// its own (Options.ValueLogGCInterval).
func (c *Cache) RunGC() error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.closeMu.RUnlock()
	for {
		err := c.db.RunValueLogGC(gcDiscardRatio)
		switch {
		case err == nil:
			continue
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			return nil
		default:
			return fmt.Errorf("cache: value log gc: %w", err)
		}
	}
}

// Size returns the bytes the cache occupies on disk (all files in Dir):
// the blocks allocated to them where the platform reports it, not their
// apparent sizes — Badger preallocates its value log and memtable files
// sparsely, so an almost empty cache is well over 100 MiB by apparent size.
func (c *Cache) Size() (int64, error) {
	var total int64
	err := filepath.WalkDir(c.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed by compaction meanwhile
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += diskUsage(fi)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cache: size of %s: %w", c.dir, err)
	}
	return total, nil
}

// Stats are cumulative counters since Open, for the agent's metrics.
type Stats struct {
	Snapshots          uint64 // snapshot updates applied
	Patches            uint64 // patch updates applied
	Staged             uint64 // updates too large for one transaction, applied in stages
	KeysWritten        uint64 // Badger keys set or deleted by updates and drops
	BytesWritten       uint64 // bytes of keys and values set by updates
	ChecksumMismatches uint64 // updates refused with ErrChecksumMismatch
	Corruptions        uint64 // reads that found a corrupt namespace
}

type counters struct {
	snapshots, patches, staged, keys, bytes, mismatches, corruptions atomic.Uint64
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	s := &c.stats
	return Stats{
		Snapshots:          s.snapshots.Load(),
		Patches:            s.patches.Load(),
		Staged:             s.staged.Load(),
		KeysWritten:        s.keys.Load(),
		BytesWritten:       s.bytes.Load(),
		ChecksumMismatches: s.mismatches.Load(),
		Corruptions:        s.corruptions.Load(),
	}
}

// slogAdapter routes Badger's logging to slog. Badger is chatty at info
// level (every compaction, every memtable flush), so Info and Debug go to
// slog's Debug level and only warnings and errors show by default.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Errorf(f string, v ...any) {
	a.log.Error("badger: " + trimNL(fmt.Sprintf(f, v...)))
}

func (a slogAdapter) Warningf(f string, v ...any) {
	a.log.Warn("badger: " + trimNL(fmt.Sprintf(f, v...)))
}

func (a slogAdapter) Infof(f string, v ...any) {
	a.log.Debug("badger: " + trimNL(fmt.Sprintf(f, v...)))
}

func (a slogAdapter) Debugf(f string, v ...any) {
	a.log.Debug("badger: " + trimNL(fmt.Sprintf(f, v...)))
}

func trimNL(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}
