package wire_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
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

// TestSessionResumption: an agent's reconnect resumes its TLS session —
// also with a restarted distributor, whose ticket key is derived from its
// private key — and the distributor still sees the agent's certificate; a
// distributor with another key, or one that no longer trusts the agent's
// CA, does not resume it.
func TestSessionResumption(t *testing.T) {
	pki := newTestPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	otherKey := pki.serverBase.Clone()
	otherKey.Certificates = []tls.Certificate{pki.leaf(9, "distributor", x509.ExtKeyUsageServerAuth)}
	otherCA := pki.serverBase.Clone()
	otherCA.ClientCAs = x509.NewCertPool()

	// One agent's config, kept across its dials as the agent keeps it.
	client := ClientTLSConfig(pki.client)
	for _, tc := range []struct {
		name       string
		server     *tls.Config // before ServerTLSConfig
		wantResume bool
		wantFail   bool
	}{
		{name: "first connection: full handshake", server: pki.serverBase},
		{name: "reconnect resumes", server: pki.serverBase, wantResume: true},
		{name: "restarted distributor resumes", server: pki.serverBase, wantResume: true},
		{name: "another distributor key: full handshake", server: otherKey},
		// The cache keeps one session per server name: the other key's.
		{name: "back to the first key: full handshake", server: pki.serverBase},
		{name: "agent's CA no longer trusted: refused", server: otherCA, wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A listener of its own each time: a restart for the
			// distributor's TLS state.
			sc := ServerTLSConfig(tc.server)
			peers := make(chan string, 1)
			addr := startListener(t, sc, func(ctx context.Context, conn *quic.Conn) {
				// What the distributor's identity check reads
				// (fanout.checkIdentity): the verified chains, also of
				// a resumed session.
				st := conn.ConnectionState().TLS
				if len(st.VerifiedChains) > 0 {
					peers <- st.VerifiedChains[0][0].Subject.CommonName
				}
				s, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				var b [1]byte
				if _, err := io.ReadFull(s, b[:]); err == nil {
					_, _ = s.Write(b[:])
				}
				<-ctx.Done()
			})
			conn, err := quic.DialAddr(ctx, addr, client, ClientQUICConfig())
			if tc.wantFail {
				// The client may finish its side before the server
				// checks the client certificate: the server then closes.
				if err == nil {
					select {
					case <-conn.Context().Done():
					case <-ctx.Done():
						t.Fatal("connection still up, want the handshake refused")
					}
				}
				select {
				case cn := <-peers:
					t.Errorf("distributor accepted client %q, want it refused", cn)
				default:
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseWithError(CodeNoError, "")
			// The server sends its ticket right after the handshake,
			// before any stream data: after an echo it has arrived.
			s, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write([]byte{7}); err != nil {
				t.Fatal(err)
			}
			var b [1]byte
			if _, err := io.ReadFull(s, b[:]); err != nil {
				t.Fatal(err)
			}
			if got := conn.ConnectionState().TLS.DidResume; got != tc.wantResume {
				t.Errorf("DidResume = %v, want %v", got, tc.wantResume)
			}
			select {
			case cn := <-peers:
				if cn != "host-1" {
					t.Errorf("distributor saw client certificate %q, want host-1", cn)
				}
			default:
				t.Error("distributor saw no verified client certificate")
			}
		})
	}
}

// TestSessionCacheKeepsSessionsThroughFailures: crypto/tls drops a session
// after any failed handshake that offered it; the agent's cache keeps it
// through a few (a refused attempt in a reconnect storm) and drops it after
// as many failures in a row as a corrupt session would cause.
func TestSessionCacheKeepsSessionsThroughFailures(t *testing.T) {
	c := ClientTLSConfig(&tls.Config{}).ClientSessionCache
	s1, s2 := &tls.ClientSessionState{}, &tls.ClientSessionState{}
	c.Put("d1", s1)
	for i := range SessionDropAfter - 1 {
		c.Put("d1", nil) // a failed handshake
		if got, ok := c.Get("d1"); !ok || got != s1 {
			t.Fatalf("after %d failures: Get = %p, %v, want the session kept", i+1, got, ok)
		}
	}
	c.Put("d1", s2) // a handshake succeeded: its new ticket
	for range SessionDropAfter - 1 {
		c.Put("d1", nil)
	}
	if got, _ := c.Get("d1"); got != s2 {
		t.Fatalf("Get = %p, want the new session, kept: a new ticket starts the count again", got)
	}
	c.Put("d1", nil)
	if got, ok := c.Get("d1"); ok {
		t.Fatalf("after %d failures in a row: Get = %p, want the session dropped", SessionDropAfter, got)
	}
}
