package keylock

import (
	"testing"
	"time"
)

// TestKeysDoNotWaitForEachOther: one key held does not block another; the
// same key waits; a lock lives only while held or waited for.
func TestKeysDoNotWaitForEachOther(t *testing.T) {
	var l Map
	unlockA := l.Lock("flood/a")
	done := make(chan struct{})
	go func() {
		l.Lock("victim/b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a lock of another key waited for flood/a")
	}
	got := make(chan struct{})
	go func() {
		l.Lock("flood/a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("flood/a was locked twice at once")
	case <-time.After(20 * time.Millisecond):
	}
	unlockA()
	<-got
	if n := l.Len(); n != 0 {
		t.Fatalf("%d locks left with none held", n)
	}
}
