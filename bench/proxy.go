package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
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

// udpProxy is a counting UDP relay on loopback for QUIC: each client
// address gets its own upstream socket to target.
type udpProxy struct {
	byteCounter
	pc     net.PacketConn
	target *net.UDPAddr
	wg     sync.WaitGroup

	mu      sync.Mutex
	clients map[string]*net.UDPConn
	closed  bool
}

// newUDPProxy listens on 127.0.0.1:0 and relays datagrams to target.
func newUDPProxy(target string) (*udpProxy, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("proxy target %s: %w", target, err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	setUDPBuffers(pc.(*net.UDPConn))
	p := &udpProxy{pc: pc, target: ta, clients: map[string]*net.UDPConn{}}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

func (p *udpProxy) addr() string { return p.pc.LocalAddr().String() }

func (p *udpProxy) run() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		p.up.Add(int64(n))
		up, err := p.upstream(from)
		if err != nil {
			return
		}
		_, _ = up.Write(buf[:n])
	}
}

// upstream returns the socket relaying client from's datagrams, creating
// it (and its reverse relay) on first use.
func (p *udpProxy) upstream(from net.Addr) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("closed")
	}
	if c, ok := p.clients[from.String()]; ok {
		return c, nil
	}
	c, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil, err
	}
	setUDPBuffers(c)
	p.clients[from.String()] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
					return
				}
				// ICMP port unreachable while the target restarts: keep going.
				time.Sleep(time.Millisecond)
				continue
			}
			p.down.Add(int64(n))
			_, _ = p.pc.WriteTo(buf[:n], from)
		}
	}()
	return c, nil
}

// udpRelayBuffer is the socket buffer size the UDP relay asks for, as
// quic-go does for its own sockets (the kernel caps it at
// net.core.rmem_max / wmem_max, which scripts/bench.sh raises). With the
// default buffer (about 200 KiB) the relay's one socket facing every
// client dropped hundreds of thousands of packets in a 10,000-agent
// reconnect storm, and the storm measured the relay, not the distributor.
const udpRelayBuffer = 7 << 20

func setUDPBuffers(c *net.UDPConn) {
	_ = c.SetReadBuffer(udpRelayBuffer)
	_ = c.SetWriteBuffer(udpRelayBuffer)
}

// close stops the proxy and waits for its goroutines. Idempotent.
func (p *udpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for _, c := range p.clients {
		c.Close()
	}
	p.mu.Unlock()
	p.pc.Close()
	p.wg.Wait()
}
