package distributor

import (
	"context"
	"slices"
	"sync"

	"lehr.dev/lehr/internal/names"
)

// syncQueue holds the namespaces whose goal changed until a sync worker
// takes them, served fairly between domains: a worker takes the next
// namespace of the next domain in turn that has one queued, and no domain
// holds more than perDomain workers at once. So one domain's backlog — a
// flood of large versions, each a fetch of seconds from a busy control —
// never queues another domain's one-key patch behind it. A namespace that
// changes again while a worker syncs it is synced again after; one queued
// twice is synced once.
type syncQueue struct {
	perDomain int

	mu       sync.Mutex
	queued   map[string]bool     // waiting for a worker
	byDomain map[string][]string // waiting, in arrival order
	turn     []string            // domains with something waiting, in turn order
	inflight map[string]bool     // taken by a worker
	again    map[string]bool     // changed while in flight
	busy     map[string]int      // workers per domain
	ready    chan struct{}       // a token while something may be taken
}

func newSyncQueue(perDomain int) *syncQueue {
	return &syncQueue{
		perDomain: max(1, perDomain),
		queued:    map[string]bool{},
		byDomain:  map[string][]string{},
		inflight:  map[string]bool{},
		again:     map[string]bool{},
		busy:      map[string]int{},
		ready:     make(chan struct{}, 1),
	}
}

func domainOf(ns string) string {
	d, _, _ := names.Namespace(ns)
	return d // "" for a malformed name: its own queue, served all the same
}

// add queues namespaces.
func (q *syncQueue) add(nss ...string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ns := range nss {
		switch {
		case q.inflight[ns]:
			q.again[ns] = true
		case !q.queued[ns]:
			q.queued[ns] = true
			d := domainOf(ns)
			if len(q.byDomain[d]) == 0 {
				q.turn = append(q.turn, d)
			}
			q.byDomain[d] = append(q.byDomain[d], ns)
		}
	}
	q.signalLocked()
}

// signalLocked leaves a token in ready if something can be taken.
func (q *syncQueue) signalLocked() {
	for _, d := range q.turn {
		if q.busy[d] < q.perDomain {
			select {
			case q.ready <- struct{}{}:
			default:
			}
			return
		}
	}
}

// next takes the next namespace to sync, waiting until there is one or ctx
// ends (ok false).
func (q *syncQueue) next(ctx context.Context) (ns string, ok bool) {
	for {
		if ns, ok := q.take(); ok {
			return ns, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-q.ready:
		}
	}
}

func (q *syncQueue) take() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, d := range q.turn {
		if q.busy[d] >= q.perDomain {
			continue
		}
		ns := q.byDomain[d][0]
		q.byDomain[d] = q.byDomain[d][1:]
		// This domain goes to the back of the turn, or leaves it.
		q.turn = slices.Delete(q.turn, i, i+1)
		if len(q.byDomain[d]) > 0 {
			q.turn = append(q.turn, d)
		} else {
			delete(q.byDomain, d)
		}
		delete(q.queued, ns)
		q.inflight[ns] = true
		q.busy[d]++
		q.signalLocked() // another worker may take the next
		return ns, true
	}
	return "", false
}

// done ends a worker's sync of ns; one that changed meanwhile is queued
// again.
func (q *syncQueue) done(ns string) {
	q.mu.Lock()
	d := domainOf(ns)
	delete(q.inflight, ns)
	if q.busy[d]--; q.busy[d] <= 0 {
		delete(q.busy, d)
	}
	again := q.again[ns]
	delete(q.again, ns)
	q.signalLocked()
	q.mu.Unlock()
	if again {
		q.add(ns)
	}
}
