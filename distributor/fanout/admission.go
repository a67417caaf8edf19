package fanout

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// errTooManyHandshakes refuses a connection attempt; quic-go answers it
// with CONNECTION_REFUSED.
var errTooManyHandshakes = errors.New("fanout: too many agents being admitted at once")

// admission is an admitted connection's place among the
// Options.MaxHandshakes; release gives it back, once.
type admission struct {
	s        *Server
	released atomic.Bool
	// accepted: the handshake completed and handle took the connection.
	accepted atomic.Bool
}

// release gives the place back; it reports whether this call did.
func (a *admission) release() bool {
	if a.released.CompareAndSwap(false, true) {
		a.s.handshakes.Add(-1)
		return true
	}
	return false
}

type admissionKey struct{}

// admit is the transport's ConnContext, run on the first packet of a
// connection quic-go does not know yet, before any handshake work: it
// refuses the connection when Options.MaxHandshakes are being admitted
// already, and refuses for refusalMemory the address it refused (see
// refusedAddrs). An admitted connection keeps its place until handle has
// welcomed or turned it away (see admitted), or until it ends, whichever
// comes first.
func (s *Server) admit(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	from := addrPort(ci.RemoteAddr)
	now := s.now()
	if s.refused.has(from, now) {
		s.met.refusedHandshakes.Inc()
		return nil, errTooManyHandshakes
	}
	n := s.handshakes.Add(1)
	if limit := s.opts.MaxHandshakes; limit > 0 && n > int64(limit) {
		s.handshakes.Add(-1)
		s.refused.add(from, now)
		s.met.refusedHandshakes.Inc()
		return nil, errTooManyHandshakes
	}
	a := &admission{s: s}
	context.AfterFunc(ctx, func() {
		if a.release() && !a.accepted.Load() {
			s.met.abandonedHandshakes.Inc()
		}
	})
	return context.WithValue(ctx, admissionKey{}, a), nil
}

// accepting marks conn's handshake as completed: its place is given back
// by admitted, and its end no longer counts as an abandoned handshake.
func accepting(conn *quic.Conn) {
	if a, ok := conn.Context().Value(admissionKey{}).(*admission); ok {
		a.accepted.Store(true)
	}
}

// admitted gives back conn's place among the connections being admitted.
func admitted(conn *quic.Conn) {
	if a, ok := conn.Context().Value(admissionKey{}).(*admission); ok {
		a.release()
	}
}

// addrPort is addr as a map key; the zero AddrPort if it is not UDP.
func addrPort(addr net.Addr) netip.AddrPort {
	if u, ok := addr.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	return netip.AddrPort{}
}

// refusalMemory is how long an address refused a connection stays
// refused. quic-go asks admit about every Initial packet of a connection
// it does not know, and an agent's first flight spans two (a ClientHello
// with a post-quantum key share): when the first was refused and a place
// freed before the second arrived, the second would be admitted as a
// connection of its own for an agent that has gone with its refusal, and
// hold that place until its handshake timed out. The agent's next attempt
// comes from a new socket, a new port, so it is not refused for this.
const refusalMemory = time.Second

// maxRefusedAddrs bounds the addresses remembered per refusalMemory; a
// flood beyond it is refused as usual, just not remembered.
const maxRefusedAddrs = 8192

// refusedAddrs remembers refused addresses for refusalMemory to
// 2·refusalMemory, in two generations that rotate: constant time per
// packet and bounded memory, whatever the flood.
type refusedAddrs struct {
	mu        sync.Mutex
	cur, prev map[netip.AddrPort]struct{}
	rotateAt  time.Time
}

// rotate ages the generations as of now; mu is held.
func (r *refusedAddrs) rotate(now time.Time) {
	if now.Before(r.rotateAt) {
		return
	}
	if now.Sub(r.rotateAt) >= refusalMemory {
		r.prev = nil // both generations are older than the memory
	} else {
		r.prev = r.cur
	}
	r.cur = nil
	r.rotateAt = now.Add(refusalMemory)
}

func (r *refusedAddrs) add(a netip.AddrPort, now time.Time) {
	if !a.IsValid() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	if r.cur == nil {
		r.cur = map[netip.AddrPort]struct{}{}
	}
	if len(r.cur) < maxRefusedAddrs {
		r.cur[a] = struct{}{}
	}
}

func (r *refusedAddrs) has(a netip.AddrPort, now time.Time) bool {
	if !a.IsValid() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	_, inCur := r.cur[a]
	_, inPrev := r.prev[a]
	return inCur || inPrev
}
