package fanout

import (
	"crypto/tls"
	"net"
	"os"
	"testing"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/internal/wire"
)

// TestListenQUICLeavesTheEnvironment: listenQUIC turns quic-go's GSO off
// through QUIC_GO_DISABLE_GSO for the transport's start only, and an
// operator's own setting of it is left as it was and decides.
func TestListenQUICLeavesTheEnvironment(t *testing.T) {
	listen := func(gso bool) {
		t.Helper()
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: udp}
		defer tr.Close()
		ln, err := listenQUIC(tr, wire.ServerTLSConfig(&tls.Config{}), wire.ServerQUICConfig(), gso)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	for _, gso := range []bool{false, true} {
		t.Setenv(gsoEnv, "") // restored after the test
		os.Unsetenv(gsoEnv)
		listen(gso)
		if v, set := os.LookupEnv(gsoEnv); set {
			t.Errorf("gso %v: %s=%q after Listen; want it unset, as before", gso, gsoEnv, v)
		}
		t.Setenv(gsoEnv, "false")
		listen(gso)
		if v := os.Getenv(gsoEnv); v != "false" {
			t.Errorf("gso %v: %s=%q after Listen; want the operator's %q", gso, gsoEnv, v, "false")
		}
	}
}
