package store

import (
	"container/list"
	"context"
	"sync"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultContentCacheBytes is the default Options.ContentCacheBytes.
const DefaultContentCacheBytes = 32 << 20

// maxCachedContent is the largest content the cache keeps: holding large
// values in memory costs a busy control more than reading them again
// (bench/results/HISTORY.md, "Publish → callback, first steps of issue
// 13": with 512 KiB versions kept, 8 concurrent publishers lost a fifth of
// their throughput).
const maxCachedContent = 256 << 10

// contentCache keeps the content of recently committed or read versions,
// least recently used first out, bounded by bytes. Versions are
// immutable, so an entry is valid as long as the version exists; Content
// still reads the version's record first (one etcd read), so a version
// compacted away is not found, and uses the entry only if the record's
// checksum is the entry's. It spares the reads of the manifest and blobs —
// most of what a distributor's FetchDelta of the latest change costs. A
// cached version is served as it was committed even if etcd's copy of its
// blobs rotted since; a reader without the entry (another replica, this
// one after a restart or an eviction) finds the damage (ErrCorrupt).
// CachedContent serves an entry without the record's read, to a caller
// that knows the checksum from a record read elsewhere (a goal), and waits
// for a commit of this process that wrote the record to put the entry.
type contentCache struct {
	max int64

	mu    sync.Mutex
	bytes int64
	lru   *list.List // of *cacheEntry, most recent at the front
	m     map[cacheKey]*list.Element
	// committing holds the versions this process is committing, from
	// before their transaction until their content is put (or the
	// transaction failed): see committing and await.
	committing map[cacheKey]*commitInFlight
}

// commitInFlight is one version being committed by refs commits of this
// process (rivals of one number); done closes once none is left.
type commitInFlight struct {
	refs int
	done chan struct{}
}

type cacheKey struct {
	ns  string
	seq uint64
}

type cacheEntry struct {
	key  cacheKey
	info *lehrpb.VersionInfo // its checksum is the entry's
	snap content.Snapshot
	// stored is how the version is stored, when this process committed
	// it; nil for a version it read.
	stored *storedVersion
	size   int64
}

// storedVersion is how a version is stored in etcd, as far as the next commit of
// its namespace needs it of its parent: the manifest chunks of its record,
// the value hashes each chunk lists, and the request id it was committed
// with. Kept for versions this process committed, it spares that commit
// reading the parent's record and chunks.
type storedVersion struct {
	chunks      []string
	chunkValues map[string][]string // by chunk hash
	requestID   string
}

// storedOf returns how m is stored, committed with request id requestID.
func storedOf(m *manifest, requestID string) *storedVersion {
	l := &storedVersion{chunks: m.chunkHashes, chunkValues: make(map[string][]string, len(m.chunkHashes)), requestID: requestID}
	for i, h := range m.chunkHashes {
		l.chunkValues[h] = m.chunkValues[i]
	}
	return l
}

// storedBytes estimates what a storedVersion of a version of n properties holds:
// a hex value hash and its string header per property.
func storedBytes(n int) int64 { return int64(n) * 80 }

func newContentCache(max int64) *contentCache {
	return &contentCache{max: max, lru: list.New(), m: map[cacheKey]*list.Element{}, committing: map[cacheKey]*commitInFlight{}}
}

// commit notes that this process is about to commit ns@seq; the returned
// function, called once the commit put the content or failed, ends that.
func (c *contentCache) commit(ns string, seq uint64) (done func()) {
	if c == nil {
		return func() {}
	}
	k := cacheKey{ns, seq}
	c.mu.Lock()
	f := c.committing[k]
	if f == nil {
		f = &commitInFlight{done: make(chan struct{})}
		c.committing[k] = f
	}
	f.refs++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if f.refs--; f.refs == 0 {
				close(f.done)
				delete(c.committing, k)
			}
		})
	}
}

// await returns once no commit of ns@seq by this process is in flight, or
// ctx ends: a reader that saw the version's record written by this
// process's commit then finds its content, which the commit puts only
// after etcd answered.
func (c *contentCache) await(ctx context.Context, ns string, seq uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	f := c.committing[cacheKey{ns, seq}]
	c.mu.Unlock()
	if f == nil {
		return
	}
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// committed returns the record and storedVersion of version ref of ns if
// this process committed it (with ref's checksum) and it is still cached.
func (c *contentCache) committed(ns string, ref content.Ref) (*lehrpb.VersionInfo, *storedVersion, bool) {
	e, ok := c.lookup(ns, ref)
	if !ok || e.stored == nil {
		return nil, nil, false
	}
	return e.info, e.stored, true
}

// get returns the record and content of version ref of ns if it is
// cached (with ref's checksum).
func (c *contentCache) get(ns string, ref content.Ref) (*lehrpb.VersionInfo, content.Snapshot, bool) {
	e, ok := c.lookup(ns, ref)
	if !ok {
		return nil, content.Snapshot{}, false
	}
	return e.info, e.snap, true
}

// lookup returns a copy, taken under the lock, of the entry of version
// ref of ns if it is cached with ref's checksum (not empty), and marks it
// the most recently used.
func (c *contentCache) lookup(ns string, ref content.Ref) (cacheEntry, bool) {
	if c == nil || ref.Checksum == "" {
		return cacheEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[cacheKey{ns, ref.Seq}]
	if !ok {
		return cacheEntry{}, false
	}
	e := el.Value.(*cacheEntry)
	if e.info.GetChecksum() != ref.Checksum {
		return cacheEntry{}, false
	}
	c.lru.MoveToFront(el)
	return *e, true
}

// put caches snap as the content of the version info describes (ns,
// info's seq and checksum), and stored, if not nil, as how it is stored
// (a version this process committed); content larger than
// maxCachedContent or a quarter of the cache is not kept. info and stored
// must not be changed afterwards.
func (c *contentCache) put(ns string, info *lehrpb.VersionInfo, snap content.Snapshot, stored *storedVersion) {
	if c == nil {
		return
	}
	size := snap.Size() + int64(64*snap.Len()) + 128
	if stored != nil {
		size += storedBytes(snap.Len())
	}
	if snap.Size() > maxCachedContent || size > c.max/4 {
		return
	}
	k := cacheKey{ns, info.GetSeq()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.lru.MoveToFront(el)
		// A reader may have cached the version between its commit's
		// transaction and this put.
		if e := el.Value.(*cacheEntry); e.stored == nil && stored != nil && e.info.GetChecksum() == info.GetChecksum() {
			e.stored = stored
			e.size += storedBytes(snap.Len())
			c.bytes += storedBytes(snap.Len())
			c.evictLocked()
		}
		return
	}
	c.m[k] = c.lru.PushFront(&cacheEntry{key: k, info: info, snap: snap, stored: stored, size: size})
	c.bytes += size
	c.evictLocked()
}

// evictLocked drops the least recently used entries until the cache is
// within its bound.
func (c *contentCache) evictLocked() {
	for c.bytes > c.max {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.m, e.key)
		c.bytes -= e.size
	}
}
