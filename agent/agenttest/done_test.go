package agenttest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitSeesTheConnectionEnd: a Wait whose condition is the end of the
// connection returns once it ends, also when the error that ended it was
// recorded before (readControl's fail, then closeDone). It used to sleep
// until its context ended: a swarm agent of the storm benchmark never
// redialed a lost connection, and the storm of 10,000 never converged.
func TestWaitSeesTheConnectionEnd(t *testing.T) {
	a := &Agent{changed: make(chan struct{}), done: make(chan struct{}), err: errors.New("connection lost")}
	evaluated := make(chan struct{}, 16)
	returned := make(chan error, 1)
	go func() {
		returned <- a.Wait(context.Background(), func(a *Agent) bool {
			evaluated <- struct{}{}
			select {
			case <-a.Done():
				return true
			default:
				return false
			}
		})
	}()
	<-evaluated // Wait is waiting for a change
	a.closeDone()
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Wait = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the connection ended")
	}
}
