package control

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// defragQuiet is how long control's callers must have been idle before a
// defragmentation that space does not demand runs (store.SpaceOptions.Quiet):
// it stalls every request for about a second per GiB, so it is put
// between bursts of calls, not in one.
const defragQuiet = 10 * time.Second

// activity records when the last call that a caller waits on began:
// every unary call but the distributors' periodic ReportZoneStatus, and
// the start of every stream.
type activity struct {
	last atomic.Int64 // unix nanoseconds
	now  func() time.Time
}

func newActivity(now func() time.Time) *activity {
	a := &activity{now: now}
	a.last.Store(now().UnixNano())
	return a
}

func (a *activity) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod != "/lehr.v1.Control/ReportZoneStatus" {
		a.last.Store(a.now().UnixNano())
	}
	return h(ctx, req)
}

func (a *activity) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	a.last.Store(a.now().UnixNano())
	return h(srv, ss)
}

// quietFor reports whether no call began in the last d.
func (a *activity) quietFor(d time.Duration) bool {
	return a.now().Sub(time.Unix(0, a.last.Load())) >= d
}
