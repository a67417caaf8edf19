package distributor

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestSyncQueueIsFairBetweenDomains: a domain with a backlog of a hundred
// namespaces does not hold another domain's namespace behind it, nor more
// than its share of the workers; a namespace queued twice is taken once,
// and one that changes while in flight is taken again after.
func TestSyncQueueIsFairBetweenDomains(t *testing.T) {
	q := newSyncQueue(2)
	for i := range 100 {
		q.add(fmt.Sprintf("flood/ns-%03d", i))
	}
	q.add("victim/app", "victim/app")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	a, _ := q.next(ctx)
	b, _ := q.next(ctx)
	if a != "flood/ns-000" || b != "victim/app" {
		t.Fatalf("first two taken: %s, %s; want flood/ns-000, then victim/app (domains take turns)", a, b)
	}
	c, _ := q.next(ctx)
	if c != "flood/ns-001" {
		t.Fatalf("third taken: %s, want flood/ns-001", c)
	}
	// flood has its two workers: nothing more of it until one is done.
	if ns, ok := q.take(); ok {
		t.Fatalf("took %s while flood holds its share and victim has nothing queued", ns)
	}
	q.add("victim/app") // changed while in flight
	if ns, ok := q.take(); ok {
		t.Fatalf("took %s: victim/app is in flight, it must wait for done", ns)
	}
	q.done(b)
	if ns, _ := q.next(ctx); ns != "victim/app" {
		t.Fatalf("after done, took %s; want victim/app again (it changed while in flight)", ns)
	}
	q.done("victim/app")
	q.done(a)
	if ns, _ := q.next(ctx); ns != "flood/ns-002" {
		t.Fatalf("took %s, want flood/ns-002", ns)
	}
}
