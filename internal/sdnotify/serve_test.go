package sdnotify

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testDaemon is ready when ready is closed and runs until ctx is done,
// returning fail if set.
type testDaemon struct {
	ready chan struct{}
	fail  error
	early bool // fail before becoming ready
}

func (d *testDaemon) Ready() <-chan struct{} { return d.ready }
func (d *testDaemon) Run(ctx context.Context) error {
	if d.early {
		return d.fail
	}
	close(d.ready)
	<-ctx.Done()
	return d.fail
}

type recorder struct {
	mu     sync.Mutex
	states []string
}

func (r *recorder) send(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	return nil
}

func TestServe(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		d       *testDaemon
		want    []string
		wantErr error
	}{
		{"clean stop", &testDaemon{}, []string{Ready + "\nSTATUS=up", Stopping}, nil},
		{"error on stop", &testDaemon{fail: boom}, []string{Ready + "\nSTATUS=up", Stopping}, boom},
		{"fails before ready", &testDaemon{fail: boom, early: true}, nil, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.d.ready = make(chan struct{})
			var r recorder
			ctx, cancel := context.WithCancel(context.Background())
			readied := false
			errc := make(chan error, 1)
			go func() {
				errc <- Serve(ctx, tt.d, ServeOptions{
					Status:  func() string { return "up" },
					OnReady: func() { readied = true; cancel() },
					Send:    r.send,
				})
			}()
			var err error
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not return")
			}
			cancel()
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Serve = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, r.states); diff != "" {
				t.Errorf("notifications (-want +got):\n%s", diff)
			}
			if readied != (tt.want != nil) {
				t.Errorf("OnReady called = %v", readied)
			}
		})
	}
}
