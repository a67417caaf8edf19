// Package versions is a distributor's bounded in-memory cache of namespace
// versions. Versions come from control: a version whose predecessor (or any
// older version of the same namespace) is held is built by fetching the
// delta with FetchDelta and applying it; otherwise the whole version is
// fetched with FetchVersion. Every version is checked against its checksum
// before it is cached or returned, so a version obtained from a Cache is
// always the exact content control published.
//
// # Eviction
//
// The cache is bounded by Options.MaxBytes, counted as the content size
// (keys and values) of every cached version, even though versions built from
// a delta share unchanged values with their base (the bound is therefore
// conservative). After each insertion, while the total is over the bound,
// the least recently used version that is not pinned is dropped. The
// distributor pins the goal versions of the namespaces its agents use
// (Pin), so they go last: only when the pinned versions alone exceed the
// bound are the least recently used of them dropped too, and fetched
// again from control when an agent needs them (a distributor whose agents
// use more than the bound stays within it, at the price of fetches).
// Evicting a version an agent still holds only costs that agent a snapshot
// instead of a patch (or a refetch from control).
//
// Imported by distributor.
package versions

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/proto/lehrpb"
)

// ErrChecksum is wrapped by errors about content from control that does not
// match its checksum.
var ErrChecksum = errors.New("versions: content does not match its checksum")

// ErrNotCached is wrapped by Get's error for a version that is not cached
// when the cache has no Client to fetch it with.
var ErrNotCached = errors.New("versions: version not cached")

// Client is the part of lehrpb.ControlClient the cache uses.
type Client interface {
	FetchVersion(ctx context.Context, in *lehrpb.FetchVersionRequest, opts ...grpc.CallOption) (*lehrpb.FetchVersionResponse, error)
	FetchDelta(ctx context.Context, in *lehrpb.FetchDeltaRequest, opts ...grpc.CallOption) (*lehrpb.FetchDeltaResponse, error)
}

// DefaultFetchTimeout is the default Options.FetchTimeout.
const DefaultFetchTimeout = 30 * time.Second

// Options configures a Cache.
type Options struct {
	// Client fetches versions from control. If nil, the cache serves only
	// what was Put into it and Get fails with ErrNotCached for anything else.
	Client Client
	// MaxBytes bounds the cached content (see Eviction in the package
	// documentation); default 256 MiB.
	MaxBytes int64
	// FetchTimeout bounds one fetch from control; default
	// DefaultFetchTimeout. A fetch runs for every Get waiting for it, not
	// under any one caller's context, so one caller going away does not
	// fail the others.
	FetchTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics, if set, gets lehr_distributor_versions_built_total{from}
	// (MetricsHelp), which counts what Stats.Fetches, Deltas and Offered
	// count.
	Metrics *metrics.Set
}

// MetricsHelp is the HELP text of the metric family a Cache registers on
// Options.Metrics. Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_distributor_versions_built_total": "Versions the distributor built, by where from: fetch (a whole FetchVersion), fetched_delta (a FetchDelta) or goal_event_delta (the change control sent with the goal event, no call to control).",
}

// Stats describes the cache at one moment.
type Stats struct {
	Versions int
	Bytes    int64
	Pinned   int
	// Fetches counts whole versions fetched, Deltas versions built from a
	// delta fetched, Offered versions built from a delta control sent with
	// a goal event (Offer), Evictions versions dropped for space,
	// ChecksumErrors content from control that failed its checksum.
	Fetches, Deltas, Offered, Evictions, ChecksumErrors uint64
}

type key struct {
	ns  string
	seq uint64
}

type entry struct {
	v    *content.Version
	size int64         // v.Content.Size(), counted against MaxBytes
	elem *list.Element // in lru; front is most recent
}

type call struct {
	done chan struct{}
	v    *content.Version
	err  error
}

// Cache holds versions. It is safe for concurrent use.
type Cache struct {
	opts Options
	log  *slog.Logger

	// ctx ends when Close is called: fetches in flight stop. wg holds them.
	ctx   context.Context
	close context.CancelFunc
	wg    sync.WaitGroup

	mu       sync.Mutex
	entries  map[key]*entry
	byNS     map[string]map[uint64]*entry
	lru      *list.List // of key
	pins     map[string][]uint64
	bytes    int64
	inflight map[key]*call
	stats    Stats

	// built count what stats.Fetches, Deltas and Offered count, on
	// Options.Metrics.
	builtFetch, builtDelta, builtOffered *metrics.Counter
}

// New returns an empty cache.
func New(opts Options) *Cache {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 256 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	set := opts.Metrics
	if set == nil {
		set = metrics.NewSet()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cache{
		ctx:          ctx,
		close:        cancel,
		opts:         opts,
		log:          opts.Logger,
		entries:      map[key]*entry{},
		byNS:         map[string]map[uint64]*entry{},
		lru:          list.New(),
		pins:         map[string][]uint64{},
		inflight:     map[key]*call{},
		builtFetch:   set.NewCounter(`lehr_distributor_versions_built_total{from="fetch"}`),
		builtDelta:   set.NewCounter(`lehr_distributor_versions_built_total{from="fetched_delta"}`),
		builtOffered: set.NewCounter(`lehr_distributor_versions_built_total{from="goal_event_delta"}`),
	}
}

// Pin marks seqs as the goal versions of ns (the stable goal, and the
// candidate of a rollout): they are evicted only after every unpinned
// version (see Eviction), until another Pin for ns or Unpin(ns). The
// versions need not be cached yet.
func (c *Cache) Pin(ns string, seqs ...uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pins[ns] = slices.Clone(seqs)
	c.evictLocked()
}

// Unpin removes the pin of ns, if any.
func (c *Cache) Unpin(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pins, ns)
	c.evictLocked()
}

// Lookup returns a cached version without contacting control, marking it
// recently used.
func (c *Cache) Lookup(ns string, seq uint64) (*content.Version, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key{ns, seq}]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e.elem)
	return e.v, true
}

// Stats returns current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Versions = len(c.entries)
	s.Bytes = c.bytes
	s.Pinned = len(c.pins)
	return s
}

// Close stops the fetches in flight (their Gets fail) and waits for them.
// The cache still serves what it holds. It is idempotent.
func (c *Cache) Close() error {
	c.close()
	c.wg.Wait()
	return nil
}

// Get returns version ref of ns (an empty ref.Checksum accepts any
// checksum), from memory or else from control: as a delta from the newest
// cached older version when there is one, otherwise whole. A cached
// version with another checksum than ref's (control's store was restored
// from a backup: same number, other content) is dropped and fetched again.
// Concurrent Gets of one version share one fetch, which runs for all of
// them (bounded by Options.FetchTimeout), not under the context of
// whichever started it. The result always matches its checksum; content
// that does not, or a version control holds with another checksum than
// ref's, wraps ErrChecksum. A delta that cannot be had (its base compacted
// at control, or content that fails its checksum) falls back to one whole
// fetch.
func (c *Cache) Get(ctx context.Context, ns string, ref content.Ref) (*content.Version, error) {
	if ref.Seq == 0 {
		return nil, fmt.Errorf("versions: get %s@0: version must be at least 1", ns)
	}
	k := key{ns, ref.Seq}
	c.mu.Lock()
	if e, ok := c.entries[k]; ok {
		if ref.Checksum == "" || e.v.Checksum == ref.Checksum {
			c.lru.MoveToFront(e.elem)
			c.mu.Unlock()
			return e.v, nil
		}
		c.log.Warn("cached version has another checksum than the one asked for; fetching it again",
			"namespace", ns, "version", ref.Seq, "cached", e.v.Checksum, "want", ref.Checksum)
		c.removeLocked(k, e)
	}
	if c.opts.Client == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("get %s@%d: %w", ns, ref.Seq, ErrNotCached)
	}
	cl, ok := c.inflight[k]
	if !ok {
		cl = &call{done: make(chan struct{})}
		c.inflight[k] = cl
		base := c.newestBelowLocked(ns, ref.Seq)
		c.wg.Go(func() {
			fctx, cancel := context.WithTimeout(c.ctx, c.opts.FetchTimeout)
			defer cancel()
			v, err := c.fetch(fctx, ns, ref.Seq, base)
			c.mu.Lock()
			delete(c.inflight, k)
			if err == nil {
				v = c.insertLocked(v)
			}
			c.mu.Unlock()
			cl.v, cl.err = v, err
			close(cl.done)
		})
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("get %s@%d: %w", ns, ref.Seq, ctx.Err())
	}
	if cl.err != nil {
		return nil, cl.err
	}
	if ref.Checksum != "" && cl.v.Checksum != ref.Checksum {
		return nil, fmt.Errorf("get %s@%d: %w: control holds it with checksum %s, not %s", ns, ref.Seq, ErrChecksum, cl.v.Checksum, ref.Checksum)
	}
	return cl.v, nil
}

// Put adds a version built elsewhere after checking its checksum.
func (c *Cache) Put(v *content.Version) error {
	if got := v.Content.Checksum(); got != v.Checksum {
		return fmt.Errorf("put %s@%d: %w: computed %s, stated %s", v.Namespace, v.Seq, ErrChecksum, got, v.Checksum)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertLocked(v)
	return nil
}

func (c *Cache) newestBelowLocked(ns string, seq uint64) *content.Version {
	var best *content.Version
	for s, e := range c.byNS[ns] {
		if s < seq && (best == nil || s > best.Seq) {
			best = e.v
		}
	}
	return best
}

func (c *Cache) fetch(ctx context.Context, ns string, seq uint64, base *content.Version) (*content.Version, error) {
	if base != nil {
		v, err := c.fetchDelta(ctx, base, seq)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// The base may be compacted away at control (NOT_FOUND), or the
		// delta fail its checksum: a whole version needs neither.
		c.log.Warn("cannot build the version from a delta; fetching it whole", "namespace", ns, "from", base.Seq, "to", seq, "err", err)
	}
	return c.fetchWhole(ctx, ns, seq)
}

func (c *Cache) fetchWhole(ctx context.Context, ns string, seq uint64) (*content.Version, error) {
	resp, err := c.opts.Client.FetchVersion(ctx, &lehrpb.FetchVersionRequest{Namespace: ns, Version: seq})
	if err != nil {
		return nil, fmt.Errorf("fetch version %s@%d: %w", ns, seq, err)
	}
	info := resp.GetVersion()
	if info.GetSeq() != seq {
		return nil, fmt.Errorf("fetch version %s@%d: control answered version %d", ns, seq, info.GetSeq())
	}
	snap, err := content.New(content.FromProto(resp.GetProperties()))
	if err != nil {
		return nil, fmt.Errorf("fetch version %s@%d: %w", ns, seq, err)
	}
	v := &content.Version{Namespace: ns, Seq: seq, Checksum: info.GetChecksum(), Kind: resp.GetKind(), Info: info, Content: snap}
	if err := c.verify(v); err != nil {
		return nil, fmt.Errorf("fetch version %s@%d: %w", ns, seq, err)
	}
	c.mu.Lock()
	c.stats.Fetches++
	c.mu.Unlock()
	c.builtFetch.Inc()
	return v, nil
}

func (c *Cache) fetchDelta(ctx context.Context, base *content.Version, seq uint64) (*content.Version, error) {
	ns := base.Namespace
	resp, err := c.opts.Client.FetchDelta(ctx, &lehrpb.FetchDeltaRequest{Namespace: ns, From: base.Seq, To: seq})
	if err != nil {
		return nil, fmt.Errorf("fetch delta %s@%d..%d: %w", ns, base.Seq, seq, err)
	}
	if got := resp.GetTo().GetSeq(); got != seq {
		return nil, fmt.Errorf("fetch delta %s@%d..%d: control answered version %d", ns, base.Seq, seq, got)
	}
	v, err := c.applyDelta(base, resp)
	if err != nil {
		return nil, fmt.Errorf("fetch delta %s@%d..%d: %w", ns, base.Seq, seq, err)
	}
	c.mu.Lock()
	c.stats.Deltas++
	c.mu.Unlock()
	c.builtDelta.Inc()
	return v, nil
}

// Offer builds the version a delta control sent unasked (with a goal
// event: lehrpb.GoalEvent.delta) leads to, when its "from" version is
// cached with the delta's checksum, and caches it; a later Get of it then
// needs no call to control. It does nothing when the version is cached
// already or its base is not, and returns an error (nothing cached) when
// the delta does not apply or the result fails its checksum.
func (c *Cache) Offer(ns string, d *lehrpb.FetchDeltaResponse) error {
	from, to := d.GetFrom(), d.GetTo()
	c.mu.Lock()
	if e, ok := c.entries[key{ns, to.GetSeq()}]; ok && e.v.Checksum == to.GetChecksum() {
		c.mu.Unlock()
		return nil
	}
	e, ok := c.entries[key{ns, from.GetSeq()}]
	c.mu.Unlock()
	if !ok || e.v.Checksum != from.GetChecksum() || to.GetSeq() == 0 {
		return nil
	}
	v, err := c.applyDelta(e.v, d)
	if err != nil {
		return fmt.Errorf("offered delta %s@%d..%d: %w", ns, from.GetSeq(), to.GetSeq(), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertLocked(v)
	c.stats.Offered++
	c.builtOffered.Inc()
	return nil
}

// applyDelta builds the version d leads to from base, and verifies it. A
// delta without a kind (one sent with a goal event) keeps base's: a
// namespace's kind never changes.
func (c *Cache) applyDelta(base *content.Version, d *lehrpb.FetchDeltaResponse) (*content.Version, error) {
	if got := d.GetFrom().GetChecksum(); got != base.Checksum {
		return nil, fmt.Errorf("%w: base is %s here, %s at control", ErrChecksum, base.Checksum, got)
	}
	snap, err := base.Content.Apply(content.Patch{Set: content.FromProto(d.GetSet()), Delete: d.GetDelete()})
	if err != nil {
		return nil, fmt.Errorf("apply: %w: %w", ErrChecksum, err)
	}
	kind := d.GetKind()
	if kind == lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
		kind = base.Kind
	}
	info := d.GetTo()
	v := &content.Version{Namespace: base.Namespace, Seq: info.GetSeq(), Checksum: info.GetChecksum(), Kind: kind, Info: info, Content: snap}
	if err := c.verify(v); err != nil {
		return nil, err
	}
	return v, nil
}

func (c *Cache) verify(v *content.Version) error {
	if got := v.Content.Checksum(); got != v.Checksum {
		c.mu.Lock()
		c.stats.ChecksumErrors++
		c.mu.Unlock()
		return fmt.Errorf("%w: computed %s, control states %s", ErrChecksum, got, v.Checksum)
	}
	return nil
}

// insertLocked caches v (or returns the copy already cached) and evicts.
func (c *Cache) insertLocked(v *content.Version) *content.Version {
	k := key{v.Namespace, v.Seq}
	if e, ok := c.entries[k]; ok {
		c.lru.MoveToFront(e.elem)
		return e.v
	}
	e := &entry{v: v, size: v.Content.Size(), elem: c.lru.PushFront(k)}
	c.entries[k] = e
	if c.byNS[k.ns] == nil {
		c.byNS[k.ns] = map[uint64]*entry{}
	}
	c.byNS[k.ns][k.seq] = e
	c.bytes += e.size
	c.evictLocked()
	return v
}

// removeLocked drops the entry e of k.
func (c *Cache) removeLocked(k key, e *entry) {
	c.lru.Remove(e.elem)
	delete(c.entries, k)
	delete(c.byNS[k.ns], k.seq)
	if len(c.byNS[k.ns]) == 0 {
		delete(c.byNS, k.ns)
	}
	c.bytes -= e.size
}

// evictLocked drops least recently used versions until the cache is
// within MaxBytes: unpinned ones first, then, if pinned versions alone are
// over the bound, pinned ones too (Get fetches them again when wanted).
// Pins say what to keep longest, not what to keep at any cost: a
// distributor whose agents want more than MaxBytes stays within it.
func (c *Cache) evictLocked() {
	for _, pinnedToo := range []bool{false, true} {
		for el := c.lru.Back(); el != nil && c.bytes > c.opts.MaxBytes; {
			prev := el.Prev()
			k := el.Value.(key)
			if pinnedToo || !slices.Contains(c.pins[k.ns], k.seq) {
				c.removeLocked(k, c.entries[k])
				c.stats.Evictions++
			}
			el = prev
		}
	}
}
