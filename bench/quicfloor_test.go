package bench

// The floor of the fair race (issue 34 §2): what quic-go alone costs a
// server core per delivery, with nothing of Lehr's between the
// application and the socket. Lehr's distributor is measured against it.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/testenv/cpupin"
)

// floorClientEnv, set in a child of the test binary, makes
// TestQUICFloorClients the floor's clients: "addr n cadir".
const floorClientEnv = "LEHR_QUICFLOOR_CLIENTS"

// floorPayload is the size of each delivery: the fair race's change is
// one 1 KiB value.
const floorPayload = 1 << 10

// BenchmarkQUICFloor pushes a 1 KiB message to each of N QUIC connections
// (mutual TLS 1.3, Lehr's QUIC configurations) and waits for every
// receiver's 16-byte acknowledgement — Lehr's delivery with nothing of
// Lehr's in it: each message on a unidirectional stream of its own
// (opened, written, closed, as wire.SendUpdate does), each acknowledgement
// on the one bidirectional stream the receiver opened (as an agent's Ack on
// its control stream). The server is this process, pinned to one CPU with
// GOMAXPROCS=1; the receivers are a child process pinned to another, as
// in the fair race. server-cpu-µs/delivery is this process's CPU (user +
// system, getrusage) per message delivered and acknowledged: the floor
// under which no QUIC server on quic-go delivers. Senders: "per-conn" has
// a goroutine per connection woken for each round (as a distributor's
// sessions); "one" writes every connection's stream from one goroutine.
//
//	go test ./bench -run '^$' -bench QUICFloor -benchtime 100x -count 3
func BenchmarkQUICFloor(b *testing.B) {
	allowed, err := cpupin.Allowed(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	if len(allowed) < 2 {
		b.Skipf("needs 2 CPUs, this process may use %s", allowed)
	}
	for _, n := range []int{100, 1000} {
		for _, sender := range []string{"per-conn", "one"} {
			b.Run(fmt.Sprintf("N=%d/sender=%s", n, sender), func(b *testing.B) {
				benchQUICFloor(b, allowed[:1], allowed[1:2], n, sender == "one")
			})
		}
	}
}

func benchQUICFloor(b *testing.B, serverCPU, clientCPU cpupin.Set, n int, oneSender bool) {
	dir := b.TempDir()
	ca, err := pki.NewCA(dir, "quicfloor-CA", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("server", pki.Server, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	srvTLS := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), NextProtos: []string{wire.ALPN}}
	ln, err := quic.ListenAddr("127.0.0.1:0", srvTLS, wire.ServerQUICConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()

	bin, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	wbin, wargs, err := cpupin.Wrap(clientCPU, bin, []string{"-test.run=^TestQUICFloorClients$", "-test.count=1"})
	if err != nil {
		b.Fatal(err)
	}
	child := exec.Command(wbin, wargs...)
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", floorClientEnv, ln.Addr(), n, dir))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()

	// Accept every connection and its acknowledgement stream.
	type peer struct {
		conn *quic.Conn
		acks *quic.Stream
		go_  chan struct{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	peers := make([]*peer, 0, n)
	for len(peers) < n {
		conn, err := ln.Accept(ctx)
		if err != nil {
			b.Fatalf("accept %d of %d: %v", len(peers), n, err)
		}
		s, err := conn.AcceptStream(ctx)
		if err != nil {
			b.Fatalf("accept the acknowledgement stream: %v", err)
		}
		if _, err := io.ReadFull(s, make([]byte, 16)); err != nil {
			b.Fatalf("read the receiver's hello: %v", err)
		}
		peers = append(peers, &peer{conn: conn, acks: s, go_: make(chan struct{}, 1)})
	}

	restore, err := cpupin.Process(os.Getpid(), serverCPU)
	if err != nil {
		b.Fatal(err)
	}
	defer restore()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	payload := make([]byte, floorPayload)
	var acked atomic.Int64
	round := make(chan struct{}, 1)
	var wg sync.WaitGroup
	fail := make(chan error, 1)
	report := func(err error) {
		select {
		case fail <- err:
		default:
		}
	}
	send := func(c *quic.Conn) {
		s, err := c.OpenUniStreamSync(ctx)
		if err != nil {
			report(err)
			return
		}
		if _, err := s.Write(payload); err != nil {
			report(err)
			return
		}
		if err := s.Close(); err != nil {
			report(err)
		}
	}
	for _, p := range peers {
		wg.Add(1)
		go func() { // read acknowledgements
			defer wg.Done()
			var ack [16]byte
			for {
				if _, err := io.ReadFull(p.acks, ack[:]); err != nil {
					return
				}
				if acked.Add(1)%int64(n) == 0 {
					round <- struct{}{}
				}
			}
		}()
		if !oneSender {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-p.go_:
						send(p.conn)
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
	cpu0 := rusageCPU(b)
	b.ResetTimer()
	for b.Loop() {
		for _, p := range peers {
			if oneSender {
				send(p.conn)
			} else {
				p.go_ <- struct{}{}
			}
		}
		select {
		case <-round:
		case err := <-fail:
			b.Fatal(err)
		case <-ctx.Done():
			b.Fatalf("round not acknowledged: %d of %d acknowledgements", acked.Load()%int64(n), n)
		}
	}
	b.StopTimer()
	cpu := rusageCPU(b) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "server-cpu-µs/delivery")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/round")
	b.ReportMetric(0, "ns/op")
	for _, p := range peers {
		p.conn.CloseWithError(0, "")
	}
	cancel()
	wg.Wait()
}

// rusageCPU is this process's CPU time, user and system.
func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestQUICFloorClients is BenchmarkQUICFloor's receivers, in a child
// process (floorClientEnv); otherwise it is skipped. Each of N connections
// opens its acknowledgement stream, then reads every unidirectional
// stream to its end and acknowledges it with 16 bytes.
func TestQUICFloorClients(t *testing.T) {
	spec := os.Getenv(floorClientEnv)
	if spec == "" {
		t.Skip("the receivers of BenchmarkQUICFloor, run by it")
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		t.Fatalf("%s=%q: want addr n cadir", floorClientEnv, spec)
	}
	addr, dir := f[0], f[2]
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("client", pki.Client, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cliTLS := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool,
		ServerName: "127.0.0.1", NextProtos: []string{wire.ALPN}}
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		var conn *quic.Conn
		for attempt := 0; ; attempt++ {
			conn, err = quic.DialAddr(ctx, addr, cliTLS, wire.ClientQUICConfig())
			if err == nil || attempt == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		acks, err := conn.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A stream reaches the server with its first bytes: a hello.
		if _, err := acks.Write(make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var mu sync.Mutex
			var seq uint64
			for {
				s, err := conn.AcceptUniStream(ctx)
				if err != nil {
					errc <- err
					return
				}
				go func() {
					if _, err := io.Copy(io.Discard, s); err != nil {
						errc <- err
						return
					}
					var ack [16]byte
					mu.Lock()
					seq++
					binary.BigEndian.PutUint64(ack[:], seq)
					_, err := acks.Write(ack[:])
					mu.Unlock()
					if err != nil {
						errc <- err
					}
				}()
			}
		})
	}
	// Runs until the benchmark closes the connections (or kills this
	// process).
	wg.Wait()
	if err := <-errc; err != nil && !errors.As(err, new(*quic.ApplicationError)) {
		t.Log(err)
	}
}
