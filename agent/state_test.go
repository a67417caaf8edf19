package agent

import (
	"fmt"
	"sync"
	"testing"
)

// The per-namespace locks live only while someone holds or waits for them:
// churn through many namespaces leaves the lock map empty (issue 8,
// defect 8).
func TestNamespaceLocksAreReleased(t *testing.T) {
	a := &Agent{state: map[string]*nsState{}}
	var wg sync.WaitGroup
	for i := range 1000 {
		ns := fmt.Sprintf("d/n%d", i%50)
		wg.Go(func() {
			unlock := a.lock(ns)
			unlock()
		})
	}
	wg.Wait()
	if n := a.locks.Len(); n != 0 {
		t.Errorf("%d namespace locks left after every holder released its lock; want 0", n)
	}
}
