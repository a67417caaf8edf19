package bench

// The swarm: simulated agents (distributor/agenttest) in a child process, so
// that the process running the distributor measures only the distributor
// (and control): its CPU time, RSS and profiles are not mixed with ten
// thousand QUIC clients'.
//
// The parent starts its own executable with SwarmEnv=1 and talks JSON lines:
// it writes a swarmConfig, then commands ("redial", "stats", "quit"), one
// per line, to the child's stdin; the child writes swarmEvents to stdout.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/testenv/cpupin"
)

// SwarmEnv is the environment variable that turns a lehr-bench (or bench
// test) process into a swarm child: main must call SwarmMain when it is
// "1".
const SwarmEnv = "LEHR_BENCH_SWARM"

// SwarmCPUProfileEnv, when set, makes each swarm child write a CPU profile
// of its run to the variable's value followed by "-" and its process ID.
const SwarmCPUProfileEnv = "LEHR_BENCH_SWARM_CPUPROFILE"

// swarmConfig is the first line the parent sends.
type swarmConfig struct {
	Addr   string   `json:"addr"`   // distributor UDP address
	CADir  string   `json:"ca_dir"` // CA directory (pki.LoadCA) signing host certificates
	N      int      `json:"n"`      // agents
	Prefix string   `json:"prefix"` // host ids are Prefix-<i>
	Zone   string   `json:"zone"`
	Subs   []string `json:"subs"`
	// Parallel bounds concurrent dials at start; after "redial" each agent
	// waits its redial delay (upstream.RedialDelay).
	Parallel int `json:"parallel"`
	// DialAttempts is how many times an agent's first connection is tried
	// (a distributor refuses handshakes beyond its admission bound, as a
	// real agent finds and redials after); default 3.
	DialAttempts int `json:"dial_attempts,omitempty"`
	// ConnectTimeout bounds the wait for every agent's first connection
	// (the parent's; default 10 minutes).
	ConnectTimeout time.Duration `json:"-"`
	// RedialTimeout bounds the wait for every agent to be connected again
	// after "redial"; default 5 minutes.
	RedialTimeout time.Duration `json:"redial_timeout,omitempty"`
	// Keep makes the agents connected at the start redial a lost
	// connection as the real agent does (the fan-out). Without it they
	// stay down until "redial" (the storm, which times every agent's
	// reconnection from one moment: agents redialing on their own while
	// the distributor restarts would be an unmeasured storm before it).
	Keep bool `json:"keep,omitempty"`
	// CountBytes makes every agent dial over a socket of the swarm's that
	// counts the UDP bytes it sends and receives (stats: WireIn, WireOut):
	// the storm's wire cost, measured where the agents are, with no relay
	// in the distributor's process.
	CountBytes bool `json:"count_bytes,omitempty"`
	// SilenceTimeout is every agent's silence timeout (0: the agent's
	// default); see Env.AgentSilenceTimeout.
	SilenceTimeout time.Duration `json:"silence_timeout,omitempty"`
	// AgentSubs, if set, are agent i's subscriptions (AgentSubs[i])
	// instead of Subs.
	AgentSubs [][]string `json:"agent_subs,omitempty"`
	// DropContent makes the agents keep the versions they apply but not
	// their content (agenttest.Options.DropContent).
	DropContent bool `json:"drop_content,omitempty"`
	// Watch, if set, makes the child run N watchers of a peer (etcd or
	// NATS) instead of agents (the fair race): each change a watcher
	// sees is an "applied" event with I its index, NS the key and Version
	// the value's sequence (seqOf). Only "stats" (Alive: N) and "quit"
	// are answered then.
	Watch *watchConfig `json:"watch,omitempty"`
	// CPUs, if not empty, are the only CPUs the child runs on (the
	// parent's; cpupin.Wrap).
	CPUs cpupin.Set `json:"-"`
}

// swarmEvent is one line the child writes.
type swarmEvent struct {
	Ev string `json:"ev"` // connected, applied, redialed, stats, error
	// connected, redialed:
	Connected int    `json:"connected,omitempty"`
	Failed    int    `json:"failed,omitempty"`
	Err       string `json:"err,omitempty"`
	ElapsedNS int64  `json:"elapsed_ns,omitempty"`
	// redialed, stats: failed connection attempts since the swarm started
	// or its last "redial" (each followed by a backoff), and connections
	// lost after their Welcome (each redialed) since then.
	Retries int `json:"retries,omitempty"`
	Lost    int `json:"lost,omitempty"`
	// applied:
	I        int    `json:"i,omitempty"`
	NS       string `json:"ns,omitempty"`
	Version  uint64 `json:"v,omitempty"`
	Snapshot bool   `json:"snap,omitempty"`
	Bytes    int    `json:"bytes,omitempty"`
	T        int64  `json:"t,omitempty"` // unix ns when the child saw it applied
	Refused  bool   `json:"refused,omitempty"`
	// stats (sums over agents of agenttest.Stats, current connections only):
	Stats *agenttest.Stats `json:"stats,omitempty"`
	Alive int              `json:"alive,omitempty"`
	// Ended counts the agents whose connection has ended, by the error
	// it ended with; LostBy counts the connections counted in Lost
	// likewise.
	Ended  map[string]int `json:"ended,omitempty"`
	LostBy map[string]int `json:"lost_by,omitempty"`
	// WireIn and WireOut are the UDP payload bytes every agent received
	// and sent since the swarm started (cfg.CountBytes).
	WireIn  int64 `json:"wire_in,omitempty"`
	WireOut int64 `json:"wire_out,omitempty"`
}

// SwarmMain runs the swarm child on stdin and stdout and exits the
// process. Call it from main (or TestMain) when os.Getenv(SwarmEnv) is "1".
func SwarmMain() {
	if err := swarmMain(); err != nil {
		fmt.Fprintln(os.Stderr, "swarm:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func swarmMain() error {
	if path := os.Getenv(SwarmCPUProfileEnv); path != "" {
		p, err := startCPUProfileFile(fmt.Sprintf("%s-%d", path, os.Getpid()))
		if err != nil {
			return err
		}
		defer p.stop()
	}
	return runSwarm(os.Stdin, os.Stdout)
}

type swarmChild struct {
	cfg  swarmConfig
	ca   *pki.CA
	tls  []*tls.Config
	log  *slog.Logger
	out  chan swarmEvent
	ctx  context.Context
	stop context.CancelFunc

	// keepCtx ends the redial loops (see keep); it is cancelled before the
	// agents are closed, so that closing them is not mistaken for a lost
	// connection.
	keepCtx  context.Context
	stopKeep context.CancelFunc
	retries  atomic.Int64
	lost     atomic.Int64
	// wireIn and wireOut count the agents' UDP bytes (cfg.CountBytes).
	wireIn, wireOut atomic.Int64

	mu     sync.Mutex
	agents []*agenttest.Agent
	// owner is, per agent, the number of the keep loop that runs it; a
	// loop whose number is no longer there stops (redialAll takes every
	// agent over).
	owner []int
	// lostBy counts the connections lost after their Welcome by the error
	// they ended with.
	lostBy map[string]int
	wg     sync.WaitGroup
}

func runSwarm(in io.Reader, out io.Writer) error {
	rd := bufio.NewReader(in)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var cfg swarmConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if cfg.Watch != nil {
		return runWatchers(cfg, rd, out)
	}
	ca, err := pki.LoadCA(cfg.CADir)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	keepCtx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	s := &swarmChild{
		cfg: cfg, ca: ca, ctx: ctx, stop: stop, keepCtx: keepCtx, stopKeep: stopKeep,
		log:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		out:    make(chan swarmEvent, 4096),
		agents: make([]*agenttest.Agent, cfg.N),
		owner:  make([]int, cfg.N),
		lostBy: map[string]int{},
		tls:    make([]*tls.Config, cfg.N),
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		bw := bufio.NewWriterSize(out, 64<<10)
		enc := json.NewEncoder(bw)
		for ev := range s.out {
			enc.Encode(ev)
			if len(s.out) == 0 {
				bw.Flush()
			}
		}
		bw.Flush()
	}()
	defer func() {
		close(s.out)
		<-writerDone
	}()
	// Certificates first, so dial timings do not include key generation.
	for i := range cfg.N {
		host := fmt.Sprintf("%s-%d", cfg.Prefix, i)
		c, k, err := ca.IssueURI(host, pki.Client, nil, tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: cfg.Zone, Name: host}.URI(), 24*time.Hour)
		if err != nil {
			return err
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			return err
		}
		// Made once per agent, as the real agent makes it once
		// (agent/upstream): its TLS session cache lives across redials.
		s.tls[i] = wire.ClientTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	}
	s.dialAll(max(cfg.Parallel, 1))
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		switch cmd := line[:len(line)-1]; cmd {
		case "redial":
			s.redialAll()
		case "stats":
			s.out <- s.stats()
		case "quit":
			s.closeAll()
			return nil
		default:
			s.out <- swarmEvent{Ev: "error", Err: "unknown command " + cmd}
		}
	}
	s.closeAll()
	return nil
}

// dial connects agent i announcing held, over a counting socket of its
// own with cfg.CountBytes (closed once the connection ended).
func (s *swarmChild) dial(ctx context.Context, i int, held []agenttest.Cached) (*agenttest.Agent, error) {
	subs := s.cfg.Subs
	if i < len(s.cfg.AgentSubs) {
		subs = s.cfg.AgentSubs[i]
	}
	opts := agenttest.Options{
		Addr: s.cfg.Addr, TLS: s.tls[i], HostID: fmt.Sprintf("%s-%d", s.cfg.Prefix, i), Zone: s.cfg.Zone,
		Subscriptions: subs, Cached: held, Logger: s.log, SilenceTimeout: s.cfg.SilenceTimeout,
		DropContent: s.cfg.DropContent,
	}
	if !s.cfg.CountBytes {
		return agenttest.Dial(ctx, opts)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	opts.PacketConn = &countingConn{udp: pc, in: &s.wireIn, out: &s.wireOut}
	a, err := agenttest.Dial(ctx, opts)
	if err != nil {
		pc.Close()
		return nil, err
	}
	go func() {
		<-a.Done()
		pc.Close()
	}()
	return a, nil
}

// countingConn counts the bytes a UDP socket sends and receives. It offers
// quic-go the socket's buffer sizes (SetReadBuffer, SetWriteBuffer,
// SyscallConn), which quic-go raises as for the real agent's socket, but
// not its batch and ancillary-data calls, so quic-go reads and writes one
// packet at a time through ReadFrom and WriteTo, where they are counted.
type countingConn struct {
	udp     *net.UDPConn
	in, out *atomic.Int64
}

func (c *countingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.udp.ReadFrom(p)
	c.in.Add(int64(n))
	return n, addr, err
}

func (c *countingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.udp.WriteTo(p, addr)
	c.out.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error                       { return c.udp.Close() }
func (c *countingConn) LocalAddr() net.Addr                { return c.udp.LocalAddr() }
func (c *countingConn) SetDeadline(t time.Time) error      { return c.udp.SetDeadline(t) }
func (c *countingConn) SetReadDeadline(t time.Time) error  { return c.udp.SetReadDeadline(t) }
func (c *countingConn) SetWriteDeadline(t time.Time) error { return c.udp.SetWriteDeadline(t) }
func (c *countingConn) SetReadBuffer(n int) error          { return c.udp.SetReadBuffer(n) }
func (c *countingConn) SetWriteBuffer(n int) error         { return c.udp.SetWriteBuffer(n) }
func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	return c.udp.SyscallConn()
}

// dialAll connects every agent, parallel at a time, and reports
// "connected". Each agent is tried up to cfg.DialAttempts times, waiting a
// little longer after each refusal; once connected, with
// cfg.Keep, it is kept as the real agent keeps its connection (see keep):
// redialed when the connection ends, announcing what it held.
func (s *swarmChild) dialAll(parallel int) {
	start := time.Now()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed, firstErr := 0, ""
	for i := range s.cfg.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			for attempt := range max(s.cfg.DialAttempts, 3) {
				if attempt > 0 {
					time.Sleep(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second))
				}
				var a *agenttest.Agent
				ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
				a, err = s.dial(ctx, i, nil)
				cancel()
				if err == nil {
					s.mu.Lock()
					s.owner[i]++
					me := s.owner[i]
					s.agents[i] = a
					s.mu.Unlock()
					if s.cfg.Keep {
						s.wg.Go(func() { s.keep(i, me, a, nil, func() {}, func(error) {}) })
					} else {
						s.wg.Go(func() { s.follow(i, a) })
					}
					return
				}
			}
			mu.Lock()
			failed++
			if firstErr == "" {
				firstErr = err.Error()
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	s.out <- swarmEvent{Ev: "connected", Connected: s.cfg.N - failed, Failed: failed, Err: firstErr, ElapsedNS: time.Since(start).Nanoseconds()}
}

// Reconnection of the swarm's agents after "redial" mirrors the real
// agent's (agent/upstream): each connection attempt, Dial through Welcome,
// is bounded by the handshake timeout; a failed attempt is followed by a
// wait drawn uniformly from [0, min(max, min·2^attempt)] ("full jitter");
// a connection lost after its Welcome is redialed after
// upstream.RedialDelay of the redial spread the distributor advised,
// announcing what the lost connection held.
const (
	swarmBackoffMin       = upstream.DefaultBackoffMin
	swarmBackoffMax       = upstream.DefaultBackoffMax
	swarmHandshakeTimeout = upstream.DefaultHandshakeTimeout
)

// redialAll kills every agent's connection at once (as a distributor
// restart does) and has each redial as the real agent would — after
// upstream.RedialDelay of its advised spread — announcing what it held, and keep redialing like a real agent until
// the swarm quits (see keep). It reports "redialed" once every agent has
// been welcomed again, or after cfg.RedialTimeout with the agents that
// have not counted as failed.
func (s *swarmChild) redialAll() {
	start := time.Now()
	s.retries.Store(0)
	s.lost.Store(0)
	s.mu.Lock()
	clear(s.lostBy)
	s.mu.Unlock()
	var connected atomic.Int64
	all := make(chan struct{})
	var errMu sync.Mutex
	firstErr := ""
	for i := range s.cfg.N {
		s.wg.Go(func() {
			s.mu.Lock()
			s.owner[i]++
			me := s.owner[i]
			prev := s.agents[i]
			s.mu.Unlock()
			var held []agenttest.Cached
			if prev != nil {
				held = prev.Cached()
				prev.Kill()
				// The agent lost its connection: it waits as the real
				// agent does before its first redial.
				spread, _ := prev.RedialSpread()
				if !backoff.Sleep(s.keepCtx, upstream.RedialDelay(prev.Err(), spread, swarmBackoff(0))) {
					return
				}
			}
			s.keep(i, me, nil, held, func() {
				if connected.Add(1) == int64(s.cfg.N) {
					close(all)
				}
			}, func(err error) {
				errMu.Lock()
				if firstErr == "" {
					firstErr = err.Error()
				}
				errMu.Unlock()
			})
		})
	}
	timeout := s.cfg.RedialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-all:
	case <-t.C:
	case <-s.keepCtx.Done():
	}
	n := int(connected.Load())
	errMu.Lock()
	defer errMu.Unlock()
	s.out <- swarmEvent{Ev: "redialed", Connected: n, Failed: s.cfg.N - n, Err: firstErr, ElapsedNS: time.Since(start).Nanoseconds(),
		Retries: int(s.retries.Load()), Lost: int(s.lost.Load())}
}

// keep runs agent i until the swarm quits or another keep takes the agent
// over (owner[i] is no longer me): it follows a, the agent's connection,
// if a is not nil, else dials announcing held; and it redials with
// backoff whenever an attempt fails or the connection ends, announcing
// what the lost connection held. A loop taken over stops before its next
// attempt, and kills the connection of an attempt that succeeded after
// the takeover. welcomed is called after the first successful dial,
// failed after every failed attempt.
func (s *swarmChild) keep(i, me int, a *agenttest.Agent, held []agenttest.Cached, welcomed func(), failed func(error)) {
	first := true
	attempt := 0
	for s.keepCtx.Err() == nil {
		if a == nil {
			s.mu.Lock()
			mine := s.owner[i] == me
			s.mu.Unlock()
			if !mine {
				return
			}
			ctx, cancel := context.WithTimeout(s.keepCtx, swarmHandshakeTimeout)
			var err error
			a, err = s.dial(ctx, i, held)
			cancel()
			if err != nil {
				if s.keepCtx.Err() != nil {
					return
				}
				s.retries.Add(1)
				failed(err)
				if !backoff.Sleep(s.keepCtx, swarmBackoff(attempt)) {
					return
				}
				attempt = min(attempt+1, 30)
				continue
			}
			s.mu.Lock()
			if s.owner[i] != me {
				s.mu.Unlock()
				a.Kill()
				return
			}
			s.agents[i] = a
			s.mu.Unlock()
			if s.keepCtx.Err() != nil {
				// closeAll may have missed it.
				a.Close()
				return
			}
			if first {
				first = false
				welcomed()
			}
		}
		attempt = 0
		s.follow(i, a)
		s.mu.Lock()
		mine := s.owner[i] == me
		s.mu.Unlock()
		if s.keepCtx.Err() != nil || !mine {
			return
		}
		s.lost.Add(1)
		reason := "<nil>"
		if err := a.Err(); err != nil {
			reason = err.Error()
		}
		s.mu.Lock()
		s.lostBy[reason]++
		s.mu.Unlock()
		held = a.Cached()
		spread, _ := a.RedialSpread()
		cause := a.Err()
		a = nil
		if !backoff.Sleep(s.keepCtx, upstream.RedialDelay(cause, spread, swarmBackoff(0))) {
			return
		}
	}
}

// swarmBackoff returns a wait drawn uniformly from
// [0, min(swarmBackoffMax, swarmBackoffMin·2^attempt)], as agent/upstream
// does.
func swarmBackoff(attempt int) time.Duration {
	return backoff.Policy{Min: swarmBackoffMin, Max: swarmBackoffMax}.Full(attempt)
}

// follow reports every update agent i applies until its connection ends
// or the swarm stops.
func (s *swarmChild) follow(i int, a *agenttest.Agent) {
	seen := 0
	for {
		var recs []agenttest.Applied
		err := a.Wait(s.ctx, func(a *agenttest.Agent) bool {
			if recs = a.AppliedFrom(seen); len(recs) > 0 {
				return true
			}
			select {
			case <-a.Done():
				return true
			default:
				return false
			}
		})
		now := time.Now().UnixNano()
		for _, r := range recs {
			s.out <- swarmEvent{Ev: "applied", I: i, NS: r.Namespace, Version: r.Version, Snapshot: r.Snapshot, Bytes: r.Bytes, T: now, Refused: r.Err != nil}
		}
		seen += len(recs)
		if err != nil {
			return
		}
		select {
		case <-a.Done():
			return
		default:
		}
	}
}

func (s *swarmChild) stats() swarmEvent {
	s.mu.Lock()
	agents := append([]*agenttest.Agent(nil), s.agents...)
	lostBy := maps.Clone(s.lostBy)
	s.mu.Unlock()
	var sum agenttest.Stats
	alive := 0
	var ended map[string]int
	for _, a := range agents {
		if a == nil {
			continue
		}
		select {
		case <-a.Done():
			if ended == nil {
				ended = map[string]int{}
			}
			reason := "<nil>"
			if err := a.Err(); err != nil {
				reason = err.Error()
			}
			ended[reason]++
		default:
			alive++
		}
		st := a.Stats()
		sum.Updates += st.Updates
		sum.Snapshots += st.Snapshots
		sum.Patches += st.Patches
		sum.Refused += st.Refused
		sum.SnapshotBytes += st.SnapshotBytes
		sum.PatchBytes += st.PatchBytes
		sum.Unavailable += st.Unavailable
	}
	return swarmEvent{Ev: "stats", Stats: &sum, Alive: alive, Ended: ended, LostBy: lostBy, Retries: int(s.retries.Load()), Lost: int(s.lost.Load()),
		WireIn: s.wireIn.Load(), WireOut: s.wireOut.Load()}
}

func (s *swarmChild) closeAll() {
	s.stopKeep()
	s.mu.Lock()
	agents := append([]*agenttest.Agent(nil), s.agents...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, a := range agents {
		if a == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a.Close()
		})
	}
	wg.Wait()
	s.stop()
	s.wg.Wait()
}

// runWatchers runs cfg.N watchers of the peer cfg.Watch names, reporting
// what they see, until "quit" or the end of in.
func runWatchers(cfg swarmConfig, rd *bufio.Reader, out io.Writer) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr, err := watchClient(ctx, *cfg.Watch)
	if err != nil {
		return err
	}
	events := make(chan swarmEvent, 4096)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		bw := bufio.NewWriterSize(out, 64<<10)
		enc := json.NewEncoder(bw)
		for ev := range events {
			enc.Encode(ev)
			if len(events) == 0 {
				bw.Flush()
			}
		}
		bw.Flush()
	}()
	var closed atomic.Bool
	var mu sync.RWMutex // held to send; taken for writing once to close events
	send := func(ev swarmEvent) {
		mu.RLock()
		defer mu.RUnlock()
		if !closed.Load() {
			events <- ev
		}
	}
	defer func() {
		mu.Lock()
		closed.Store(true)
		close(events)
		mu.Unlock()
		<-writerDone
	}()
	start := time.Now()
	ev := swarmEvent{Ev: "connected", Connected: cfg.N}
	if err := pr.subscribe(ctx, cfg.N, cfg.Watch.Addr, cfg.Watch.Prefix, func(i int, key string, seq uint64, at time.Time) {
		send(swarmEvent{Ev: "applied", I: i, NS: key, Version: seq, T: at.UnixNano()})
	}); err != nil {
		ev = swarmEvent{Ev: "connected", Failed: cfg.N, Err: err.Error()}
	}
	ev.ElapsedNS = time.Since(start).Nanoseconds()
	send(ev)
	defer pr.close()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return nil
		}
		switch cmd := line[:len(line)-1]; cmd {
		case "stats":
			send(swarmEvent{Ev: "stats", Alive: cfg.N, Stats: &agenttest.Stats{}})
		case "quit":
			return nil
		default:
			send(swarmEvent{Ev: "error", Err: "unknown command " + cmd})
		}
	}
}

// swarm is the parent's handle on a swarm child process.
type swarm struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan swarmEvent
	pid    int
	done   chan error
}

// startSwarm starts a swarm child running cfg and returns once it has
// reported its initial connections (the "connected" event, returned).
func startSwarm(ctx context.Context, cfg swarmConfig, onApplied func(swarmEvent)) (*swarm, swarmEvent, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, swarmEvent{}, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe)
	if len(cfg.CPUs) > 0 {
		bin, args, err := cpupin.Wrap(cfg.CPUs, exe, nil)
		if err != nil {
			return nil, swarmEvent{}, err
		}
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(), SwarmEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, swarmEvent{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, swarmEvent{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, swarmEvent{}, fmt.Errorf("start swarm: %w", err)
	}
	sw := &swarm{cmd: cmd, stdin: stdin, events: make(chan swarmEvent, 16), pid: cmd.Process.Pid, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev swarmEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				continue
			}
			if ev.Ev == "applied" {
				onApplied(ev)
				continue
			}
			sw.events <- ev
		}
		close(sw.events)
		sw.done <- cmd.Wait()
	}()
	b, _ := json.Marshal(cfg)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		sw.kill()
		return nil, swarmEvent{}, fmt.Errorf("configure swarm: %w", err)
	}
	connect := cfg.ConnectTimeout
	if connect <= 0 {
		connect = 10 * time.Minute
	}
	ev, err := sw.next(ctx, "connected", connect)
	if err != nil {
		sw.kill()
		return nil, swarmEvent{}, err
	}
	return sw, ev, nil
}

// next waits for the next event of kind ev.
func (sw *swarm) next(ctx context.Context, ev string, timeout time.Duration) (swarmEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-sw.events:
			if !ok {
				return swarmEvent{}, errors.New("swarm process ended")
			}
			if e.Ev == "error" {
				return e, fmt.Errorf("swarm: %s", e.Err)
			}
			if e.Ev == ev {
				return e, nil
			}
		case <-t.C:
			return swarmEvent{}, fmt.Errorf("swarm: no %q within %v", ev, timeout)
		case <-ctx.Done():
			return swarmEvent{}, ctx.Err()
		}
	}
}

// command sends cmd and waits for the event it answers with.
func (sw *swarm) command(ctx context.Context, cmd, ev string) (swarmEvent, error) {
	if _, err := io.WriteString(sw.stdin, cmd+"\n"); err != nil {
		return swarmEvent{}, fmt.Errorf("swarm %s: %w", cmd, err)
	}
	return sw.next(ctx, ev, 10*time.Minute)
}

// quit closes every agent gracefully and waits for the child to exit.
func (sw *swarm) quit() error {
	io.WriteString(sw.stdin, "quit\n")
	sw.stdin.Close()
	select {
	case err := <-sw.done:
		return err
	case <-time.After(2 * time.Minute):
		sw.kill()
		return errors.New("swarm did not exit; killed")
	}
}

func (sw *swarm) kill() {
	sw.cmd.Process.Kill()
}
