package fanout_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/testenv/wait"
)

// TestMaxHandshakes checks the admission bound that keeps a reconnect storm
// from collapsing: with MaxHandshakes 1, a connection that has not sent its
// Hello holds the only place, so the next attempt is refused with
// CONNECTION_REFUSED; the place comes back when that connection ends, and
// again as soon as an agent has been welcomed (two agents connect one
// after the other and both stay connected).
func TestMaxHandshakes(t *testing.T) {
	e := serveOnePlace(t)
	p, srv := e.pki, e.srv
	addr := srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A completed QUIC handshake without a control stream holds the place.
	held, err := quic.DialAddr(ctx, addr, wire.ClientTLSConfig(p.client("held")), wire.ClientQUICConfig())
	if err != nil {
		t.Fatalf("dial the connection that holds the place: %v", err)
	}
	_, err = quic.DialAddr(ctx, addr, wire.ClientTLSConfig(p.client("refused")), wire.ClientQUICConfig())
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("second dial while one is being admitted: got error %v, want CONNECTION_REFUSED", err)
	}
	// One per Initial packet refused: a TLS ClientHello with a
	// post-quantum key share spans two.
	if got := srv.Stats().RefusedHandshakes; got < 1 {
		t.Errorf("Stats().RefusedHandshakes = %d, want at least 1", got)
	}

	// Ending the held connection gives the place back; the server learns
	// of it asynchronously, so dial until welcomed.
	held.CloseWithError(0, "")
	a := dialUntilWelcomed(ctx, t, addr, p, "host-a")
	defer a.Close()
	// host-a is connected and welcomed: its place is free for host-b.
	b := dialUntilWelcomed(ctx, t, addr, p, "host-b")
	defer b.Close()
	wait.For(t, "both agents connected", func() bool { n, _ := srv.Convergence(); return n == 2 })
}

// dialUntilWelcomed dials a simulated agent until it is welcomed or ctx
// ends, treating CONNECTION_REFUSED as "not yet".
func dialUntilWelcomed(ctx context.Context, t *testing.T, addr string, p *hostPKI, host string) *agenttest.Agent {
	t.Helper()
	tc := p.client(host)
	for {
		a, err := agenttest.Dial(ctx, agenttest.Options{Addr: addr, TLS: tc, HostID: host, Zone: zone, Logger: quietLogger()})
		if err == nil {
			return a
		}
		var te *quic.TransportError
		if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
			t.Fatalf("dial %s: %v", host, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dial %s: still refused when the wait ended: %v", host, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// serveOnePlace starts a fanout server (newEnv) that admits one agent at
// a time (MaxHandshakes 1) and waits a minute for a Hello, so a connection
// that never sends one holds the place; mods change its options further.
func serveOnePlace(t *testing.T, mods ...func(*fanout.Options)) *env {
	t.Helper()
	return newEnv(t, append([]func(*fanout.Options){func(o *fanout.Options) {
		o.HandshakeTimeout = time.Minute // the held connection must not time out
		o.MaxHandshakes = 1
	}}, mods...)...)
}

// TestRefusedAttemptTakesNoPlaceLater: an agent's first flight spans two
// datagrams (a ClientHello with a post-quantum key share). When the first
// is refused and a place frees before the second arrives, the second must
// not be admitted as a connection of its own: the agent has gone with its
// refusal, and that connection would hold the place until its handshake
// timed out, refusing live agents meanwhile — in a reconnect storm, dozens
// of places held for seconds each.
func TestRefusedAttemptTakesNoPlaceLater(t *testing.T) {
	// A clock that stands still: the distributor remembers a refused
	// address for a while, and a loaded machine must not outlast it here.
	start := time.Now()
	e := serveOnePlace(t, func(o *fanout.Options) { o.Now = func() time.Time { return start } })
	p, srv := e.pki, e.srv
	addr := srv.Addr().(*net.UDPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held, err := quic.DialAddr(ctx, addr.String(), wire.ClientTLSConfig(p.client("held")), wire.ClientQUICConfig())
	if err != nil {
		t.Fatalf("dial the connection that holds the place: %v", err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	late := newHoldAfterFirst(udp)
	_, err = quic.Dial(ctx, late, addr, wire.ClientTLSConfig(p.client("refused")), wire.ClientQUICConfig())
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("dial while the place is held: got error %v, want CONNECTION_REFUSED", err)
	}
	if late.heldCount() == 0 {
		t.Fatal("the refused attempt's first flight was one datagram: this test needs a ClientHello that spans two (Go's default post-quantum key share)")
	}

	held.CloseWithError(0, "")
	wait.For(t, "the held place given back", func() bool { return srv.Stats().Admitting == 0 })
	refused := srv.Stats().RefusedHandshakes
	if err := late.release(addr); err != nil {
		t.Fatalf("send the rest of the refused attempt's first flight: %v", err)
	}
	wait.For(t, "the rest of the refused attempt's first flight handled", func() bool {
		st := srv.Stats()
		return st.Admitting > 0 || st.RefusedHandshakes > refused
	})
	if st := srv.Stats(); st.Admitting != 0 {
		t.Fatalf("the rest of a refused attempt's first flight was admitted: %d connection(s) hold the place for an agent that has gone", st.Admitting)
	}
	a := dialUntilWelcomed(ctx, t, addr.String(), p, "host-a")
	a.Close()
}

// TestAbandonedHandshake: a connection admitted on its first packet whose
// handshake never completes (the agent went away mid-flight) gives its
// place back when quic-go times the handshake out, and counts as
// abandoned; one that completed does not.
func TestAbandonedHandshake(t *testing.T) {
	e := serveOnePlace(t, func(o *fanout.Options) {
		o.QUIC = wire.ServerQUICConfig()
		o.QUIC.HandshakeIdleTimeout = 200 * time.Millisecond
	})
	p, srv := e.pki, e.srv
	addr := srv.Addr().(*net.UDPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a := dialUntilWelcomed(ctx, t, addr.String(), p, "host-a")
	a.Close()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	// Only the first datagram of this attempt ever reaches the server.
	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer dcancel()
	if _, err := quic.Dial(dctx, newHoldAfterFirst(udp), addr, wire.ClientTLSConfig(p.client("gone")), wire.ClientQUICConfig()); err == nil {
		t.Fatal("a handshake completed with only its first datagram sent")
	}
	wait.For(t, "the abandoned handshake counted", func() bool { return srv.Stats().AbandonedHandshakes > 0 })
	st := srv.Stats()
	if st.AbandonedHandshakes != 1 {
		t.Errorf("AbandonedHandshakes = %d; want 1 (the welcomed agent is not abandoned)", st.AbandonedHandshakes)
	}
	if st.Admitting != 0 {
		t.Errorf("Admitting = %d after the abandoned handshake ended; want 0", st.Admitting)
	}
}

// holdAfterFirst is a client's UDP socket that sends its first datagram and
// keeps the ones after it until release. It implements only
// net.PacketConn, so quic-go writes through WriteTo. It hands quic-go
// nothing it received before the second datagram was written (or a
// while passed): quic-go reads before it sends more, so an answer to the
// first datagram that came back at once — a refusal on loopback — would
// otherwise end the attempt before its first flight was complete.
type holdAfterFirst struct {
	udp      *net.UDPConn
	complete chan struct{} // closed once a second datagram was written
	waited   sync.Once     // ReadFrom's wait for complete

	mu   sync.Mutex
	sent bool
	held [][]byte
}

func newHoldAfterFirst(udp *net.UDPConn) *holdAfterFirst {
	return &holdAfterFirst{udp: udp, complete: make(chan struct{})}
}

func (c *holdAfterFirst) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent {
		if len(c.held) == 0 {
			close(c.complete)
		}
		c.held = append(c.held, bytes.Clone(b))
		return len(b), nil
	}
	c.sent = true
	return c.udp.WriteTo(b, addr)
}

// ReadFrom waits for the first flight to be complete, for at most 5 s:
// a first flight of one datagram (no post-quantum key share) is left to
// the test's check of heldCount.
func (c *holdAfterFirst) ReadFrom(b []byte) (int, net.Addr, error) {
	c.waited.Do(func() {
		select {
		case <-c.complete:
		case <-time.After(5 * time.Second):
		}
	})
	return c.udp.ReadFrom(b)
}

func (c *holdAfterFirst) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// release sends the datagrams held, from the same address.
func (c *holdAfterFirst) release(to net.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.held {
		if _, err := c.udp.WriteTo(b, to); err != nil {
			return err
		}
	}
	c.held = nil
	return nil
}

func (c *holdAfterFirst) Close() error                       { return nil } // the test closes udp
func (c *holdAfterFirst) LocalAddr() net.Addr                { return c.udp.LocalAddr() }
func (c *holdAfterFirst) SetDeadline(t time.Time) error      { return c.udp.SetDeadline(t) }
func (c *holdAfterFirst) SetReadDeadline(t time.Time) error  { return c.udp.SetReadDeadline(t) }
func (c *holdAfterFirst) SetWriteDeadline(t time.Time) error { return c.udp.SetWriteDeadline(t) }
