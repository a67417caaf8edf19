package wire_test

import (
	"context"
	"crypto/tls"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	. "lehr.dev/lehr/internal/wire"
)

// BenchmarkHandshake measures one agent's connection to a distributor on
// loopback — the QUIC and mutual TLS 1.3 handshake, both ends in this
// process — which bounds how fast a reconnect storm converges. cpu-ns/op
// is the CPU both ends spent per handshake:
//
//	go test ./internal/wire -run '^$' -bench Handshake -benchtime 2s -count 3
func BenchmarkHandshake(b *testing.B) {
	for _, bc := range []struct {
		name   string
		curves []tls.CurveID // nil: Go's defaults (X25519MLKEM768 first)
		resume bool
	}{
		{name: "full"},
		{name: "full-x25519", curves: []tls.CurveID{tls.X25519}},
		{name: "resumed", resume: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pki := newTestPKI(b)
			pki.client.CurvePreferences = bc.curves
			var put chan struct{}
			if bc.resume {
				put = make(chan struct{}, 1)
				pki.client.ClientSessionCache = notifyingCache{pki.client.ClientSessionCache, put}
			} else {
				pki.client.ClientSessionCache = nil
			}
			addr := startListener(b, pki.server, func(ctx context.Context, conn *quic.Conn) {
				<-conn.Context().Done()
			})
			if bc.resume {
				// The first connection's session ticket arrives after
				// its handshake.
				conn, err := quic.DialAddr(context.Background(), addr, pki.client, ClientQUICConfig())
				if err != nil {
					b.Fatal(err)
				}
				<-put
				_ = conn.CloseWithError(CodeNoError, "")
			}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for b.Loop() {
				conn, err := quic.DialAddr(context.Background(), addr, pki.client, ClientQUICConfig())
				if err != nil {
					b.Fatal(err)
				}
				_ = conn.CloseWithError(CodeNoError, "")
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system: both
// ends of the handshakes.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// notifyingCache signals put after each session ticket stored.
type notifyingCache struct {
	tls.ClientSessionCache
	put chan struct{}
}

func (c notifyingCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	select {
	case c.put <- struct{}{}:
	default:
	}
}
