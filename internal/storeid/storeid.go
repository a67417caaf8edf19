// Package storeid carries the identity of control's store on every
// control response and lets a client hold on to the store it first saw.
//
// Every control replica sets the gRPC response header Header ("lehr-store-id")
// to the id of the store it serves (ServerUnary, ServerStream): replicas
// sharing one etcd send the same id. A replica started on a store of its
// own — its embedded etcd, because it was not given the --etcd-endpoints of
// the others — sends another, and its store is empty. A client that must
// never follow such a replica (a distributor: an empty store means no
// goals) pins the first id it sees with a Pin, whose interceptors fail every
// later call answered under another id with a *MismatchError, before the
// caller reads any of the answer. A response without the header (a control
// older than this package) is taken as it is.
//
// Imported by control and distributor.
package storeid

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Header is the gRPC response header carrying the store's id.
const Header = "lehr-store-id"

// ServerUnary returns a server interceptor that sets Header to id on every
// unary response, refused ones included. Put it first in the chain.
func ServerUnary(id string) grpc.UnaryServerInterceptor {
	md := metadata.Pairs(Header, id)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, md) // fails only once headers are sent: never before the handler
		return handler(ctx, req)
	}
}

// ServerStream returns a server interceptor that sets Header to id on
// every stream: the header goes with the stream's first message, its
// explicit SendHeader, or its status. Put it first in the chain.
func ServerStream(id string) grpc.StreamServerInterceptor {
	md := metadata.Pairs(Header, id)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		_ = ss.SetHeader(md)
		return handler(srv, ss)
	}
}

// ErrMismatch is wrapped by every *MismatchError.
var ErrMismatch = errors.New("storeid: control serves another store")

// MismatchError is a call answered by a control replica serving another
// store than the one pinned. It wraps ErrMismatch, and is the gRPC status
// UNAVAILABLE (status.FromError): the caller retries, keeping what it has,
// and reaches a replica of the pinned store once the others' addresses
// route to one.
type MismatchError struct {
	// Pinned is the store first seen; Got is the one that answered.
	Pinned, Got string
	// Method is the full gRPC method called, Replica the address that
	// answered ("" when unknown).
	Method, Replica string
}

func (e *MismatchError) Error() string {
	at := "a control replica"
	if e.Replica != "" {
		at = "the control replica at " + e.Replica
	}
	return fmt.Sprintf("%s serves store %s, not store %s first seen here: its answer to %s is refused. "+
		"A replica on another store was not given the --etcd-endpoints (LEHR_ETCD_ENDPOINTS) of the others and runs an etcd of its own; "+
		"give it the cluster's endpoints and restart it ('lehr control status --control ADDR,ADDR' shows which replica serves which store)",
		at, e.Got, e.Pinned, e.Method)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// GRPCStatus makes the error UNAVAILABLE for gRPC's status package.
func (e *MismatchError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Error()) }

// Pin holds the first store id a client sees and refuses answers under
// any other. The zero value is ready to use; its methods are safe for
// concurrent use.
type Pin struct {
	// OnMismatch, if set, is called with every refused answer, from the
	// refused call's goroutine.
	OnMismatch func(*MismatchError)

	mu sync.Mutex
	id string
}

// ID returns the pinned store id, "" before the first answer carrying one.
func (p *Pin) ID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

// check pins id if nothing is pinned yet, and returns a *MismatchError if
// another id is.
func (p *Pin) check(id, method, replica string) error {
	if id == "" {
		return nil
	}
	p.mu.Lock()
	if p.id == "" {
		p.id = id
	}
	pinned := p.id
	p.mu.Unlock()
	if id == pinned {
		return nil
	}
	err := &MismatchError{Pinned: pinned, Got: id, Method: method, Replica: replica}
	if p.OnMismatch != nil {
		p.OnMismatch(err)
	}
	return err
}

// headerID returns the store id of a header, "" if there is none.
func headerID(md metadata.MD) string {
	if v := md.Get(Header); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Unary is a client interceptor (grpc.WithChainUnaryInterceptor) that
// fails a call answered under another store id than the pinned one — the
// answer is dropped — and pins the first id seen.
func (p *Pin) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var md metadata.MD
	var from peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md), grpc.Peer(&from))...)
	if merr := p.check(headerID(md), method, addrOf(&from)); merr != nil {
		return merr
	}
	return err
}

// Stream is a client interceptor (grpc.WithChainStreamInterceptor) that
// checks a stream's header before the caller receives its first message:
// under another store id than the pinned one, the stream is cancelled and
// its Header and RecvMsg fail with the *MismatchError.
func (p *Pin) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &pinnedStream{ClientStream: cs, pin: p, method: method, cancel: cancel}, nil
}

// pinnedStream is a client stream whose header is checked once, before
// anything received reaches the caller.
type pinnedStream struct {
	grpc.ClientStream
	pin    *Pin
	method string
	cancel context.CancelFunc

	once sync.Once
	err  error // a *MismatchError, or nil
}

// verify waits for the header and checks it, once.
func (s *pinnedStream) verify() error {
	s.once.Do(func() {
		md, err := s.ClientStream.Header()
		if err != nil {
			return // the stream failed: RecvMsg says how
		}
		from, _ := peer.FromContext(s.ClientStream.Context())
		if s.err = s.pin.check(headerID(md), s.method, addrOf(from)); s.err != nil {
			s.cancel()
		}
	})
	return s.err
}

// Header returns the stream's header, or the *MismatchError.
func (s *pinnedStream) Header() (metadata.MD, error) {
	if err := s.verify(); err != nil {
		return nil, err
	}
	return s.ClientStream.Header()
}

// RecvMsg receives a message once the header checks out.
func (s *pinnedStream) RecvMsg(m any) error {
	if err := s.verify(); err != nil {
		return err
	}
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel() // the stream is over: release its context
	}
	return err
}

// addrOf is the remote address of p, "" if unknown.
func addrOf(p *peer.Peer) string {
	if p == nil || p.Addr == nil {
		return ""
	}
	return p.Addr.String()
}
