package service

import (
	"context"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
)

// Admission bounds the memory the content a flood of publishes brings:
// how many Publish and Patch calls control receives at once (a call beyond
// it is refused before a byte of it is read), and how many bytes of such
// calls it works on at once, with a share per domain, so that one domain's
// backlog of large publishes neither grows control's memory without bound
// nor queues another domain's one-key patch behind it. A call beyond its
// share waits up to AdmissionOptions.Wait, then is refused with
// RESOURCE_EXHAUSTED/RATE_LIMITED (the producer client retries it).
//
// Rollbacks and everything else pass: they are small, or the safety path.
type Admission struct {
	opts AdmissionOptions

	receiving atomic.Int64 // content calls being received or served

	mu       sync.Mutex
	total    int64
	byDomain map[string]int64
	changed  chan struct{} // closed and replaced when bytes are released
}

// AdmissionOptions configure an Admission; zero fields take the defaults.
type AdmissionOptions struct {
	// Bytes bounds the bytes of content calls worked on at once; default
	// DefaultAdmissionBytes.
	Bytes int64
	// DomainBytes bounds one domain's; default a quarter of Bytes. A
	// single call larger than it still runs, alone.
	DomainBytes int64
	// Calls bounds the content calls received at once; default
	// DefaultAdmissionCalls.
	Calls int64
	// Wait is how long a call waits for its domain's share; default 2 s.
	Wait time.Duration
}

// Defaults of AdmissionOptions.
const (
	DefaultAdmissionBytes = 256 << 20
	DefaultAdmissionCalls = 32
)

// contentMethods are the calls whose requests carry content.
var contentMethods = map[string]bool{"Publish": true, "Patch": true}

// NewAdmission returns an Admission with opts.
func NewAdmission(opts AdmissionOptions) *Admission {
	if opts.Bytes <= 0 {
		opts.Bytes = DefaultAdmissionBytes
	}
	if opts.DomainBytes <= 0 || opts.DomainBytes > opts.Bytes {
		opts.DomainBytes = opts.Bytes / 4
	}
	if opts.Calls <= 0 {
		opts.Calls = DefaultAdmissionCalls
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Second
	}
	return &Admission{opts: opts, byDomain: map[string]int64{}, changed: make(chan struct{})}
}

// receivingKey marks the context of a content call the tap counted.
type receivingKey struct{}

// TapHandle is a grpc.InTapHandle: it refuses a content call before its
// message is read while Calls of them are being received or served.
func (a *Admission) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !contentMethods[path.Base(info.FullMethodName)] {
		return ctx, nil
	}
	if n := a.receiving.Add(1); n > a.opts.Calls {
		a.receiving.Add(-1)
		return nil, apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
			"control is receiving %d publishes at once, its most (its memory is bounded); retry in a moment", a.opts.Calls)
	}
	return context.WithValue(ctx, receivingKey{}, true), nil
}

// StatsHandler returns the grpc.StatsHandler that ends the count of the
// calls TapHandle let in, however they end.
func (a *Admission) StatsHandler() stats.Handler { return admissionStats{a} }

type admissionStats struct{ a *Admission }

func (h admissionStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h admissionStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, end := s.(*stats.End); end && ctx.Value(receivingKey{}) != nil {
		h.a.receiving.Add(-1)
	}
}
func (h admissionStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h admissionStats) HandleConn(context.Context, stats.ConnStats) {}

// Unary is a gRPC interceptor: a content call holds its request's bytes
// of the budget, its domain's share first, while its handler runs.
func (a *Admission) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := req.(proto.Message)
	if !ok || !contentMethods[path.Base(info.FullMethod)] {
		return handler(ctx, req)
	}
	domain, _, _ := names.Namespace(stringField(m.ProtoReflect(), "namespace"))
	release, err := a.acquire(ctx, domain, int64(proto.Size(m)))
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

// acquire takes n bytes for domain, waiting up to Wait for room.
func (a *Admission) acquire(ctx context.Context, domain string, n int64) (release func(), err error) {
	n = min(n, a.opts.DomainBytes)
	timer := time.NewTimer(a.opts.Wait)
	defer timer.Stop()
	for {
		a.mu.Lock()
		if a.total+n <= a.opts.Bytes && a.byDomain[domain]+n <= a.opts.DomainBytes {
			a.total += n
			a.byDomain[domain] += n
			a.mu.Unlock()
			return func() { a.release(domain, n) }, nil
		}
		held, changed := a.byDomain[domain], a.changed
		a.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, apierror.FromError(ctx.Err())
		case <-timer.C:
			return nil, apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
				"control is working on %s of domain %s's publishes, its share of the memory for publishes in flight (%s); retry when they are done",
				humanize.IBytes(uint64(held)), domain, humanize.IBytes(uint64(a.opts.DomainBytes)))
		}
	}
}

func (a *Admission) release(domain string, n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total -= n
	if a.byDomain[domain] -= n; a.byDomain[domain] <= 0 {
		delete(a.byDomain, domain)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}
