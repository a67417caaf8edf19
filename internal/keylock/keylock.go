// Package keylock is one mutex per key — a namespace, say — that exists
// only while someone holds it or waits for it, so that work on one key
// never waits for work on another (as striped locks would make it, by
// chance) and memory follows the keys in use, not every key ever seen.
//
// Importable by every role.
package keylock

import "sync"

// Map holds the locks. The zero value is ready to use; it must not be
// copied after first use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters; guarded by Map.mu
}

// Lock locks key's mutex, waiting while another holds it, and returns the
// function that unlocks it (call it once).
func (l *Map) Lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*entry{}
	}
	e := l.m[key]
	if e == nil {
		e = &entry{}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// Len returns how many keys have a lock now: held or waited for.
func (l *Map) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
