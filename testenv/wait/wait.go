// Package wait is the one way tests wait for something to become true:
// For and Until poll a condition until it holds or a generous deadline
// passes, then fail the test naming what they waited for. Tests wait on
// observable state (an agent's held version, a file's content, a
// counter), never on a fixed sleep, so they stay deterministic on a loaded
// 2-core machine.
//
// Only tests, test harnesses (testenv/...) and benchmarks import wait.
package wait

import (
	"errors"
	"testing"
	"time"
)

// Timeout is how long For and Until wait: long enough that a loaded CI
// machine never reaches it while the system works, short enough that a
// hang fails well within the test binary's own timeout.
const Timeout = 60 * time.Second

// Poll is how often a condition is evaluated.
const Poll = 10 * time.Millisecond

// For evaluates cond every Poll until it returns true, and fails the test
// with "timed out after 1m0s waiting for <what>" if it has not within
// Timeout. cond runs on the calling goroutine.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("condition not met")

// Until evaluates cond every Poll until it returns nil, and fails the test
// with what and cond's last error (which should say what was seen instead)
// if it has not within Timeout. cond runs on the calling goroutine.
func Until(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for %s", Timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %v", Timeout, what, err)
		}
		time.Sleep(Poll)
	}
}
