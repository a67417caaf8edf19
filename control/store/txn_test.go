package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestOptimistic runs optimistic's loop against the shared etcd: each round
// reads a counter, lets a concurrent writer bump it (as another control
// replica would) for the first `lose` rounds, and commits its own bump
// guarded by the mod revision it read.
func TestOptimistic(t *testing.T) {
	errRefused := errors.New("refused")
	for _, tc := range []struct {
		name string
		lose int // rounds in which another writer commits first; -1: all
		// cancelIn cancels the context in that round (after its loss);
		// -1: never.
		cancelIn int
		failIn   int // the round returns errRefused in that round; -1: never
		// want
		rounds  int
		wantErr error // nil, or what errors.Is must find
		counter int   // the counter afterwards
	}{
		{name: "first round commits", lose: 0, cancelIn: -1, failIn: -1, rounds: 1, counter: 1},
		{name: "retries after a concurrent write", lose: 1, cancelIn: -1, failIn: -1, rounds: 2, counter: 2},
		{name: "retries up to the bound", lose: maxCommitAttempts - 1, cancelIn: -1, failIn: -1,
			rounds: maxCommitAttempts, counter: maxCommitAttempts},
		{name: "gives up after the bound", lose: -1, cancelIn: -1, failIn: -1,
			rounds: maxCommitAttempts, wantErr: ErrContention, counter: maxCommitAttempts},
		{name: "stops when ctx ends", lose: -1, cancelIn: 0, failIn: -1,
			rounds: 1, wantErr: context.Canceled, counter: 1},
		{name: "a round's error ends it as is", lose: -1, cancelIn: -1, failIn: 2,
			rounds: 3, wantErr: errRefused, counter: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, Options{})
			key := s.lay.prefix + "counter"
			read := func(ctx context.Context) (int, int64) {
				t.Helper()
				resp, err := s.get(ctx, key)
				if err != nil {
					t.Fatalf("read the counter: %v", err)
				}
				if len(resp.Kvs) == 0 {
					return 0, 0
				}
				n, err := strconv.Atoi(string(resp.Kvs[0].Value))
				if err != nil {
					t.Fatalf("counter %q: %v", resp.Kvs[0].Value, err)
				}
				return n, resp.Kvs[0].ModRevision
			}
			bump := func(ctx context.Context, n int) {
				t.Helper()
				if _, err := shared.cli.Put(ctx, key, strconv.Itoa(n+1)); err != nil {
					t.Fatalf("concurrent write: %v", err)
				}
			}

			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			rounds := 0
			err := optimistic(ctx, "bump the counter", func(attempt int) (bool, error) {
				if attempt != rounds {
					t.Errorf("round %d told attempt %d", rounds, attempt)
				}
				rounds++
				if attempt == tc.failIn {
					return false, errRefused
				}
				n, mod := read(testCtx(t))
				if tc.lose < 0 || attempt < tc.lose {
					bump(testCtx(t), n) // another writer comes first
				}
				if attempt == tc.cancelIn {
					cancel()
				}
				resp, err := s.txn(testCtx(t),
					[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", mod)},
					[]clientv3.Op{clientv3.OpPut(key, strconv.Itoa(n+1))}, nil)
				if err != nil {
					return false, err
				}
				return resp.Succeeded, nil
			})

			if rounds != tc.rounds {
				t.Errorf("ran %d rounds; want %d", rounds, tc.rounds)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("optimistic: %v; want nil", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("optimistic: %v; want an error wrapping %v", err, tc.wantErr)
			case tc.wantErr == errRefused && err != errRefused:
				t.Errorf("optimistic: %v; want the round's error as is", err)
			case tc.wantErr != nil && tc.wantErr != errRefused && !strings.HasPrefix(err.Error(), "store: bump the counter: "):
				t.Errorf("optimistic: %q; want it to name the write", err)
			}
			if errors.Is(tc.wantErr, ErrContention) && !strings.Contains(err.Error(), "after "+strconv.Itoa(maxCommitAttempts)+" attempts") {
				t.Errorf("optimistic: %q; want it to say how often it tried", err)
			}
			// No bump is lost: every concurrent one and each committed
			// round's own are counted.
			if got, _ := read(testCtx(t)); got != tc.counter {
				t.Errorf("counter %d; want %d", got, tc.counter)
			}
		})
	}
}
