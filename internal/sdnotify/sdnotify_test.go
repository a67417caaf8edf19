package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen opens a datagram socket like systemd's and returns a func that
// reads one message.
func listen(t *testing.T, addr string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %q: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notification: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifyPathSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	read := listen(t, path)
	t.Setenv(EnvSocket, path)
	sent, err := Notify(Ready + "\nSTATUS=serving")
	if !sent || err != nil {
		t.Fatalf("Notify = %v, %v; want true, nil", sent, err)
	}
	if got, want := read(), "READY=1\nSTATUS=serving"; got != want {
		t.Errorf("received %q, want %q", got, want)
	}
	if _, err := Notify(Stopping); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != Stopping {
		t.Errorf("received %q, want %q", got, Stopping)
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := "lehr-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000")
	read := listen(t, "\x00"+name)
	t.Setenv(EnvSocket, "@"+name)
	if sent, err := Notify(Ready); !sent || err != nil {
		t.Fatalf("Notify = %v, %v; want true, nil", sent, err)
	}
	if got := read(); got != Ready {
		t.Errorf("received %q, want %q", got, Ready)
	}
}

func TestNotifyWithoutSystemd(t *testing.T) {
	t.Setenv(EnvSocket, "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("Notify without %s = %v, %v; want false, nil", EnvSocket, sent, err)
	}
}

func TestSendToMissingSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nobody-listens.sock")
	err := Send(path, Ready)
	if err == nil || !strings.Contains(err.Error(), "sdnotify: dial "+path) {
		t.Errorf("Send to a missing socket: err = %v, want one naming %s", err, path)
	}
}
