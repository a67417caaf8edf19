// Package agenttest is a simulated agent for tests and benchmarks: a thin
// QUIC client that speaks the distributor protocol (internal/wire) — Hello
// with cached versions and subscriptions, Subscribe, Unsubscribe, Resync —
// and decides and answers every Update exactly as the real agent does,
// with update.Check and update.Apply (internal/update) and upstream.OutcomeOf
// and upstream.AckFor (agent/upstream), and talks only to a distributor of
// its zone (upstream.CheckDistributor): it applies what the agent applies,
// acknowledges a stale update with what it holds, and refuses what the
// agent refuses — including an update of a namespace it does not subscribe
// to — with the same Ack and Resync. Content is kept in memory. Explicit
// fault hooks (Options.Answer, Options.RejectStreams) let tests play a
// broken or older agent.
//
// It differs from the real agent (package agent) in everything around
// those decisions: no disk and no Badger cache, no namespace files, no
// local gRPC API or consumer leases, no failover between distributors and
// no reconnection — one Agent is one connection; and a patch whose base
// has not arrived (update.ErrGap) is refused at once, where the agent's
// upstream link first waits a moment for the missing update. That makes
// it cheap enough to run ten thousand in one process (the benchmark
// harness does) and exact to assert on (every update received is recorded
// in order).
//
// Imported by bench and tests; daemons must not import it.
package agenttest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// Cached is a namespace the agent holds when it connects.
type Cached struct {
	Namespace string
	Version   uint64
	Content   content.Snapshot
	// Checksum announced in Hello; empty means Content.Checksum(). Set it
	// to something else to simulate a corrupt cache.
	Checksum string
}

// Options configures an Agent.
type Options struct {
	// Addr is the distributor's UDP address. Required.
	Addr string
	// TLS is the client configuration (a host certificate for mutual
	// TLS). Required. Dial refuses a distributor whose certificate does
	// not name a distributor of Zone, as the agent does
	// (upstream.CheckDistributor). wire.ClientTLSConfig is applied to a
	// clone, so to resume TLS sessions across dials as the real agent
	// does, pass the same wire.ClientTLSConfig result to every Dial of one
	// agent.
	TLS *tls.Config
	// HostID and Zone are announced in Hello. Required.
	HostID, Zone string
	// Cached is announced in Hello and becomes the agent's content.
	Cached []Cached
	// Subscriptions are the initial subscriptions. Each is announced in
	// Hello's cached list too (version 0 if not in Cached).
	Subscriptions []string
	// ProtocolVersion and MinProtocolVersion are announced in Hello;
	// zero means wire.ProtocolVersion and wire.MinProtocolVersion.
	ProtocolVersion, MinProtocolVersion uint32
	// Logger; default slog.Default().
	Logger *slog.Logger
	// QUIC overrides the QUIC configuration; nil means
	// wire.ClientQUICConfig() set for SilenceTimeout.
	QUIC *quic.Config
	// SilenceTimeout is how long the agent hears nothing from the
	// distributor before it closes the connection with wire.CodeSilent, as
	// the real agent does (wire.Liveness, which also sends its keepalives
	// at the interval the distributor advises); zero means
	// wire.DefaultSilenceTimeout. Err then returns the *wire.SilenceError.
	SilenceTimeout time.Duration
	// PacketConn, if set, is the socket the agent dials over instead of
	// one of its own (a harness counting the agent's bytes). The caller
	// owns it: it closes it once the agent's connection ended.
	PacketConn net.PacketConn
	// Signals, if set, is what the agent keeps of its per-interval signals
	// of the namespace a SignalsRequest asks for (nil: none); the request
	// is answered from it with the real agent's rules
	// (internal/signals.Answer). Nil answers every request with no
	// namespaces.
	Signals func(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals
	// DropContent makes the agent keep only the version reference (number
	// and checksum) of what it applies, not the content, so that thousands
	// of agents holding large namespaces fit in one process (the catalog
	// benchmark). Its decisions and answers are unchanged for snapshots;
	// a later patch has no base content to apply to, fails its checksum
	// check and is refused as the real agent refuses such a patch (Ack
	// and Resync), after which the distributor sends a snapshot.
	DropContent bool

	// Faults, for tests of the distributor's defenses against a broken or
	// older agent; all nil in normal use. They change only what is sent
	// back, never the decision.

	// Answer, if set, is given each Ack (and Resync, nil when none) the
	// agent is about to send for u and returns what to send instead: nil
	// to send nothing.
	Answer func(u *lehrpb.Update, ack *lehrpb.Ack) *lehrpb.Ack
	// RejectStreams makes the agent abandon every update stream at once
	// (STOP_SENDING) instead of reading it.
	RejectStreams bool
	// IgnoreStreams makes the agent a stuck one: it never accepts an
	// update stream, so the distributor's stream credit is never given
	// back, while its control stream and keepalives go on as usual.
	IgnoreStreams bool
	// AnyDistributor makes the agent talk to a distributor whatever its
	// certificate names, as agents before issue 28 did: a test of the
	// distributor's own refusals (an agent of another zone) needs one.
	AnyDistributor bool

	// AgentVersion is the build announced in Hello.agent_version; empty
	// means "agenttest".
	AgentVersion string
	// Legacy makes the agent one older than capabilities and announced
	// builds, for tests of the version skew policy: its Hello lists no
	// capabilities and no agent_version, and it holds the distributor to
	// that as such an agent did — an Update in compact form (without its
	// text checksums), a SignalsRequest or an Advice (frame types it did
	// not know) ends the connection as a protocol violation, and Err says
	// which.
	Legacy bool
}

// Applied records one update the agent received: applied, stale (already
// held, acknowledged with what is held) or refused (Err set).
type Applied struct {
	Namespace string
	// Base is the version held before, Version the version after.
	Base, Version uint64
	Snapshot      bool
	// Bytes is the update frame's size on the wire.
	Bytes int
	// Set and Delete are the keys the update set and deleted.
	Set, Delete []string
	// Stale says the update was not applied because the agent held it or
	// a newer version already (update.ErrStale).
	Stale bool
	// Err is set when the update was refused (the agent kept Base).
	Err error
}

// Held is what the agent holds of one namespace.
type Held struct {
	// Ref is the version held: its number and checksum.
	Ref     content.Ref
	Content content.Snapshot
}

// Stats counts the updates an agent received.
type Stats struct {
	Updates, Snapshots, Patches, Refused int
	SnapshotBytes, PatchBytes            int
	Unavailable                          int
}

// Agent is one simulated agent connected to one distributor. Its methods
// are safe for concurrent use.
type Agent struct {
	opts    Options
	log     *slog.Logger
	conn    *quic.Conn
	ctrl    *quic.Stream
	welcome *lehrpb.Welcome
	live    *wire.Liveness // keepalives and the silence timeout

	writeMu sync.Mutex
	enc     *wire.Encoder

	mu          sync.Mutex
	held        map[string]Held
	subscribed  map[string]bool
	applied     []Applied
	unavailable map[string]*lehrpb.Unavailable
	stats       Stats
	changed     chan struct{} // closed and replaced on every change
	err         error         // why the connection ended
	// redialSpread is the spread the distributor advised (Welcome,
	// Advice); adviceCount counts the Advice frames.
	redialSpread time.Duration
	adviceCount  int

	wg        sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
}

// Dial connects to the distributor, sends Hello and waits for Welcome.
func Dial(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Addr == "" || opts.TLS == nil || opts.HostID == "" || opts.Zone == "" {
		return nil, errors.New("agenttest: Options.Addr, TLS, HostID and Zone are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProtocolVersion == 0 {
		opts.ProtocolVersion = wire.ProtocolVersion
	}
	if opts.MinProtocolVersion == 0 {
		opts.MinProtocolVersion = min(wire.MinProtocolVersion, opts.ProtocolVersion)
	}
	opts.SilenceTimeout = cmp.Or(opts.SilenceTimeout, wire.DefaultSilenceTimeout)
	qc := opts.QUIC
	if qc == nil {
		qc = wire.ClientQUICConfig()
		wire.SetSilenceTimeout(qc, opts.SilenceTimeout)
	}
	tc := wire.ClientTLSConfig(opts.TLS)
	var conn *quic.Conn
	var err error
	if opts.PacketConn != nil {
		var addr *net.UDPAddr
		if addr, err = net.ResolveUDPAddr("udp", opts.Addr); err == nil {
			conn, err = quic.Dial(ctx, opts.PacketConn, addr, tc, qc)
		}
	} else {
		conn, err = quic.DialAddr(ctx, opts.Addr, tc, qc)
	}
	if err != nil {
		return nil, fmt.Errorf("agenttest: dial %s: %w", opts.Addr, err)
	}
	// The agent's own decision on who answered, before Hello.
	if _, err := upstream.CheckDistributor(conn.ConnectionState().TLS, opts.Zone); err != nil && !opts.AnyDistributor {
		conn.CloseWithError(wire.CodeUnauthorized, err.Error())
		return nil, fmt.Errorf("agenttest: distributor %s: %w", opts.Addr, err)
	}
	a := &Agent{
		opts:        opts,
		log:         opts.Logger.With("host", opts.HostID),
		conn:        conn,
		held:        map[string]Held{},
		subscribed:  map[string]bool{},
		unavailable: map[string]*lehrpb.Unavailable{},
		changed:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	hello := &lehrpb.Hello{
		ProtocolVersion:    opts.ProtocolVersion,
		MinProtocolVersion: opts.MinProtocolVersion,
		HostId:             opts.HostID,
		Zone:               opts.Zone,
		AgentVersion:       cmp.Or(opts.AgentVersion, "agenttest"),
		// Updates are read with a wire.Decoder, which accepts every form
		// wire implements (compact updates included), like the real agent;
		// like a real agent that does not verify, it does not ask for
		// signed goals.
		Capabilities:   slices.DeleteFunc(wire.Capabilities(), func(c string) bool { return c == wire.CapSignedGoals }),
		SilenceTimeout: durationpb.New(opts.SilenceTimeout),
	}
	if opts.Legacy {
		hello.AgentVersion, hello.Capabilities, hello.SilenceTimeout = "", nil, nil
	}
	for _, c := range opts.Cached {
		sum := c.Checksum
		if sum == "" && c.Version != 0 {
			sum = c.Content.Checksum()
		}
		a.held[c.Namespace] = Held{Ref: content.Ref{Seq: c.Version, Checksum: sum}, Content: c.Content}
		hello.Cached = append(hello.Cached, &lehrpb.CachedNamespace{Namespace: c.Namespace, Version: c.Version, Checksum: sum})
	}
	for _, ns := range opts.Subscriptions {
		if _, ok := a.held[ns]; !ok {
			hello.Cached = append(hello.Cached, &lehrpb.CachedNamespace{Namespace: ns})
		}
		a.subscribed[ns] = true
		hello.Subscriptions = append(hello.Subscriptions, ns)
	}
	ctrl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		conn.CloseWithError(wire.CodeInternalError, "open control stream")
		return nil, fmt.Errorf("agenttest: open control stream: %w", err)
	}
	a.ctrl = ctrl
	a.enc = wire.NewEncoder(ctrl, wire.Limits{})
	if err := a.send(hello); err != nil {
		conn.CloseWithError(wire.CodeInternalError, "send Hello")
		return nil, fmt.Errorf("agenttest: send Hello: %w", err)
	}
	dec := wire.NewDecoder(ctrl, wire.DecoderOptions{Stream: wire.StreamControlFromDistributor})
	stop := context.AfterFunc(ctx, func() { ctrl.CancelRead(wire.StreamCodeCancelled) })
	msg, err := dec.Decode()
	stop()
	if err != nil {
		conn.CloseWithError(wire.CodeFor(err), "read Welcome")
		return nil, fmt.Errorf("agenttest: read Welcome: %w", connErr(conn, err))
	}
	switch m := msg.(type) {
	case *lehrpb.Goodbye:
		conn.CloseWithError(wire.CodeNoError, "")
		return nil, fmt.Errorf("agenttest: %w", &wire.GoodbyeError{Code: quic.ApplicationErrorCode(m.GetCode()), Reason: m.GetReason()})
	case *lehrpb.Welcome:
		a.welcome = m
		a.redialSpread = m.GetRedialSpread().AsDuration()
	}
	a.live = wire.NewLiveness(conn, opts.SilenceTimeout, qc.MaxIdleTimeout, func(nonce uint64) error {
		return a.send(&lehrpb.Ping{Nonce: nonce})
	})
	a.live.Advise(a.welcome.GetKeepaliveInterval().AsDuration())
	a.wg.Go(func() { a.readControl(dec) })
	a.wg.Go(a.acceptUpdates)
	a.wg.Go(func() {
		if err := a.live.Run(conn.Context()); err != nil {
			a.fail(err)
			wire.CloseConn(conn, err)
		}
	})
	return a, nil
}

// connErr prefers the connection's close error (which carries the peer's
// code and reason) over a stream error.
func connErr(conn *quic.Conn, err error) error {
	select {
	case <-conn.Context().Done():
		if cause := context.Cause(conn.Context()); cause != nil {
			return cause
		}
	default:
	}
	return err
}

// Welcome is the distributor's answer to Hello.
func (a *Agent) Welcome() *lehrpb.Welcome { return a.welcome }

// RedialSpread returns the redial spread the distributor advised last
// (Welcome.redial_spread, then Advice) and how many Advice frames came.
// An agent that lost its connection waits upstream.RedialDelay of it.
func (a *Agent) RedialSpread() (time.Duration, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.redialSpread, a.adviceCount
}

// Keepalive returns the keepalive interval and silence timeout in force
// (wire.Liveness: the agent's own, or the distributor's advice), the
// keepalives sent, and the packets the connection has sent in all.
func (a *Agent) Keepalive() (interval, silence time.Duration, sent int, packets uint64) {
	interval, silence = a.live.Timeouts()
	return interval, silence, a.live.Keepalives(), a.conn.ConnectionStats().PacketsSent
}

// HostID is the announced host id.
func (a *Agent) HostID() string { return a.opts.HostID }

func (a *Agent) send(msg proto.Message) error {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	return a.enc.Encode(msg)
}

// SendRaw writes b as is on the control stream, e.g. a malformed frame.
func (a *Agent) SendRaw(b []byte) error {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	_, err := a.ctrl.Write(b)
	return err
}

// StopReadingControl is a fault for tests of the distributor's defenses:
// the agent stops reading its control stream (STOP_SENDING), so the
// distributor's next control frame fails to send, while the connection —
// its updates, the agent's own frames and keepalives — stays up.
func (a *Agent) StopReadingControl() { a.ctrl.CancelRead(wire.StreamCodeCancelled) }

// Subscribe subscribes to namespaces, announcing what the agent holds of
// each.
func (a *Agent) Subscribe(nss ...string) error {
	m := &lehrpb.Subscribe{}
	a.mu.Lock()
	for _, ns := range nss {
		h := a.held[ns]
		a.subscribed[ns] = true
		m.Namespaces = append(m.Namespaces, &lehrpb.CachedNamespace{Namespace: ns, Version: h.Ref.Seq, Checksum: h.Ref.Checksum})
	}
	a.mu.Unlock()
	return a.send(m)
}

// Unsubscribe drops subscriptions.
func (a *Agent) Unsubscribe(nss ...string) error {
	a.mu.Lock()
	for _, ns := range nss {
		delete(a.subscribed, ns)
	}
	a.mu.Unlock()
	return a.send(&lehrpb.Unsubscribe{Namespaces: nss})
}

// SendAck sends ack as is (e.g. an answer a fault hook held back).
func (a *Agent) SendAck(ack *lehrpb.Ack) error { return a.send(ack) }

// Resync asks for a fresh snapshot of ns.
func (a *Agent) Resync(ns string, reason lehrpb.ResyncReason) error {
	h, _ := a.Held(ns)
	return a.send(&lehrpb.Resync{Namespace: ns, HaveVersion: h.Ref.Seq, HaveChecksum: h.Ref.Checksum, Reason: reason})
}

// Held returns what the agent holds of ns.
func (a *Agent) Held(ns string) (Held, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.held[ns]
	return h, ok && h.Ref.Seq != 0
}

// Cached returns everything the agent holds, ready to be passed as
// Options.Cached of a reconnecting agent.
func (a *Agent) Cached() []Cached {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Cached
	for ns, h := range a.held {
		if h.Ref.Seq != 0 {
			out = append(out, Cached{Namespace: ns, Version: h.Ref.Seq, Content: h.Content, Checksum: h.Ref.Checksum})
		}
	}
	slices.SortFunc(out, func(x, y Cached) int {
		if x.Namespace < y.Namespace {
			return -1
		}
		if x.Namespace > y.Namespace {
			return 1
		}
		return 0
	})
	return out
}

// Applied returns every update received so far, in the order applied;
// with ns set, only that namespace's.
func (a *Agent) Applied(ns string) []Applied {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Applied
	for _, ap := range a.applied {
		if ns == "" || ap.Namespace == ns {
			out = append(out, ap)
		}
	}
	return out
}

// AppliedFrom returns the updates received after the first i, in the
// order applied (nil when there are none): what a caller following the
// agent has not seen yet, without copying what it has.
func (a *Agent) AppliedFrom(i int) []Applied {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(a.applied) {
		return nil
	}
	return slices.Clone(a.applied[max(i, 0):])
}

// Unavailable returns the last Unavailable received for ns, if any.
func (a *Agent) Unavailable(ns string) (*lehrpb.Unavailable, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u, ok := a.unavailable[ns]
	return u, ok
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Done is closed when the connection has ended.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err says why the connection ended (nil while it is up). For a close by
// the distributor it wraps the *quic.ApplicationError with its code and
// reason; see wire.CloseCode.
func (a *Agent) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Wait blocks until cond, evaluated with the agent's state after every
// change, returns true, or ctx ends.
func (a *Agent) Wait(ctx context.Context, cond func(a *Agent) bool) error {
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if cond(a) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("agenttest %s: wait: %w", a.opts.HostID, ctx.Err())
		}
	}
}

// WaitVersion blocks until the agent holds version v (or a later one) of
// ns, or ctx ends.
func (a *Agent) WaitVersion(ctx context.Context, ns string, v uint64) error {
	return a.Wait(ctx, func(a *Agent) bool {
		h, ok := a.Held(ns)
		return ok && h.Ref.Seq >= v
	})
}

// Close says Goodbye, closes the connection and waits for the agent's
// goroutines. It is idempotent.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		_ = a.ctrl.SetWriteDeadline(time.Now().Add(time.Second))
		_ = a.send(&lehrpb.Goodbye{Code: uint64(wire.CodeNoError), Reason: "agenttest closing"})
		a.conn.CloseWithError(wire.CodeNoError, "agenttest closing")
	})
	a.wg.Wait()
	return nil
}

// Kill drops the connection without a Goodbye (a crash).
func (a *Agent) Kill() {
	a.closeOnce.Do(func() { a.conn.CloseWithError(wire.CodeInternalError, "agenttest killed") })
	a.wg.Wait()
}

func (a *Agent) changedLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *Agent) fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = connErr(a.conn, err)
		a.changedLocked()
	}
	a.mu.Unlock()
}

func (a *Agent) readControl(dec *wire.Decoder) {
	defer func() {
		<-a.conn.Context().Done()
		a.fail(context.Cause(a.conn.Context()))
		a.closeDone()
	}()
	for {
		msg, err := dec.Decode()
		if err != nil {
			var fe *wire.FrameError
			if errors.As(err, &fe) {
				a.conn.CloseWithError(wire.CodeFor(err), err.Error())
			} else if err == io.EOF {
				a.conn.CloseWithError(wire.CodeNoError, "control stream ended")
			}
			a.fail(err)
			return
		}
		if a.opts.Legacy && isCapabilityFrame(msg) {
			err := fmt.Errorf("agenttest (legacy): a %T, a frame type an agent without capabilities does not know", msg)
			a.fail(err)
			a.conn.CloseWithError(wire.CodeProtocolViolation, err.Error())
			return
		}
		switch m := msg.(type) {
		case *lehrpb.Unavailable:
			a.mu.Lock()
			a.unavailable[m.GetNamespace()] = m
			a.stats.Unavailable++
			a.changedLocked()
			a.mu.Unlock()
		case *lehrpb.Ping:
			_ = a.send(&lehrpb.Pong{Nonce: m.GetNonce()})
		case *lehrpb.Advice:
			a.live.Advise(m.GetKeepaliveInterval().AsDuration())
			a.mu.Lock()
			a.redialSpread = m.GetRedialSpread().AsDuration()
			a.adviceCount++
			a.changedLocked()
			a.mu.Unlock()
		case *lehrpb.SignalsRequest:
			get := func(*lehrpb.SignalsWanted) *lehrpb.NamespaceSignals { return nil }
			if a.opts.Signals != nil {
				get = a.opts.Signals
			}
			_ = a.send(signals.Answer(m, get, wire.DefaultMaxControlFrame/2))
		case *lehrpb.Goodbye:
			a.fail(&wire.GoodbyeError{Code: quic.ApplicationErrorCode(m.GetCode()), Reason: m.GetReason()})
			a.conn.CloseWithError(wire.CodeNoError, "")
			return
		}
	}
}

// isCapabilityFrame reports whether msg is a frame type a distributor
// sends only under a capability (Advice: wire.CapRedialSpread;
// SignalsRequest: wire.CapSignals).
func isCapabilityFrame(msg proto.Message) bool {
	switch msg.(type) {
	case *lehrpb.Advice, *lehrpb.SignalsRequest:
		return true
	}
	return false
}

// closeDone is called once, when readControl ends. It wakes Wait, whose
// condition may look at Done: fail woke it before done was closed.
func (a *Agent) closeDone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.done)
	a.changedLocked()
}

func (a *Agent) acceptUpdates() {
	if a.opts.IgnoreStreams {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		str, err := a.conn.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		wg.Go(func() { a.handleUpdate(str) })
	}
}

// wantFullForm is the check an agent older than compact updates
// (wire.CapCompactUpdate) made of every Update frame: it read the text
// checksums, so an Update without them was malformed to it.
func wantFullForm(frame []byte) error {
	n, k := binary.Uvarint(frame[min(1, len(frame)):])
	if len(frame) < 2 || k <= 0 || uint64(len(frame)-1-k) < n {
		return fmt.Errorf("agenttest (legacy): an update frame of %d bytes it cannot split", len(frame))
	}
	var u lehrpb.Update
	if err := proto.Unmarshal(frame[1+k:1+k+int(n)], &u); err != nil {
		return fmt.Errorf("agenttest (legacy): update payload: %w", err)
	}
	if u.GetChecksum() == "" || (!u.GetSnapshot() && u.GetBaseChecksum() == "") {
		return fmt.Errorf("agenttest (legacy): Update %s@%d came in compact form, without its text checksums, which an agent without %q requires",
			u.GetNamespace(), u.GetVersion(), wire.CapCompactUpdate)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (a *Agent) handleUpdate(str *quic.ReceiveStream) {
	if a.opts.RejectStreams {
		str.CancelRead(wire.StreamCodeRejected)
		return
	}
	cr := &countingReader{r: str}
	var r io.Reader = cr
	var raw *bytes.Buffer // the frame as sent, for a Legacy agent's check
	if a.opts.Legacy {
		raw = new(bytes.Buffer)
		r = io.TeeReader(cr, raw)
	}
	dec := wire.NewDecoder(r, wire.DecoderOptions{Stream: wire.StreamUpdate})
	msg, err := dec.Decode()
	if err == nil {
		if _, err2 := dec.Decode(); err2 != io.EOF {
			err = err2
			if err == nil {
				err = errors.New("agenttest: a second frame on an update stream")
			}
		}
	}
	if err != nil {
		var fe *wire.FrameError
		if errors.As(err, &fe) {
			a.conn.CloseWithError(wire.CodeFor(err), "update stream: "+err.Error())
		}
		return
	}
	if raw != nil {
		if err := wantFullForm(raw.Bytes()); err != nil {
			a.fail(err)
			a.conn.CloseWithError(wire.CodeProtocolViolation, err.Error())
			return
		}
	}
	u := msg.(*lehrpb.Update)
	ns := u.GetNamespace()
	a.mu.Lock()
	h := a.held[ns]
	subscribed := a.subscribed[ns]
	a.mu.Unlock()
	// The agent's decision and answer, made by the agent's code: Check and
	// Apply (internal/update), OutcomeOf and AckFor (agent/upstream).
	var next content.Snapshot
	err = errors.New("not subscribed")
	if subscribed {
		if err = update.Check(h.Ref, u); err == nil {
			next, err = update.Apply(h.Content, u)
		}
	}
	got := content.Ref{Seq: u.GetVersion(), Checksum: wire.UpdateChecksum(u)} // as the agent reads it, either form
	res := upstream.Result{Outcome: upstream.Applied, Held: got}
	if err != nil {
		res = upstream.Result{Held: h.Ref, Err: err}
		if subscribed {
			// A gap is refused at once; the agent waits GapWait first.
			res.Outcome, res.Reason = upstream.OutcomeOf(err)
		} else {
			res.Outcome = upstream.Failed
		}
	}
	stale := res.Outcome == upstream.Stale
	rec := Applied{Namespace: ns, Base: h.Ref.Seq, Version: u.GetVersion(), Snapshot: u.GetSnapshot(), Bytes: cr.n, Delete: u.GetDelete(), Stale: stale}
	if err != nil && !stale {
		rec.Err = err
	}
	for _, p := range u.GetSet() {
		rec.Set = append(rec.Set, p.GetKey())
	}
	a.mu.Lock()
	a.applied = append(a.applied, rec)
	a.stats.Updates++
	if u.GetSnapshot() {
		a.stats.Snapshots++
		a.stats.SnapshotBytes += cr.n
	} else {
		a.stats.Patches++
		a.stats.PatchBytes += cr.n
	}
	switch {
	case err == nil:
		if a.opts.DropContent {
			next = content.Snapshot{}
		}
		a.held[ns] = Held{Ref: got, Content: next}
	case !stale:
		a.stats.Refused++
	}
	a.changedLocked()
	a.mu.Unlock()
	if err != nil && !stale {
		a.log.Info("refusing update", "namespace", ns, "version", u.GetVersion(), "err", err)
	}
	ack := upstream.AckFor(u, res)
	if a.opts.Answer != nil {
		ack = a.opts.Answer(u, ack)
	}
	if ack != nil {
		_ = a.send(ack)
	}
	if res.Outcome == upstream.Rejected {
		_ = a.send(&lehrpb.Resync{Namespace: ns, HaveVersion: h.Ref.Seq, HaveChecksum: h.Ref.Checksum, Reason: res.Reason, Detail: err.Error()})
	}
}
