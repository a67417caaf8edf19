package control

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// A call a caller waits on makes control busy for defragQuiet; the
// distributors' periodic zone reports do not (they would keep it busy
// forever).
func TestActivity(t *testing.T) {
	now := time.Unix(1000, 0)
	a := newActivity(func() time.Time { return now })
	h := func(ctx context.Context, req any) (any, error) { return nil, nil }
	call := func(method string) {
		if _, err := a.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		do    func()
		after time.Duration
		quiet bool
	}{
		{"just started", func() {}, 0, false},
		{"started long ago", func() {}, defragQuiet, true},
		{"a publish", func() { call("/lehr.v1.Control/Publish") }, defragQuiet - time.Second, false},
		{"the publish long ago", func() {}, time.Second, true},
		{"a zone report", func() { call("/lehr.v1.Control/ReportZoneStatus") }, 0, true},
		{"a stream", func() {
			_ = a.stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/lehr.v1.Control/WatchGoals"}, func(any, grpc.ServerStream) error { return nil })
		}, 0, false},
	} {
		c.do()
		now = now.Add(c.after)
		if got := a.quietFor(defragQuiet); got != c.quiet {
			t.Errorf("%s: quiet = %v, want %v", c.name, got, c.quiet)
		}
	}
}
