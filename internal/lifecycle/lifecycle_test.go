package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTheFirstFailureEndsTheGroup(t *testing.T) {
	boom := errors.New("boom")
	g, ctx := New(context.Background(), "distributor")
	g.Go("serve", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err() // asked to stop: not a failure
	})
	g.Go("watch", func(ctx context.Context) error { return boom })
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("a part failed and the group's context did not end")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, boom) || !strings.Contains(cause.Error(), "distributor: watch: boom") {
		t.Errorf("the context's cause = %v, want the failure named by component and part", cause)
	}
	if err := g.Wait(); !errors.Is(err, boom) || err.Error() != "distributor: watch: boom" {
		t.Errorf("Wait = %v, want distributor: watch: boom", err)
	}
}

func TestStoppingIsNotAFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		part func(ctx context.Context) error
	}{
		{"returns nil", func(ctx context.Context) error { <-ctx.Done(); return nil }},
		{"returns the context's error", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"wraps it", func(ctx context.Context) error { <-ctx.Done(); return errors.Join(errors.New("read"), ctx.Err()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.Background())
			g, _ := New(parent, "agent")
			g.Go("part", tc.part)
			cancel()
			if err := g.Wait(); err != nil {
				t.Errorf("Wait after the parent ended = %v, want nil", err)
			}
		})
	}
}

// A part that fails with context.Canceled while the context is alive (a
// client's canceled call, say) has failed.
func TestCanceledBeforeTheEndIsAFailure(t *testing.T) {
	g, _ := New(context.Background(), "control")
	g.Go("serve", func(ctx context.Context) error { return context.Canceled })
	if err := g.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want the part's context.Canceled", err)
	}
}
