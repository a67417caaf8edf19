// Package fanout is the distributor's QUIC side: it accepts agents (mutual
// TLS 1.3, ALPN from internal/wire), keeps one session per agent with its
// subscription table (namespace → subscribed, version and checksum held,
// update in flight), and pushes each goal version to every agent subscribed
// to its namespace — as a patch from the version the agent holds when that
// version is available and its checksum matches, otherwise as a snapshot —
// one Update per unidirectional stream, so a large snapshot of one namespace
// never blocks a small patch of another.
//
// Ordering: per agent and namespace at most one Update is in flight; the next
// one is computed when it is acknowledged, from the version the agent then
// holds to the goal of that moment. Versions published in between are
// skipped (coalesced), never sent out of order.
//
// A malformed or unexpected frame closes only that agent's connection, with
// wire's protocol-violation application error code and a reason.
//
// Imported by distributor, distributor/distributorcmd (for its flags'
// defaults), testenv/devcluster, bench and tests.
package fanout

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/quic-go/quic-go"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// Versions is where the fanout gets the versions agents hold, to compute
// patches from them. *versions.Cache implements it.
type Versions interface {
	// Get returns version ref of ns (its number and checksum), from
	// memory or from control.
	Get(ctx context.Context, ns string, ref content.Ref) (*content.Version, error)
}

// Options configures a Server.
type Options struct {
	// Listen is the UDP address to listen on; default "127.0.0.1:7410".
	// Port 0 picks a free port (see Addr).
	Listen string
	// TLS is the server's TLS configuration. Required: QUIC always runs TLS
	// 1.3. Set ClientCAs and ClientAuth to require agent host certificates
	// (mutual TLS): the host id an agent announces must then match its
	// certificate. NextProtos is set to the wire ALPN on a clone.
	TLS *tls.Config
	// Zone is the distributor's zone; agents announcing another are
	// refused. Required.
	Zone string
	// DistributorID names this instance in Welcome. Required.
	DistributorID string
	// Version is the distributor build string sent in Welcome; optional.
	Version string
	// Versions supplies the bases of patches. Required.
	Versions Versions
	// Metrics receives the lehr_distributor_* series of the fanout; default
	// a private set.
	Metrics *metrics.Set
	// Logger; default slog.Default().
	Logger *slog.Logger
	// HandshakeTimeout bounds the wait for an agent's Hello; default 10s.
	HandshakeTimeout time.Duration
	// FetchTimeout bounds fetching an agent's version from control to
	// compute a patch; on timeout the agent gets a snapshot. Default 5s.
	FetchTimeout time.Duration
	// ReportInterval is sent to agents in Welcome; zero leaves the agent's
	// default.
	ReportInterval time.Duration
	// MemoBytes bounds the memo of encoded updates shared by agents that
	// need the same update (same namespace, base and goal); default 64 MiB.
	MemoBytes int64
	// QUIC overrides the QUIC configuration; nil means
	// wire.ServerQUICConfig().
	QUIC *quic.Config
	// StatelessResetKey is the QUIC stateless-reset key; nil means one
	// derived from the private key of TLS's certificate, so that a
	// distributor restarted with the same certificate resets its
	// predecessor's connections at once and agents fail over without
	// waiting for an idle timeout. Give distributors sharing a certificate
	// and an address (behind a load balancer) distinct keys.
	StatelessResetKey *quic.StatelessResetKey
	// AckTimeout is how long an update may stay unanswered after it was
	// written before the distributor stops waiting for its Ack and plans
	// the namespace again, as a snapshot; default DefaultAckTimeout. Agents
	// answer every update they read, so a timeout means the update was
	// lost with its stream or the agent misbehaves; a late answer is then
	// ignored. It also bounds the write's progress: an update whose stream
	// the agent takes no bytes of for AckTimeout (no stream credit, or
	// nothing read) closes the agent's connection (wire.ErrStalled), so
	// that it reconnects and announces what it holds.
	AckTimeout time.Duration
	// MaxInflightBytes bounds, per agent, the bytes of updates written and
	// not yet answered: an agent applies an update before it answers, so
	// this bounds what a cold agent sent every namespace at once must hold
	// (an update larger than the bound waits until nothing else is in
	// flight). Default DefaultMaxInflightBytes; negative: no bound.
	MaxInflightBytes int64
	// MaxNamespacesPerAgent bounds one agent's live subscriptions (an
	// unsubscribed namespace is forgotten); default
	// DefaultMaxNamespacesPerAgent.
	MaxNamespacesPerAgent int
	// Now returns the current time (refusal backoffs, refused addresses);
	// nil means time.Now.
	Now func() time.Time
	// MaxHandshakes bounds the agents being admitted at once: between a
	// connection's first packet and its Welcome (QUIC and TLS handshake,
	// control stream, Hello). An attempt beyond it is refused at once with
	// QUIC's CONNECTION_REFUSED, before any cryptography is spent on it,
	// and the agent retries after its backoff. Without a bound, a
	// reconnect storm (every agent of a restarted distributor redialing at
	// once) slows every handshake at the same time: they miss their
	// timeouts, are retried and redo the work, and the zone converges
	// late or never. Default DefaultMaxHandshakes; negative: no bound.
	MaxHandshakes int
	// RedialRate is the rate, in agents per second, at which this
	// distributor can admit its agents again after they all lost their
	// connection at once (its restart): it sizes the redial spread agents
	// are told (Welcome.redial_spread, Advice; docs/wire.md), the agents
	// connected over RedialRate, so that they come back at about that rate
	// instead of all at once. Default DefaultRedialRate; negative: no
	// spread (agents redial after their own minimum backoff).
	RedialRate float64
	// KeepaliveRate is the rate, in keepalives per second, that this
	// distributor budgets for its idle agents: it sizes the keepalive
	// interval agents are told (Welcome.keepalive_interval, Advice), the
	// agents connected over KeepaliveRate, from their own (1 s with the
	// default silence timeout) up to wire.MaxKeepaliveInterval. Each
	// keepalive is a packet each way and a wake-up of the connection on
	// both sides, so without a bound 10,000 idle agents cost a distributor
	// a third of a core; with it, the silence timeout of agents of a large
	// distributor grows to three intervals, and they notice its crash that
	// much later. Default DefaultKeepaliveRate; negative: no advice.
	KeepaliveRate float64
	// GSO lets quic-go hand a connection's packets to the kernel in one
	// system call (UDP generic segmentation offload). Off by default:
	// with it quic-go packs every send into a pooled 20 KiB buffer instead
	// of a packet's 1.5, and a fan-out or a reconnect storm leaves one
	// pooled per connection that had something to send — 89 MB of the
	// heap of a distributor whose 10,000 agents had just connected
	// (bench/results/HISTORY.md, "The storm and the memory per agent at
	// 10,000") — while it saves system calls only for multi-packet sends
	// (snapshots; a fan-out sends one packet per connection).
	// QUIC_GO_DISABLE_GSO in the environment, when set, decides instead
	// (quic-go's own switch).
	GSO bool
	// DomainWanted, if set, is called with a namespace an agent subscribes
	// to that has no goal in the zone, of a domain without a policy
	// (SetDomains). Control gives a distributor no goal of a domain whose
	// readers do not admit its zone: once the owner has set that domain's
	// policy, the agent is told FORBIDDEN, naming the readers, rather than
	// NOT_FOUND. Called without locks held; it must not block.
	DomainWanted func(ns string)
	// Wanted, if set, is called with the namespaces that gained their first
	// subscriber among the connected agents (wanted true) or lost their last
	// (false), so the caller can load a namespace's goal on demand (SetGoal)
	// and release it when no agent here uses it (ClearGoal). Called without
	// locks held, possibly concurrently; it must not block.
	Wanted func(nss []string, wanted bool)
	// Pending, if set, reports whether ns has a goal in the zone that is
	// not set yet (Wanted asked for it to be loaded): a subscriber then
	// waits for SetGoal instead of being told the namespace is NOT_FOUND.
	// Called with a session's lock held; it must be quick and must not call
	// back into the Server.
	Pending func(ns string) bool
}

// Defaults of Options.
const (
	DefaultAckTimeout            = 30 * time.Second
	DefaultMaxInflightBytes      = 32 << 20
	DefaultMaxNamespacesPerAgent = 100_000
)

// DefaultMaxHandshakes is the default Options.MaxHandshakes: enough
// handshakes in flight to keep the cores busy, few enough that each
// completes in a small fraction of the handshake timeouts.
const DefaultMaxHandshakes = 128

// Stats are the fanout's counters since it started. Bytes are the update
// frames (header and payload) written on update streams, counted when the
// write starts.
type Stats struct {
	Agents                      int
	SnapshotPushes, PatchPushes uint64
	SnapshotBytes, PatchBytes   uint64
	Acks, Refusals, Resyncs     uint64
	ProtocolErrors              uint64
	// AckTimeouts counts updates unanswered after Options.AckTimeout.
	AckTimeouts uint64
	// StalledPushes counts updates whose write made no progress for
	// Options.AckTimeout, each ending its agent's connection.
	StalledPushes uint64
	// RefusedHandshakes counts refusals because Options.MaxHandshakes
	// agents were being admitted: one per Initial packet of a refused
	// attempt (a ClientHello may span two).
	RefusedHandshakes uint64
	// AbandonedHandshakes counts admitted connections that ended before
	// their handshake completed (the agent went away or timed out).
	AbandonedHandshakes uint64
	// Admitting is the number of connections being admitted now (see
	// Options.MaxHandshakes).
	Admitting int
	// Handshakes and ResumedHandshakes count completed QUIC handshakes,
	// full and resuming a TLS session (wire.ServerTLSConfig).
	Handshakes, ResumedHandshakes uint64
	// Unheard counts connections closed because nothing arrived from the
	// agent for three of its silence timeouts.
	Unheard uint64
}

// VersionCount is how many connected agents hold one version of a
// namespace (by their latest acknowledgement or announcement).
type VersionCount struct {
	Namespace string
	Version   uint64
	Agents    int
	// Consumers are the leases on the namespace those agents last
	// reported, and Services the named ones per service.
	Consumers int
	Services  map[string]int
}

// Server accepts agents and pushes updates to them. Create it with Listen.
type Server struct {
	opts Options
	log  *slog.Logger
	ln   *quic.Listener
	tr   *quic.Transport
	udp  net.PacketConn
	// handshakes counts the connections being admitted (see admit).
	handshakes atomic.Int64
	// refused are the addresses refused a moment ago (admission.go).
	refused refusedAddrs
	// refuseStreams: the QUIC configuration lets an agent open more than
	// its control stream, so each session watches for (and refuses) more.
	// With one bidirectional and no unidirectional stream allowed, quic-go
	// enforces that itself and the session saves three goroutines.
	refuseStreams bool
	met           *serverMetrics
	memo          *memo
	// wants counts the connected agents subscribing to each namespace.
	wants wants

	goals atomic.Pointer[map[string]*Goal]
	// goalMu serialises goal writers (SetGoal, ClearGoal).
	goalMu sync.Mutex

	// domains are the domain policies (SetDomains), an immutable map
	// read by every session's plan without a lock.
	domains atomic.Pointer[map[string]DomainPolicy]
	// domainMu serialises SetDomains and SetShare and guards the outbound
	// limiters, the subscription counts and the share.
	domainMu sync.Mutex
	limiters map[string]*rate.Limiter
	subs     map[string]int // admitted subscriptions by domain (admitSub)
	// share is the number of the zone's distributors the per-zone quotas
	// are split between (SetShare); at least 1.
	share int

	mu       sync.Mutex
	sessions map[string]*session // by host id
	closed   bool
	closeErr error

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	done      chan struct{}
}

// Listen validates opts and binds the UDP socket; it does not accept yet
// (see Serve).
func Listen(opts Options) (*Server, error) {
	if opts.TLS == nil {
		return nil, errors.New("fanout: Options.TLS is required (QUIC always runs TLS 1.3)")
	}
	if err := names.Zone(opts.Zone); err != nil {
		return nil, fmt.Errorf("fanout: Options.Zone: %w", err)
	}
	if opts.DistributorID == "" {
		return nil, errors.New("fanout: Options.DistributorID is required")
	}
	if opts.Versions == nil {
		return nil, errors.New("fanout: Options.Versions is required")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:7410"
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 5 * time.Second
	}
	if opts.MemoBytes <= 0 {
		opts.MemoBytes = 64 << 20
	}
	if opts.MaxHandshakes == 0 {
		opts.MaxHandshakes = DefaultMaxHandshakes
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	switch {
	case opts.MaxInflightBytes == 0:
		opts.MaxInflightBytes = DefaultMaxInflightBytes
	case opts.MaxInflightBytes < 0:
		opts.MaxInflightBytes = 0 // no bound
	}
	if opts.MaxNamespacesPerAgent <= 0 {
		opts.MaxNamespacesPerAgent = DefaultMaxNamespacesPerAgent
	}
	if opts.RedialRate == 0 {
		opts.RedialRate = DefaultRedialRate
	}
	if opts.KeepaliveRate == 0 {
		opts.KeepaliveRate = DefaultKeepaliveRate
	}
	qc := opts.QUIC
	if qc == nil {
		qc = wire.ServerQUICConfig()
	}
	tc := wire.ServerTLSConfig(opts.TLS)
	udp, err := net.ListenPacket("udp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("fanout: listen %s: %w", opts.Listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:     opts,
		log:      opts.Logger.With("zone", opts.Zone),
		memo:     newMemo(opts.MemoBytes),
		sessions: map[string]*session{},
		limiters: map[string]*rate.Limiter{},
		share:    1,
		subs:     map[string]int{},
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	empty := map[string]*Goal{}
	s.goals.Store(&empty)
	s.met = newServerMetrics(opts.Metrics, s)
	s.udp = udp
	s.refuseStreams = qc.MaxIncomingStreams != 1 || qc.MaxIncomingUniStreams >= 0
	key := opts.StatelessResetKey
	if key == nil {
		key = resetKey(opts.TLS)
	}
	s.tr = &quic.Transport{Conn: udp, ConnContext: s.admit, StatelessResetKey: key}
	ln, err := listenQUIC(s.tr, tc, qc, opts.GSO)
	if err != nil {
		cancel()
		s.tr.Close()
		udp.Close()
		return nil, fmt.Errorf("fanout: listen quic %s: %w", opts.Listen, err)
	}
	s.ln = ln
	return s, nil
}

// now is the server's clock.
func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Addr is the UDP address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts agents until ctx is done or Close is called, then closes the
// server and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	s.mu.Lock()
	if !s.closed {
		s.wg.Go(s.adviseLoop)
	}
	s.mu.Unlock()
	for {
		conn, err := s.ln.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				<-s.done
				return nil
			}
			s.Close()
			return fmt.Errorf("fanout: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.CloseWithError(codeGoingAway, "distributor shutting down")
			continue
		}
		// Started under mu, so never concurrently with Close's Wait (a
		// WaitGroup must not grow from zero while it is being waited for).
		s.wg.Go(func() { s.handle(conn) })
		s.mu.Unlock()
	}
}

// Close stops accepting, says Goodbye to every agent, closes their
// connections and waits for every goroutine the server started. It is
// idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		sessions := slices.Collect(maps.Values(s.sessions))
		s.mu.Unlock()
		for _, ss := range sessions {
			ss.goodbye(codeGoingAway, "distributor shutting down")
		}
		s.cancel()
		s.ln.Close()
		s.wg.Wait()
		s.tr.Close()
		s.udp.Close()
		close(s.done)
	})
	<-s.done
	return nil
}

// Goal is what the zone's agents should hold of one namespace: Stable,
// except the hosts of Cohort, which a rollout is moving to Candidate.
// Only their identity (namespace, number, checksum, kind, info) is read
// from Stable and Candidate: the content pushed comes from
// Options.Versions, so a caller may set versions without their content
// and let the cache bound what it holds.
type Goal struct {
	Stable *content.Version
	// Candidate is nil when no rollout is moving hosts; otherwise newer
	// than Stable.
	Candidate *content.Version
	Cohort    cohort.Cohort
	// Sample asks for the Sample subscribed hosts with the lowest cohort
	// positions (Samples), from which control names canary hosts.
	Sample int
	// Analysis asks to watch, for canary analysis, up to Analysis hosts in
	// the cohort and as many outside it, lowest cohort positions first
	// (RequestSignals, Signals); at most MaxAnalysis.
	Analysis int
	// Checks are the analysis's checks (nil: the defaults), passed to the
	// watched hosts for their host-level checks. Not modified.
	Checks []*lehrpb.CanaryCheck
	// Proof is control's signed goal state this goal was made from, with
	// its signed fields only (internal/signing.GoalProof), sent with every
	// update to agents that verify (wire.CapSignedGoals); nil when control
	// does not sign. Not modified.
	Proof *lehrpb.GoalState
}

// For returns the version host should hold.
func (g *Goal) For(host string) *content.Version {
	if g.Candidate != nil && g.Cohort.Has(host) {
		return g.Candidate
	}
	return g.Stable
}

// equal reports whether g and o make every host hold the same versions.
func (g *Goal) equal(o *Goal) bool {
	same := func(a, b *content.Version) bool {
		return a == nil && b == nil || a != nil && b != nil && a.Ref() == b.Ref()
	}
	return same(g.Stable, o.Stable) && same(g.Candidate, o.Candidate) && g.Sample == o.Sample && g.Analysis == o.Analysis &&
		bytes.Equal(g.Proof.GetSignature(), o.Proof.GetSignature()) &&
		slices.EqualFunc(g.Checks, o.Checks, func(a, b *lehrpb.CanaryCheck) bool { return proto.Equal(a, b) }) &&
		(g.Candidate == nil || g.Cohort.Salt == o.Cohort.Salt && g.Cohort.PerMillion == o.Cohort.PerMillion && slices.Equal(g.Cohort.Hosts, o.Cohort.Hosts))
}

// SetGoal makes g the goal of its namespace (g.Stable's) and starts pushing
// to every agent subscribed to the namespace that does not hold its
// version yet. g.Stable is required.
func (s *Server) SetGoal(g Goal) {
	ns := g.Stable.Namespace
	s.goalMu.Lock()
	old := *s.goals.Load()
	if cur, ok := old[ns]; ok && cur.equal(&g) {
		s.goalMu.Unlock()
		return
	}
	next := maps.Clone(old)
	next[ns] = &g
	s.goals.Store(&next)
	s.goalMu.Unlock()
	s.met.ensureLag(ns)
	s.kickSubscribers(ns)
}

// ClearGoal forgets the goal of ns (the zone no longer has one). Agents keep
// what they hold; subscribers are told the namespace is unavailable.
func (s *Server) ClearGoal(ns string) {
	s.goalMu.Lock()
	old := *s.goals.Load()
	if _, ok := old[ns]; !ok {
		s.goalMu.Unlock()
		return
	}
	next := maps.Clone(old)
	delete(next, ns)
	s.goals.Store(&next)
	s.goalMu.Unlock()
	s.met.dropLag(ns)
	s.kickSubscribers(ns)
}

// Goal returns the current goal of ns.
func (s *Server) Goal(ns string) (Goal, bool) {
	g, ok := (*s.goals.Load())[ns]
	if !ok {
		return Goal{}, false
	}
	return *g, true
}

func (s *Server) kickSubscribers(ns string) {
	for _, ss := range s.sessionList() {
		if ss.subscribed(ns) {
			ss.kick()
		}
	}
}

func (s *Server) sessionList() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.AppendSeq(make([]*session, 0, len(s.sessions)), maps.Values(s.sessions))
}

// connected returns the number of agents connected now.
func (s *Server) connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stats returns the fanout's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Agents:         s.connected(),
		SnapshotPushes: s.met.pushSnapshot.Get(),
		PatchPushes:    s.met.pushPatch.Get(),
		SnapshotBytes:  s.met.bytesSnapshot.Get(),
		PatchBytes:     s.met.bytesPatch.Get(),
		Acks:           s.met.acks.Get(),
		Refusals:       s.met.refusals.Get(),
		Resyncs:        s.met.resyncs.Get(),
		ProtocolErrors: s.met.protocolErrors.Get(),
		AckTimeouts:    s.met.ackTimeouts.Get(),
		StalledPushes:  s.met.stalledPushes.Get(),

		RefusedHandshakes:   s.met.refusedHandshakes.Get(),
		AbandonedHandshakes: s.met.abandonedHandshakes.Get(),
		Admitting:           int(s.handshakes.Load()),
		Handshakes:          s.met.fullHandshakes.Get(),
		ResumedHandshakes:   s.met.resumedHandshakes.Get(),
		Unheard:             s.met.unheard.Get(),
	}
}

// Convergence returns the number of connected agents and, for every
// namespace, how many of them hold each version (subscribed namespaces
// only) with their consumers as the agents last reported them, sorted by
// namespace and version.
func (s *Server) Convergence() (agents int, counts []VersionCount) {
	type nv struct {
		ns  string
		seq uint64
	}
	m := map[nv]*VersionCount{}
	sessions := s.sessionList()
	for _, ss := range sessions {
		ss.eachSubscribed(func(ns string, st *nsState) {
			if st.have.Seq == 0 {
				return
			}
			k := nv{ns, st.have.Seq}
			c := m[k]
			if c == nil {
				c = &VersionCount{Namespace: ns, Version: st.have.Seq}
				m[k] = c
			}
			c.Agents++
			c.Consumers += int(st.report.GetClients())
			for _, sv := range st.report.GetServices() {
				if c.Services == nil {
					c.Services = map[string]int{}
				}
				c.Services[sv.GetService()] += int(sv.GetConsumers())
			}
		})
	}
	for _, c := range m {
		counts = append(counts, *c)
	}
	slices.SortFunc(counts, func(a, b VersionCount) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return cmp.Compare(a.Version, b.Version)
	})
	return len(sessions), counts
}

// MaxHostReports bounds the per-host detail of Health.
const MaxHostReports = 1000

// Health sums the agents' latest reports per namespace, version and cohort
// (whether the host is in the cohort of the namespace's candidate), for
// the namespaces a rollout is moving (their goal has a candidate) and those
// whose consumers rejected a version or lost leases: what rollouts and
// operators act on, so the report grows with rollouts and trouble, not
// with the fleet. It also returns per-host detail for hosts named in a
// candidate's cohort or watched in it by a canary analysis, hosts whose
// consumers rejected their version or lost leases, hosts whose host-level
// canary checks failed, and hosts that refused updates whose signature did
// not verify — at most MaxHostReports, by host id — and, in the room left,
// up to MaxBehindHosts hosts per namespace that do not hold their goal yet
// (lowest host ids), so a rollout waiting for hosts can name them. Both
// are sorted.
func (s *Server) Health() (health []*lehrpb.NamespaceHealth, hosts []*lehrpb.HostReport) {
	type key struct {
		ns     string
		seq    uint64
		cohort bool
	}
	goals := *s.goals.Load()
	candidate := func(g *Goal) uint64 {
		if g == nil || g.Candidate == nil {
			return 0
		}
		return g.Candidate.Seq
	}
	// Canary hosts a canary analysis watches send their detail too: their
	// host-level checks go to the evaluation.
	type hostNS struct{ host, ns string }
	watchedCanary := map[hostNS]bool{}
	for _, w := range s.watchedHosts() {
		if w.cohort {
			watchedCanary[hostNS{w.ss.host, w.ns}] = true
		}
	}
	sums := map[key]*lehrpb.NamespaceHealth{}
	behind := map[string][]*lehrpb.HostReport{} // by namespace, the lowest host ids
	for _, ss := range s.sessionList() {
		ss.eachSubscribed(func(ns string, st *nsState) {
			nr := st.report
			g := goals[ns]
			if g != nil && g.Stable != nil {
				// Behind: neither what it holds nor what it last reported
				// is its goal's version.
				if want := g.For(ss.host).Seq; st.have.Seq < want && nr.GetVersion() < want {
					rep := nr
					if rep == nil {
						rep = &lehrpb.NamespaceReport{Namespace: ns, Version: st.have.Seq}
					}
					in := g.Candidate != nil && g.Cohort.Has(ss.host)
					behind[ns] = lowestHosts(append(behind[ns], &lehrpb.HostReport{HostId: ss.host, Cohort: in, Report: rep}), MaxBehindHosts)
				}
			}
			if nr == nil {
				return
			}
			in := g != nil && g.Candidate != nil && g.Cohort.Has(ss.host)
			k := key{ns, nr.GetVersion(), in}
			h := sums[k]
			if h == nil {
				h = &lehrpb.NamespaceHealth{Namespace: ns, Version: k.seq, Cohort: in, Candidate: candidate(g)}
				sums[k] = h
			}
			h.Agents++
			h.Consumers += nr.GetClients()
			h.ConsumersApplied += nr.GetClientsApplied()
			h.ConsumersRejected += nr.GetClientsRejected()
			h.LeasesExpired += nr.GetLeasesExpired()
			named := in && slices.Contains(g.Cohort.Hosts, ss.host) || watchedCanary[hostNS{ss.host, ns}]
			failing := nr.GetHostChecks().GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
			if named || failing || nr.GetUntrustedUpdates() > 0 || nr.GetClientsRejected() > 0 || nr.GetLeasesExpired() > 0 {
				hosts = append(hosts, &lehrpb.HostReport{HostId: ss.host, Cohort: in, Report: nr})
			}
		})
	}
	trouble := map[string]bool{}
	for _, h := range sums {
		if h.GetConsumersRejected() > 0 || h.GetLeasesExpired() > 0 {
			trouble[h.GetNamespace()] = true
		}
	}
	for _, h := range sums {
		if g := goals[h.GetNamespace()]; (g != nil && g.Candidate != nil) || trouble[h.GetNamespace()] {
			health = append(health, h)
		}
	}
	slices.SortFunc(health, func(a, b *lehrpb.NamespaceHealth) int {
		if c := strings.Compare(a.GetNamespace(), b.GetNamespace()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.GetVersion(), b.GetVersion()); c != 0 {
			return c
		}
		if a.GetCohort() == b.GetCohort() {
			return 0
		}
		if a.GetCohort() {
			return 1
		}
		return -1
	})
	slices.SortFunc(hosts, func(a, b *lehrpb.HostReport) int {
		if c := strings.Compare(a.GetHostId(), b.GetHostId()); c != 0 {
			return c
		}
		return strings.Compare(a.GetReport().GetNamespace(), b.GetReport().GetNamespace())
	})
	if len(hosts) > MaxHostReports {
		hosts = hosts[:MaxHostReports]
	}
	// Behind hosts in the room left, namespace by namespace.
	listed := map[hostNS]bool{}
	for _, hr := range hosts {
		listed[hostNS{hr.GetHostId(), hr.GetReport().GetNamespace()}] = true
	}
	nss := slices.Sorted(maps.Keys(behind))
	n := len(hosts)
	for _, ns := range nss {
		bs := behind[ns]
		slices.SortFunc(bs, func(a, b *lehrpb.HostReport) int { return strings.Compare(a.GetHostId(), b.GetHostId()) })
		for _, hr := range bs[:min(len(bs), MaxBehindHosts)] {
			if len(hosts) < MaxHostReports && !listed[hostNS{hr.GetHostId(), ns}] {
				hosts = append(hosts, hr)
			}
		}
	}
	if len(hosts) > n {
		slices.SortFunc(hosts, func(a, b *lehrpb.HostReport) int {
			return cmp.Or(strings.Compare(a.GetHostId(), b.GetHostId()), strings.Compare(a.GetReport().GetNamespace(), b.GetReport().GetNamespace()))
		})
	}
	return health, hosts
}

// MaxBehindHosts bounds the hosts per namespace Health details because
// they do not hold their goal yet: enough to name a few in a rollout's
// reason, flat in the zone's size.
const MaxBehindHosts = 5

// lowestHosts keeps at least the n reports of lowest host id in hs, and
// fewer than 2n: it sorts and trims only once hs holds 2n.
func lowestHosts(hs []*lehrpb.HostReport, n int) []*lehrpb.HostReport {
	if len(hs) < 2*n {
		return hs
	}
	slices.SortFunc(hs, func(a, b *lehrpb.HostReport) int { return strings.Compare(a.GetHostId(), b.GetHostId()) })
	return hs[:n]
}

// MaxSample bounds Goal.Sample.
const MaxSample = 1000

// Samples returns, for each goal whose candidate asks for a sample, the
// subscribed hosts with the lowest cohort positions (at most Goal.Sample,
// itself at most MaxSample), lowest first; sorted by namespace.
func (s *Server) Samples() []*lehrpb.CohortSample {
	var out []*lehrpb.CohortSample
	sessions := s.sessionList()
	for ns, g := range *s.goals.Load() {
		if g.Candidate == nil || g.Sample <= 0 {
			continue
		}
		type hp struct {
			host string
			pos  uint32
		}
		var hosts []hp
		for _, ss := range sessions {
			if ss.subscribed(ns) {
				hosts = append(hosts, hp{ss.host, cohort.Position(g.Cohort.Salt, ss.host)})
			}
		}
		slices.SortFunc(hosts, func(a, b hp) int { return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.host, b.host)) })
		smp := &lehrpb.CohortSample{Namespace: ns, Salt: g.Cohort.Salt}
		for _, h := range hosts[:min(len(hosts), g.Sample, MaxSample)] {
			smp.Hosts = append(smp.Hosts, h.host)
		}
		out = append(out, smp)
	}
	slices.SortFunc(out, func(a, b *lehrpb.CohortSample) int { return strings.Compare(a.GetNamespace(), b.GetNamespace()) })
	return out
}

// Lag is the number of connected agents subscribed to ns that do not hold
// their goal version (the candidate for the hosts of its cohort).
func (s *Server) Lag(ns string) int {
	g, ok := s.Goal(ns)
	n := 0
	for _, ss := range s.sessionList() {
		have, sub := ss.holds(ns)
		if !sub {
			continue
		}
		if !ok {
			n++
			continue
		}
		if have != g.For(ss.host).Ref() {
			n++
		}
	}
	return n
}

// Lags is Lag of every namespace a connected agent subscribes to, in one
// pass over the sessions: a scrape of the per-namespace lag gauges costs
// O(agents × subscriptions), not that times the namespaces (at 7,500
// agents × 10 of 71,000 namespaces, one Lag per gauge kept a scrape busy
// beyond 30 s).
func (s *Server) Lags() map[string]int {
	goals := *s.goals.Load()
	out := map[string]int{}
	for _, ss := range s.sessionList() {
		ss.mu.Lock()
		for ns, st := range ss.ns {
			if !st.subscribed {
				continue
			}
			n := out[ns]
			if g, ok := goals[ns]; !ok || st.have != g.For(ss.host).Ref() {
				n++
			}
			out[ns] = n
		}
		ss.mu.Unlock()
	}
	return out
}

// register adds a session, replacing (and closing) an older one of the same
// host. It fails once the server is closed.
func (s *Server) register(ss *session) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.sessions[ss.host]
	s.sessions[ss.host] = ss
	s.mu.Unlock()
	if old != nil {
		s.log.Info("agent reconnected; closing its previous connection", "host", ss.host)
		old.goodbye(codeSuperseded, "a newer connection of this host replaced this one")
	}
	return true
}

func (s *Server) unregister(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.host] == ss {
		delete(s.sessions, ss.host)
	}
	s.mu.Unlock()
}

// gsoEnv is quic-go's only switch for GSO, read when a transport starts
// (its first Listen or Dial); gsoEnvMu serialises listenQUIC's use of it.
const gsoEnv = "QUIC_GO_DISABLE_GSO"

var gsoEnvMu sync.Mutex

// listenQUIC starts tr listening, with GSO (Options.GSO) unless gso: it sets
// QUIC_GO_DISABLE_GSO for the start and unsets it after, unless the
// environment already had it, which then decides.
func listenQUIC(tr *quic.Transport, tc *tls.Config, qc *quic.Config, gso bool) (*quic.Listener, error) {
	gsoEnvMu.Lock()
	defer gsoEnvMu.Unlock()
	if _, set := os.LookupEnv(gsoEnv); set || gso {
		return tr.Listen(tc, qc)
	}
	if err := os.Setenv(gsoEnv, "true"); err != nil {
		return nil, fmt.Errorf("fanout: turn GSO off: %w", err)
	}
	defer os.Unsetenv(gsoEnv)
	return tr.Listen(tc, qc)
}
