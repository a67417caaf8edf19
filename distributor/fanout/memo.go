package fanout

import (
	"container/list"
	"sync"
	"sync/atomic"

	"lehr.dev/lehr/internal/content"
)

// memoKey identifies an encoded update: the same namespace, base and goal
// give the same bytes for every agent.
type memoKey struct {
	ns       string
	snapshot bool
	base     content.Ref // zero for a snapshot
	goal     content.Ref
	// compact: the frame is in compact form (wire.CapCompactUpdate).
	compact bool
	// proof is the signature of the signed goal the frame carries
	// (wire.CapSignedGoals), "" for none.
	proof string
}

type memoEntry struct {
	key  memoKey
	once sync.Once
	// built is set once data holds the frame (build succeeded).
	built atomic.Bool
	data  []byte
	snap  bool // the frame is a snapshot (a patch may fall back to one)
	err   error
	elem  *list.Element
	size  int64
}

// memo keeps recently encoded update frames so that many agents needing the
// same update share one encoding (and one Diff). It is bounded by bytes;
// least recently used entries go first.
type memo struct {
	max int64

	mu      sync.Mutex
	entries map[memoKey]*memoEntry
	lru     *list.List
	bytes   int64
}

func newMemo(max int64) *memo {
	return &memo{max: max, entries: map[memoKey]*memoEntry{}, lru: list.New()}
}

// get returns the frame for k and whether it is a snapshot, building it
// with build at most once while it stays memoised. build runs without the
// memo's lock held.
func (m *memo) get(k memoKey, build func() ([]byte, bool, error)) ([]byte, bool, error) {
	m.mu.Lock()
	e, ok := m.entries[k]
	if ok {
		m.lru.MoveToFront(e.elem)
	} else {
		e = &memoEntry{key: k}
		e.elem = m.lru.PushFront(e)
		m.entries[k] = e
	}
	m.mu.Unlock()

	e.once.Do(func() {
		e.data, e.snap, e.err = build()
		m.mu.Lock()
		defer m.mu.Unlock()
		if e.err != nil {
			m.removeLocked(e)
			return
		}
		e.built.Store(true)
		if m.entries[k] == e {
			e.size = int64(len(e.data))
			m.bytes += e.size
			m.evictLocked()
		}
	})
	return e.data, e.snap, e.err
}

// peek returns the frame for k and whether it is a snapshot, if it is
// memoised and built; it builds nothing.
func (m *memo) peek(k memoKey) (data []byte, snap, ok bool) {
	m.mu.Lock()
	e := m.entries[k]
	if e != nil {
		m.lru.MoveToFront(e.elem)
	}
	m.mu.Unlock()
	if e == nil || !e.built.Load() {
		return nil, false, false
	}
	return e.data, e.snap, true
}

func (m *memo) removeLocked(e *memoEntry) {
	if m.entries[e.key] != e {
		return
	}
	delete(m.entries, e.key)
	m.lru.Remove(e.elem)
	m.bytes -= e.size
}

func (m *memo) evictLocked() {
	for m.bytes > m.max && m.lru.Len() > 1 {
		e := m.lru.Back().Value.(*memoEntry)
		m.removeLocked(e)
	}
	// A single entry above the bound is dropped too, once used.
	if m.bytes > m.max && m.lru.Len() == 1 {
		m.removeLocked(m.lru.Back().Value.(*memoEntry))
	}
}
