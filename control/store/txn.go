package store

// Optimistic transactions.
//
// A write that depends on what it read — a namespace's head, a domain's
// usage, the experiments of a policy, a zone's absence — reads, decides,
// and commits in one transaction whose guards (a mod revision, a create
// revision, the newest mod revision under a prefix) say that nothing it
// decided on has changed. When a guard fails another writer came first,
// and the write starts over: it reads and decides again. optimistic is
// that loop, written once, so that every such write gives up after the
// same bound, with the same error, and stops when its caller has gone.

import (
	"context"
	"fmt"
)

// maxCommitAttempts bounds the rounds of one optimistic write (optimistic):
// a write that lost this many guarded transactions in a row to concurrent
// writers gives up with ErrContention.
const maxCommitAttempts = 16

// optimistic runs round, one read-decide-commit of an optimistic write,
// until it is done: round reports done true when its transaction committed
// or the write is settled without one (nothing to change, an answer
// found), and done false when a guard failed because another writer came
// first and it must read and decide again. attempt counts rounds from 0.
// round hands its results to the caller through the caller's variables.
//
// A round's error ends the loop and is returned as is. optimistic's own
// errors name the write ("store: <what>: ..."): ctx's error when ctx has
// ended before a new round (a round's requests carry ctx themselves), and
// after maxCommitAttempts lost rounds an error wrapping ErrContention.
// Rounds follow each other at once: a guard fails only because another
// write committed, so each new read sees progress.
func optimistic(ctx context.Context, what string, round func(attempt int) (done bool, err error)) error {
	for attempt := range maxCommitAttempts {
		if attempt > 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("store: %s: %w", what, err)
			}
		}
		done, err := round(attempt)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("store: %s: %w after %d attempts", what, ErrContention, maxCommitAttempts)
}
