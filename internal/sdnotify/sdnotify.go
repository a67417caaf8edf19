// Package sdnotify tells systemd about a daemon's state, the protocol of
// sd_notify(3): a datagram of newline-separated VAR=value assignments sent to
// the unix socket named by $NOTIFY_SOCKET. A unit with Type=notify starts
// dependent units only after READY=1, and shows STATUS= in systemctl status.
//
// Without $NOTIFY_SOCKET (not started by systemd, or not Type=notify) every
// call does nothing. Imported by agent/agentcmd,
// distributor/distributorcmd and cmd/lehr (the daemons' commands). It
// imports nothing of Lehr's.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// States understood by systemd.
const (
	// Ready says start-up is complete.
	Ready = "READY=1"
	// Stopping says the daemon is shutting down.
	Stopping = "STOPPING=1"
)

// EnvSocket is the environment variable naming the notification socket.
const EnvSocket = "NOTIFY_SOCKET"

// Notify sends state (for example Ready, or Ready+"\nSTATUS=serving") to the
// socket named by $NOTIFY_SOCKET. It returns false and no error when the
// variable is unset.
func Notify(state string) (sent bool, err error) {
	path := os.Getenv(EnvSocket)
	if path == "" {
		return false, nil
	}
	if err := Send(path, state); err != nil {
		return false, err
	}
	return true, nil
}

// Send sends state to the notification socket at path. A path starting
// with '@' names a Linux abstract socket, as systemd writes it.
func Send(path, state string) error {
	addr := path
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialTimeout("unixgram", addr, time.Second)
	if err != nil {
		return fmt.Errorf("sdnotify: dial %s: %w", path, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", path, err)
	}
	return nil
}
