// Package peercred identifies the local caller of a gRPC server on a unix
// socket by the kernel's peer credentials (SO_PEERCRED): the user id of
// the process that connected, which it cannot choose. Control serves its
// local socket with Credentials, so a local caller is who its uid says —
// no certificate, no asserted name (docs/operations.md, "Security model").
//
// A leaf. Imported by control and control/service.
package peercred

import (
	"context"
	"fmt"
	"net"
	"os/user"
	"strconv"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Info is the AuthInfo of a connection on a unix socket: the peer
// process's credentials when it connected.
type Info struct {
	credentials.CommonAuthInfo
	UID, GID uint32
	PID      int32
	// User is the name of UID on this host, or "uid-<n>" when it has none.
	User string
}

// AuthType implements credentials.AuthInfo.
func (Info) AuthType() string { return "peercred" }

// String says who the peer is, e.g. "unix:uid=1000(alice),pid=4242".
func (i Info) String() string {
	return fmt.Sprintf("unix:uid=%d(%s),pid=%d", i.UID, i.User, i.PID)
}

// FromContext returns the peer credentials of the call in ctx; ok is false
// for a call that did not come over a unix socket served with Credentials.
func FromContext(ctx context.Context) (Info, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Info{}, false
	}
	i, ok := p.AuthInfo.(Info)
	return i, ok
}

// Credentials wraps a server's transport credentials (TLS, or insecure
// for plaintext): connections on a unix socket get Info instead of a
// handshake, every other connection the wrapped credentials' handshake.
type Credentials struct {
	credentials.TransportCredentials
}

// ServerHandshake implements credentials.TransportCredentials.
func (c Credentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return c.TransportCredentials.ServerHandshake(conn)
	}
	info, err := peerOf(uc)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("peercred: %w", err)
	}
	return conn, info, nil
}

// Clone implements credentials.TransportCredentials.
func (c Credentials) Clone() credentials.TransportCredentials {
	return Credentials{c.TransportCredentials.Clone()}
}

// userName returns the name of uid, or "uid-<n>".
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid-" + id
}
