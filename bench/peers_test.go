package bench

import (
	"context"
	"crypto/tls"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/testenv/wait"
)

// TestEtcdPeerTLS checks that the TLS etcd peer serves its own clients and
// refuses a client without a certificate and a plaintext client.
func TestEtcdPeerTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := startEtcdPeer(ctx, t.TempDir(), controltest.Logger(t, 8))
	if err != nil {
		t.Fatalf("startEtcdPeer: %v", err)
	}
	defer p.close()
	if got := p.transport(); got != TransportPeerTLS {
		t.Errorf("transport = %q, want %q", got, TransportPeerTLS)
	}
	if err := p.put(ctx, "/k", []byte("v")); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}
	noCert := p.pki.client.Clone()
	noCert.Certificates = nil
	for name, cfg := range map[string]clientv3.Config{
		"no client certificate": {Endpoints: []string{"https://" + p.addr()}, TLS: noCert},
		"plaintext":             {Endpoints: []string{"http://" + p.addr()}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.DialTimeout = 5 * time.Second
			cfg.Logger = zap.NewNop()
			c, err := clientv3.New(cfg)
			if err != nil {
				return // refused at dial: fine
			}
			defer c.Close()
			rctx, rcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer rcancel()
			if _, err := c.Get(rctx, "/k"); err == nil {
				t.Errorf("Get succeeded, want the server to refuse the connection")
			}
		})
	}
}

// TestEtcdPeerPlaintext checks that withPeerTLS(false) gives a plaintext
// peer.
func TestEtcdPeerPlaintext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := startEtcdPeer(withPeerTLS(ctx, false), t.TempDir(), controltest.Logger(t, 8))
	if err != nil {
		t.Fatalf("startEtcdPeer: %v", err)
	}
	defer p.close()
	if got := p.transport(); got != TransportPeerPlaintext {
		t.Errorf("transport = %q, want %q", got, TransportPeerPlaintext)
	}
	if err := p.put(ctx, "/k", []byte("v")); err != nil {
		t.Fatalf("put: %v", err)
	}
}

// TestNATSPeerTLSAndManyWatchers checks that the NATS peer requires TLS with
// a client certificate and accepts more KV watchers than nats-server's
// default per-stream limit of 1,000 consumers (all on one connection here,
// to keep the test fast; the limit is per stream, not per connection).
func TestNATSPeerTLSAndManyWatchers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server and creates 1,001 consumers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p, err := startNATSPeer(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("startNATSPeer: %v", err)
	}
	defer p.close()
	if got := p.transport(); got != TransportPeerTLS {
		t.Errorf("transport = %q, want %q", got, TransportPeerTLS)
	}
	if nc, err := nats.Connect("nats://"+p.addr(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Errorf("plaintext connect succeeded, want TLS required")
	}
	noCert := p.pki.client.Clone()
	noCert.Certificates = nil
	if nc, err := nats.Connect("nats://"+p.addr(), nats.Secure(noCert), nats.Timeout(5*time.Second)); err == nil {
		// The server may reject the handshake after the client considers it
		// done; a request proves whether it really was accepted.
		if _, ferr := nc.Request("$JS.API.INFO", nil, 3*time.Second); ferr == nil {
			t.Errorf("connection without a client certificate was served")
		}
		nc.Close()
	}
	if st, err := p.wconn.TLSConnectionState(); err != nil || st.Version != tls.VersionTLS13 || len(st.VerifiedChains) == 0 {
		t.Errorf("writer connection: TLS version %#x, verified chains %d, err %v; want TLS 1.3, verified", st.Version, len(st.VerifiedChains), err)
	}

	const watchers = 1001
	js, err := jetstream.New(p.wconn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, p.bucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range watchers {
		if _, err := kv.Watch(ctx, "bench.>", jetstream.UpdatesOnly()); err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
	}
	info, err := js.Stream(ctx, "KV_"+p.bucket)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Consumers; n < watchers {
		t.Errorf("stream has %d consumers, want >= %d", n, watchers)
	}
}

// TestNATSPeerCloseLeavesNoWatcher: closing the NATS peer ends every
// goroutine nats.go started for its watchers. nats.go waits on a watch's
// context in a goroutine of its own, which kept each watcher and its
// connection (32 KiB of buffers) reachable for the rest of the run when the
// context never ended: 27-40 MB of the bench process's heap at the 10,000-
// agent fan-out, from the peer runs before it.
func TestNATSPeerCloseLeavesNoWatcher(t *testing.T) {
	ctx := withPeerTLS(context.Background(), false)
	p, err := startNATSPeer(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("startNATSPeer: %v", err)
	}
	if err := p.subscribe(ctx, 20, p.addr(), "/bench/close/", func(int, string, uint64, time.Time) {}); err != nil {
		p.close()
		t.Fatalf("subscribe: %v", err)
	}
	if n := natsGoroutines(); n < 20 {
		t.Fatalf("%d nats.go goroutines with 20 watchers: the test no longer sees them", n)
	}
	p.close()
	wait.For(t, "no nats.go goroutine left after close", func() bool { return natsGoroutines() == 0 })
}

// natsGoroutines counts the goroutines running nats.go code.
func natsGoroutines() int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "github.com/nats-io/nats.go") {
			n++
		}
	}
	return n
}
