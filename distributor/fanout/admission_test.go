package fanout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/distributor/versions"
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
	p := newPKI(t)
	srv, err := fanout.Listen(fanout.Options{
		Listen:           "127.0.0.1:0",
		TLS:              p.server(),
		Zone:             zone,
		DistributorID:    "dist-test",
		Versions:         versions.New(versions.Options{Logger: quietLogger()}),
		Logger:           quietLogger(),
		HandshakeTimeout: time.Minute, // the held connection must not time out
		MaxHandshakes:    1,
	})
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
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
