package bench

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"lehr.dev/lehr/testenv/faultnet"
)

// byteCounter counts bytes in each direction through a proxy: down is
// server → client, up is client → server. Counts are payload bytes of the
// transport (TCP stream bytes; UDP datagram payloads, i.e. whole QUIC
// packets with their headers and AEAD tags), not IP or link headers.
type byteCounter struct {
	down, up atomic.Int64
}

// snapshot returns the two counters.
func (c *byteCounter) snapshot() (down, up int64) { return c.down.Load(), c.up.Load() }

// tcpProxy is a counting TCP relay on loopback: every connection accepted
// on its address is relayed to target.
type tcpProxy struct {
	byteCounter
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// newTCPProxy listens on 127.0.0.1:0 and relays to target.
func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c) || !p.track(s) {
			c.Close()
			s.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(s, c, &p.up)
		go p.pipe(c, s, &p.down)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn, n *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	// Propagate the close both ways.
	dst.Close()
	src.Close()
}

// cut closes every relayed connection (both sides), keeping the listener:
// clients see their connection drop and may reconnect through the proxy.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// close stops the proxy and waits for its goroutines. Idempotent.
func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}

// relayBytes returns the bytes a QUIC relay passed each way: down is
// server → client, up client → server (UDP payloads, i.e. whole QUIC
// packets with their headers and AEAD tags). The benchmarks use
// testenv/faultnet with no faults as their counting UDP relay.
func relayBytes(r *faultnet.Relay) (down, up int64) {
	st := r.Stats()
	return st.Down.Bytes, st.Up.Bytes
}
