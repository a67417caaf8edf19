package wire_test

import (
	"context"
	"crypto/tls"
	"io"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"

	. "lehr.dev/lehr/internal/wire"
)

// TestServerAndClientQUICConfigStreamLimits checks, through real quic-go on
// loopback, what the two configurations allow: the agent may open its
// control stream and nothing else; the distributor may open update streams
// but no bidirectional stream.
func TestServerAndClientQUICConfigStreamLimits(t *testing.T) {
	pki := newTestPKI(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", pki.server, ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	client, err := quic.DialAddr(ctx, ln.Addr().String(), pki.client, ClientQUICConfig())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer client.CloseWithError(CodeNoError, "")
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer server.CloseWithError(CodeNoError, "")

	// Wait for the server's transport parameters (stream limits) to reach
	// the client: they arrive with the handshake.
	select {
	case <-client.HandshakeComplete():
	case <-ctx.Done():
		t.Fatal("handshake not complete")
	}

	ctrl, err := client.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("client OpenStreamSync (control stream): %v", err)
	}
	if _, err := ctrl.Write([]byte{0}); err != nil {
		t.Fatalf("write control stream: %v", err)
	}
	if _, err := server.AcceptStream(ctx); err != nil {
		t.Fatalf("server AcceptStream: %v", err)
	}
	if _, err := client.OpenStream(); err == nil {
		t.Errorf("client OpenStream (a second bidirectional stream) = nil error, want the stream limit")
	}
	if _, err := client.OpenUniStream(); err == nil {
		t.Errorf("client OpenUniStream = nil error, want the stream limit (none allowed)")
	}

	// The server may open update streams, up to DefaultMaxUpdateStreams at
	// once, and no bidirectional stream.
	for i := range DefaultMaxUpdateStreams {
		if _, err := server.OpenUniStream(); err != nil {
			t.Fatalf("server OpenUniStream #%d: %v", i+1, err)
		}
	}
	if _, err := server.OpenUniStream(); err == nil {
		t.Errorf("server OpenUniStream #%d = nil error, want the stream limit", DefaultMaxUpdateStreams+1)
	}
	if _, err := server.OpenStream(); err == nil {
		t.Errorf("server OpenStream = nil error, want the stream limit (agents accept no bidirectional stream)")
	}
}

// TestTLSConfigIssuesNoSessionTickets: a client that would resume a session
// cannot, because a distributor's TLSConfig issues no tickets.
func TestTLSConfigIssuesNoSessionTickets(t *testing.T) {
	pki := newTestPKI(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", pki.server, ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		ln.Close()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.CloseWithError(CodeNoError, "")
				s, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				var b [1]byte
				if _, err := io.ReadFull(s, b[:]); err == nil {
					s.Write(b[:])
				}
				<-ctx.Done()
			})
		}
	})
	tc := pki.client.Clone()
	tc.SessionTicketsDisabled = false
	tc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	for i := range 2 {
		conn, err := quic.DialAddr(ctx, ln.Addr().String(), tc, ClientQUICConfig())
		if err != nil {
			t.Fatalf("dial #%d: %v", i+1, err)
		}
		// A server sends its ticket right after the handshake, before
		// any stream data: after an echo, any ticket has arrived.
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			t.Fatalf("open stream: %v", err)
		}
		var b [1]byte
		if _, err := s.Write([]byte{7}); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := io.ReadFull(s, b[:]); err != nil {
			t.Fatalf("read echo: %v", err)
		}
		if conn.ConnectionState().TLS.DidResume {
			t.Errorf("connection #%d resumed a TLS session, want full handshakes only", i+1)
		}
		conn.CloseWithError(CodeNoError, "")
	}
}
