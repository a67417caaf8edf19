package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestRequestTimeoutBoundsEachRequest stops the only etcd member under a
// store and checks that a read and a write fail within
// Options.RequestTimeout with a *NoAnswerError, long before the caller's
// own deadline, while a caller whose deadline comes first gets its own
// error, not the store's.
func TestRequestTimeoutBoundsEachRequest(t *testing.T) {
	const bound = 500 * time.Millisecond
	ctx := testCtx(t)
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: t.TempDir(), NoSync: true, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s := New(cli, Options{Logger: quietLogger(), RequestTimeout: bound})
	mustDomain(t, s, "d")
	srv.Close()

	for _, tc := range []struct {
		name string
		op   func(context.Context) error
	}{
		{"read", func(ctx context.Context) error { _, err := s.GetDomain(ctx, "d"); return err }},
		{"write", func(ctx context.Context) error { _, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "e"}); return err }},
	} {
		// The caller waits a minute: only the store's bound can end the
		// call in seconds.
		start := time.Now()
		err := tc.op(testCtx(t))
		took := time.Since(start)
		var na *NoAnswerError
		if !errors.As(err, &na) || na.Timeout != bound || !errors.Is(err, ErrNoAnswer) || !IsUnavailable(err) {
			t.Errorf("%s with etcd gone = %v; want a *NoAnswerError after %v, unavailable", tc.name, err, bound)
		}
		// Generous for a loaded machine; the caller's deadline is 60 s.
		if took > bound+10*time.Second {
			t.Errorf("%s with etcd gone took %v; want about %v", tc.name, took, bound)
		}
		t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Millisecond))

		// A caller that gives up first hears its own deadline.
		short, cancel := context.WithTimeout(t.Context(), bound/5)
		err = tc.op(short)
		cancel()
		if errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with a caller deadline under the bound = %v; want the caller's context.DeadlineExceeded", tc.name, err)
		}
	}
}
