// Package collect is the agent's local collection of per-namespace
// signals for canary analysis: a Store of short per-interval series (the
// agent's own signals and the application metrics scraped from consumers'
// Prometheus endpoints) and a Scraper that reads those endpoints.
//
// Memory is bounded: per namespace held, Keep intervals of the version
// held, of the agent's 6 own counts and of each scraped metric that ever
// had a value (at most 13 series, 8 bytes per value): with the defaults,
// at most 361 × 13 × 8 B ≈ 37 KiB per namespace, 21 KiB without scrapes. Series live in memory only; an agent restart starts them
// again.
package collect

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of Options.
const (
	DefaultInterval = 10 * time.Second
	DefaultKeep     = 360 // an hour at the default interval
)

// own lists the agent's own counts, kept (0 where nothing happened) for
// every namespace held from the start, so a quiet host says "none" rather
// than nothing.
var own = []string{canary.MetricConsumerApplies, canary.MetricConsumerRejections, canary.MetricCallbackPanics,
	canary.MetricCallbackSeconds, canary.MetricApplySeconds, canary.MetricLeaseLosses}

// scraped lists the metrics that come from scrapes: NaN in an interval
// without a successful scrape. Every other metric is the agent's own
// count, 0 in an interval where nothing happened.
var scraped = map[string]bool{
	canary.MetricRequests: true, canary.MetricRequestErrors: true, canary.MetricRequestSeconds: true,
	canary.MetricRequestLatencyCount: true, canary.MetricProcessRestarts: true,
}

// Options configure a Store. The zero value is valid.
type Options struct {
	// Interval is the length of an interval, a whole number of seconds;
	// intervals start at multiples of it since the Unix epoch, so every
	// host's intervals line up. Zero means DefaultInterval.
	Interval time.Duration
	// Keep is how many completed intervals are kept per namespace. Zero
	// means DefaultKeep.
	Keep int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Store keeps the signals of the namespaces the agent holds. It is safe
// for concurrent use; it starts no goroutine.
type Store struct {
	opts Options
	iv   int64 // seconds

	mu sync.Mutex
	ns map[string]*timeline
}

// timeline is one namespace's series. Index i covers the interval
// starting at first + i·iv; the last index is the open interval.
type timeline struct {
	first    int64
	version  uint64 // held now
	versions []uint64
	series   map[string][]float64
}

// NewStore returns an empty store.
func NewStore(opts Options) *Store {
	if opts.Interval < time.Second {
		opts.Interval = DefaultInterval
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{opts: opts, iv: int64(opts.Interval / time.Second), ns: map[string]*timeline{}}
}

// Interval returns the store's interval.
func (s *Store) Interval() time.Duration { return time.Duration(s.iv) * time.Second }

// Hold starts the series of ns (a namespace the agent now holds or wants)
// at version v, if they are not running already.
func (s *Store) Hold(ns string, v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ns[ns]; ok {
		return
	}
	now := s.opts.Now().Unix()
	start := now - now%s.iv
	t := &timeline{first: start, version: v, versions: []uint64{v}, series: map[string][]float64{}}
	for _, m := range own {
		t.series[m] = []float64{0}
	}
	s.ns[ns] = t
}

// Release forgets ns: the agent no longer holds it.
func (s *Store) Release(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ns, ns)
}

// SetVersion records that the agent now holds version v of ns. An
// interval's version is the one held at its end.
func (s *Store) SetVersion(ns string, v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.advance(ns); t != nil {
		t.version = v
		t.versions[len(t.versions)-1] = v
	}
}

// Add adds delta to metric in ns's open interval; a scraped metric
// without a value there starts from 0. Nothing is recorded for a
// namespace the store does not hold.
func (s *Store) Add(ns, metric string, delta float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.advance(ns)
	if t == nil {
		return
	}
	v, ok := t.series[metric]
	if !ok {
		v = make([]float64, len(t.versions))
		if scraped[metric] {
			for i := range v {
				v[i] = math.NaN()
			}
		}
		t.series[metric] = v
	}
	last := len(v) - 1
	if math.IsNaN(v[last]) {
		v[last] = 0
	}
	v[last] += delta
}

// Signals returns ns's completed intervals (the open one is left out, so
// a value never changes once reported), or nil if the store does not hold
// ns or has no completed interval yet.
func (s *Store) Signals(ns string) *lehrpb.NamespaceSignals {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.advance(ns)
	if t == nil || len(t.versions) < 2 {
		return nil
	}
	n := len(t.versions) - 1
	out := &lehrpb.NamespaceSignals{Namespace: ns, IntervalSeconds: uint32(s.iv), First: t.first, Versions: slices.Clone(t.versions[:n])}
	for _, name := range slices.Sorted(maps.Keys(t.series)) {
		out.Series = append(out.Series, &lehrpb.SignalSeries{Name: name, Values: slices.Clone(t.series[name][:n])})
	}
	return out
}

// Namespaces returns how many namespaces the store holds.
func (s *Store) Namespaces() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ns)
}

// advance opens intervals up to now for ns (closing the open one with the
// version held) and trims to Keep completed intervals. Called with mu held.
func (s *Store) advance(ns string) *timeline {
	t := s.ns[ns]
	if t == nil {
		return nil
	}
	now := s.opts.Now().Unix()
	cur := (now - now%s.iv - t.first) / s.iv // index of the open interval
	n := int64(len(t.versions))
	if ws := cur - int64(s.opts.Keep); ws >= n { // idle past everything kept: start at the window
		t.first += ws * s.iv
		t.versions = t.versions[:0]
		for name := range t.series {
			t.series[name] = t.series[name][:0]
		}
		cur, n = cur-ws, 0
	}
	for ; n <= cur; n++ {
		t.versions = append(t.versions, t.version)
		for name, v := range t.series {
			t.series[name] = append(v, fill(name))
		}
	}
	if drop := len(t.versions) - 1 - s.opts.Keep; drop > 0 {
		t.first += int64(drop) * s.iv
		t.versions = slices.Delete(t.versions, 0, drop)
		for name, v := range t.series {
			t.series[name] = slices.Delete(v, 0, drop)
		}
	}
	return t
}

// fill is a metric's value in an interval where nothing was recorded.
func fill(metric string) float64 {
	if scraped[metric] {
		return math.NaN()
	}
	return 0
}

// Change is a namespace's latest version change within the completed
// intervals a store keeps (intervals i−1 and i held different versions:
// the change happened during interval i), with the series around it: the input of a
// host-level canary judgement (canary.JudgeHost).
type Change struct {
	// Version is the version held since the change, Previous the one held
	// just before it (never 0).
	Version, Previous uint64
	// Time is the start of the first interval after the change (the
	// interval the change happened in is neither: its values are NaN).
	Time time.Time
	// Index is that interval's index in Metrics (possibly one past the
	// last, when the change happened in the last completed interval).
	Index int
	// Interval is the length of one interval.
	Interval time.Duration
	// Metrics holds every series over the completed intervals; intervals
	// before the change that held another version than Previous are NaN,
	// so only Previous is compared with Version.
	Metrics map[string][]float64
}

// LastChange returns ns's latest version change among its completed
// intervals. ok is false when there is none, or it was from holding
// nothing (a first install has no "before" to compare with).
func (s *Store) LastChange(ns string) (c Change, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.advance(ns)
	if t == nil {
		return Change{}, false
	}
	n := len(t.versions) - 1 // completed intervals
	idx := -1
	for i := n - 1; i > 0; i-- {
		if t.versions[i] != t.versions[i-1] {
			idx = i
			break
		}
	}
	if idx < 0 || t.versions[idx-1] == 0 || t.versions[idx] == 0 {
		return Change{}, false
	}
	c = Change{Version: t.versions[idx], Previous: t.versions[idx-1], Index: idx + 1, Interval: s.Interval(),
		Time: time.Unix(t.first+int64(idx+1)*s.iv, 0), Metrics: make(map[string][]float64, len(t.series))}
	for name, v := range t.series {
		vals := slices.Clone(v[:n])
		for i := range idx + 1 {
			if i == idx || t.versions[i] != c.Previous {
				vals[i] = math.NaN()
			}
		}
		c.Metrics[name] = vals
	}
	return c, true
}
