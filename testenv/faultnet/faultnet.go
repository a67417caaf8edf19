// Package faultnet is a fault-injecting UDP relay for tests and
// benchmarks: every datagram between clients and one target (QUIC between
// agents and a distributor) passes through it, and faults can be changed
// at any time, per direction — drop a fraction, delay with jitter (which
// reorders), duplicate a fraction, or cut the path entirely (a black hole:
// nothing passes, nothing is refused). It counts what passes.
//
// This kernel has no netem qdisc, so a lossy, slow or partitioned network
// is made here, in user space, on loopback. Each client address gets its
// own socket towards the target, so the target sees one peer per client,
// as without the relay. Random choices come from a seeded generator
// (Options.Seed), so a run can be repeated.
//
// Only tests, test harnesses and benchmarks import faultnet.
package faultnet

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction is a way through the relay.
type Direction int

const (
	// Up is client → target.
	Up Direction = 1 << iota
	// Down is target → client.
	Down
	// Both is either way.
	Both = Up | Down
)

// Faults is what happens to datagrams in one direction. The zero value
// passes everything at once.
type Faults struct {
	// Drop is the fraction of datagrams dropped, 0 to 1.
	Drop float64
	// Delay holds every datagram this long, plus a uniformly random extra
	// of up to Jitter; datagrams leave in order of their due time, so
	// jitter reorders them.
	Delay, Jitter time.Duration
	// Duplicate is the fraction of datagrams sent twice, 0 to 1.
	Duplicate float64
	// Cut drops everything (a black hole).
	Cut bool
}

// Options configures a Relay.
type Options struct {
	// Seed seeds the relay's random choices; zero means 1.
	Seed uint64
	// Listen is the relay's address; "" means "127.0.0.1:0".
	Listen string
}

// Stats counts datagrams per direction since the relay started.
type Stats struct {
	Up, Down Counts
}

// Counts counts one direction.
type Counts struct {
	Packets, Bytes, Dropped, Duplicated int64
}

// Relay is a running relay. Its methods are safe for concurrent use.
type Relay struct {
	pc     net.PacketConn
	target *net.UDPAddr
	wg     sync.WaitGroup
	up     *lane
	down   *lane

	mu      sync.Mutex
	clients map[string]*net.UDPConn
	closed  bool
}

// Listen starts a relay to target ("host:port", UDP).
func Listen(target string, opts Options) (*Relay, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("faultnet: target %s: %w", target, err)
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	pc, err := net.ListenPacket("udp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen %s: %w", opts.Listen, err)
	}
	setBuffers(pc.(*net.UDPConn))
	r := &Relay{pc: pc, target: ta, clients: map[string]*net.UDPConn{}}
	r.up = newLane(rand.New(rand.NewPCG(opts.Seed, 1)))
	r.down = newLane(rand.New(rand.NewPCG(opts.Seed, 2)))
	r.wg.Go(r.up.run)
	r.wg.Go(r.down.run)
	r.wg.Go(r.readClients)
	return r, nil
}

// Addr is the address clients dial instead of the target.
func (r *Relay) Addr() string { return r.pc.LocalAddr().String() }

// SetFaults sets the faults of the directions in dir; datagrams already
// held back by a delay keep their due time.
func (r *Relay) SetFaults(dir Direction, f Faults) {
	if dir&Up != 0 {
		r.up.set(f)
	}
	if dir&Down != 0 {
		r.down.set(f)
	}
}

// Cut black-holes the directions in dir (true) or lets them pass again
// with their other faults (false). Faults apply to a datagram when the
// relay reads it from its socket: one sent just before SetFaults or Cut
// and still in a socket buffer may be treated by the new faults. A test
// that must know waits on Stats (e.g. for Dropped to count it).
func (r *Relay) Cut(dir Direction, cut bool) {
	if dir&Up != 0 {
		r.up.setCut(cut)
	}
	if dir&Down != 0 {
		r.down.setCut(cut)
	}
}

// Stats returns the counters.
func (r *Relay) Stats() Stats { return Stats{Up: r.up.counts(), Down: r.down.counts()} }

// Close stops the relay and waits for its goroutines. It is idempotent.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	for _, c := range r.clients {
		c.Close()
	}
	r.mu.Unlock()
	r.pc.Close()
	r.up.stop()
	r.down.stop()
	r.wg.Wait()
	return nil
}

func (r *Relay) readClients() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		c, err := r.upstream(from)
		if err != nil {
			return
		}
		r.up.push(buf[:n], func(b []byte) { _, _ = c.Write(b) })
	}
}

// upstream returns the socket relaying client from's datagrams, creating
// it (and the goroutine reading the target's answers) on first use.
func (r *Relay) upstream(from net.Addr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("faultnet: closed")
	}
	if c, ok := r.clients[from.String()]; ok {
		return c, nil
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	setBuffers(c)
	r.clients[from.String()] = c
	r.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
					return
				}
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				// ICMP port unreachable while the target restarts: the
				// socket stays usable.
				continue
			}
			r.down.push(buf[:n], func(b []byte) { _, _ = r.pc.WriteTo(b, from) })
		}
	})
	return c, nil
}

// lane is one direction: its faults, counters and the queue of delayed
// datagrams.
type lane struct {
	mu     sync.Mutex
	rng    *rand.Rand
	faults Faults
	cnt    Counts
	queue  dueQueue
	seq    uint64
	wake   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func newLane(rng *rand.Rand) *lane {
	return &lane{rng: rng, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (l *lane) set(f Faults) {
	l.mu.Lock()
	l.faults = f
	l.mu.Unlock()
}

func (l *lane) setCut(cut bool) {
	l.mu.Lock()
	l.faults.Cut = cut
	l.mu.Unlock()
}

func (l *lane) counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cnt
}

func (l *lane) stop() { l.once.Do(func() { close(l.done) }) }

// push applies the faults to one datagram and sends it, now or when due.
// b is the caller's buffer: push copies it if it holds it back.
func (l *lane) push(b []byte, send func([]byte)) {
	l.mu.Lock()
	f := l.faults
	l.cnt.Packets++
	l.cnt.Bytes += int64(len(b))
	if f.Cut || (f.Drop > 0 && l.rng.Float64() < f.Drop) {
		l.cnt.Dropped++
		l.mu.Unlock()
		return
	}
	copies := 1
	if f.Duplicate > 0 && l.rng.Float64() < f.Duplicate {
		copies = 2
		l.cnt.Duplicated++
	}
	if f.Delay == 0 && f.Jitter == 0 {
		l.mu.Unlock()
		for range copies {
			send(b)
		}
		return
	}
	now := time.Now()
	b = append([]byte(nil), b...)
	for range copies {
		d := f.Delay
		if f.Jitter > 0 {
			d += time.Duration(l.rng.Int64N(int64(f.Jitter) + 1))
		}
		l.seq++
		heap.Push(&l.queue, &held{due: now.Add(d), seq: l.seq, b: b, send: send})
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run sends delayed datagrams when due.
func (l *lane) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		var next time.Duration = -1
		var due []*held
		now := time.Now()
		for l.queue.Len() > 0 {
			h := l.queue[0]
			if h.due.After(now) {
				next = h.due.Sub(now)
				break
			}
			due = append(due, heap.Pop(&l.queue).(*held))
		}
		l.mu.Unlock()
		for _, h := range due {
			h.send(h.b)
		}
		t.Stop()
		if next >= 0 {
			t.Reset(next)
		}
		select {
		case <-l.done:
			return
		case <-l.wake:
		case <-t.C:
		}
	}
}

type held struct {
	due  time.Time
	seq  uint64 // ties keep arrival order
	b    []byte
	send func([]byte)
}

type dueQueue []*held

func (q dueQueue) Len() int { return len(q) }
func (q dueQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q dueQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)   { *q = append(*q, x.(*held)) }
func (q *dueQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	*q = old[:len(old)-1]
	return h
}

// socketBuffer is the socket buffer size the relay asks for, as quic-go
// does for its own sockets (the kernel caps it at net.core.rmem_max and
// wmem_max). With the default (about 200 KiB) a relay facing thousands of
// clients drops packets itself and a test measures the relay.
const socketBuffer = 7 << 20

func setBuffers(c *net.UDPConn) {
	_ = c.SetReadBuffer(socketBuffer)
	_ = c.SetWriteBuffer(socketBuffer)
}
