package peercred

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
)

// peerOf reads the peer credentials of c (SO_PEERCRED).
func peerOf(c *net.UnixConn) (Info, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Info{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Info{}, err
	}
	if serr != nil {
		return Info{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Info{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, User: userName(cred.Uid)}, nil
}
