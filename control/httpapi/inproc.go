package httpapi

import (
	"context"
	"crypto/tls"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// The in-process transport. For each HTTP connection the gateway dials
// control's gRPC server through a Listener: a net.Pipe whose server end
// (a *serverConn) carries the HTTP connection's addresses and the
// AuthInfo its caller is known by. Control's gRPC server serves the
// Listener with Credentials, which hands that AuthInfo to gRPC in place of
// a handshake; so the peer every interceptor and handler reads (peer.FromContext)
// is the HTTP caller, known by what its HTTP connection verified. Only
// Listener.dial makes a serverConn, and only the Server's dialer calls it:
// no byte a client sends can make one.

// Listener is the in-process listener control's gRPC server serves the
// gateway's connections on. It listens on no socket.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func newListener(addr net.Addr) *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Accept waits for the gateway's next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; dials fail from then on. It is idempotent (the gRPC
// server closes the listeners it serves when it stops).
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns the HTTP listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }

// dial connects to whoever Accepts, as the caller of an HTTP connection
// from remote to local known by info.
func (l *Listener) dial(ctx context.Context, remote, local net.Addr, info credentials.AuthInfo) (net.Conn, error) {
	client, server := net.Pipe()
	sc := &serverConn{Conn: server, remote: remote, local: local, info: info}
	select {
	case l.conns <- sc:
		return &addrConn{Conn: client, local: remote, remote: local}, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// addrConn is a pipe end with the addresses of the connection it stands
// for.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *addrConn) LocalAddr() net.Addr  { return c.local }
func (c *addrConn) RemoteAddr() net.Addr { return c.remote }

// serverConn is the gRPC server's end of an in-process connection: its
// RemoteAddr is the HTTP caller's address, and info who the caller is.
type serverConn struct {
	net.Conn
	local, remote net.Addr
	info          credentials.AuthInfo
}

func (c *serverConn) LocalAddr() net.Addr  { return c.local }
func (c *serverConn) RemoteAddr() net.Addr { return c.remote }

// Credentials wraps control's gRPC server credentials: a connection from
// the gateway's Listener is its HTTP caller (serverConn.info) without a
// handshake; every other connection gets the wrapped credentials'
// handshake.
type Credentials struct {
	credentials.TransportCredentials
}

// ServerHandshake implements credentials.TransportCredentials.
func (c Credentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if sc, ok := conn.(*serverConn); ok {
		return sc, sc.info, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

// Clone implements credentials.TransportCredentials.
func (c Credentials) Clone() credentials.TransportCredentials {
	return Credentials{c.TransportCredentials.Clone()}
}

// authInfo is how gRPC knows the caller of an HTTP connection: over TLS
// the connection's state, with the client certificate chains crypto/tls
// verified (what gRPC's TLS credentials give for a gRPC connection);
// plaintext, nothing (as gRPC's insecure credentials).
func authInfo(state *tls.ConnectionState) credentials.AuthInfo {
	if state == nil {
		return plaintext{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	}
	return credentials.TLSInfo{State: *state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

// plaintext is the AuthInfo of a plaintext HTTP connection.
type plaintext struct{ credentials.CommonAuthInfo }

func (plaintext) AuthType() string { return "insecure" }
