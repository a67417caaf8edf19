package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// Close codes used by the fanout beyond wire's protocol violations.
const (
	codeGoingAway  = wire.CodeShuttingDown
	codeSuperseded = wire.CodeReplaced
)

// controlReadBuffer is the read buffer of an agent's control stream.
const controlReadBuffer = 512

// refusalBackoff paces the retries of a namespace whose update an agent
// refused: 100 ms after the first refusal, doubling up to 30 s while the
// agent keeps refusing.
var refusalBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 30 * time.Second}

// nsState is what the fanout knows of one namespace on one agent. An entry
// exists while the agent subscribes to the namespace, or while an update
// of it is in flight (it is forgotten once that is answered or timed out).
type nsState struct {
	subscribed bool
	// have is the version the agent holds, from its Hello, Subscribe,
	// Resync or latest accepted Ack; zero means nothing.
	have content.Ref
	// sending is the version of the update in flight (zero: none). At
	// most one per namespace, so updates are never reordered. deadline is
	// when the distributor stops waiting for its Ack (zero while the
	// update is still being written).
	sending  content.Ref
	deadline time.Time
	// held is what the update in flight holds of the agent's in-flight
	// budget (session.inflight), given back with its Ack.
	held int64
	// needSnapshot: the next update must be a snapshot (Resync or refusal).
	needSnapshot bool
	// refusals counts consecutive refused updates; notBefore delays the next
	// attempt after one.
	refusals  int
	notBefore time.Time
	// unavailable is the last Unavailable reason sent, to avoid repeats.
	unavailable lehrpb.UnavailableReason
	// admitted: the subscription counts against its domain's quota
	// (Server.admitSub); released when it ends.
	admitted bool
	// report is the agent's latest report about the namespace (nil: none
	// yet); forgotten with the namespace.
	report *lehrpb.NamespaceReport
	// signals is what the agent sent of its per-interval signals while a
	// canary analysis watches it (signals.go); nil otherwise.
	signals *lehrpb.NamespaceSignals
}

// session is one connected agent.
type session struct {
	srv  *Server
	conn *quic.Conn
	ctl  *wire.Control
	host string
	log  *slog.Logger
	// build is the build the agent announced, as counted (agentBuild).
	build string
	// quarantined is when the agent last moved an unopenable cache aside,
	// as it reported (zero: not since it started); under mu.
	quarantined time.Time
	// compact: the agent accepts compact Updates (wire.CapCompactUpdate).
	compact bool
	// inflight bounds the bytes of updates written to the agent and not
	// answered yet (Options.MaxInflightBytes); nil: no bound.
	inflight *semaphore.Weighted
	// signalsCap: the agent answers SignalsRequest (wire.CapSignals).
	signalsCap bool
	// signedGoals: the agent wants the signed goal with every Update
	// (wire.CapSignedGoals).
	signedGoals bool
	// redialCap: the agent takes Advice (wire.CapRedialSpread).
	redialCap bool
	// silence is the agent's own silence timeout (Hello.silence_timeout;
	// zero: it did not say). heardPackets and heardAt are the packets
	// received when adviseLoop last saw them change, and when: adviseLoop's
	// only (forgetUnheard).
	silence      time.Duration
	heardPackets uint64
	heardAt      time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// timer wakes the push rounds (wakeUp) for the earliest refusal
	// backoff or Ack deadline, at armed.
	timer *time.Timer

	mu sync.Mutex
	ns map[string]*nsState
	// armed is when timer fires next (zero: it is not armed). A push
	// round only ever moves it earlier, so a deadline at or after it
	// needs no kick: a round runs by then and arms the timer for it.
	armed time.Time
	// pushing: a goroutine runs push rounds (pushRounds), started by kick
	// and ending once a round leaves nothing asked of it — not one per
	// session for its lifetime, whose stack every idle agent's connection
	// would hold (bench/RESULTS.md, "Memory per agent"). again: a kick
	// came while it ran, so it runs one more round. stopped: the session
	// is ending; no round starts any more.
	pushing, again, stopped bool
	// advised is the redial spread and keepalive interval the agent was
	// last told; advise says an Advice with them is due (redial.go).
	advised advice
	advise  bool
}

// handle runs one agent connection to its end.
func (s *Server) handle(conn *quic.Conn) {
	log := s.log.With("remote", conn.RemoteAddr().String())
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// The connection stops counting as being admitted once welcomed
	// (below) or turned away (here).
	accepting(conn)
	defer admitted(conn)
	if conn.ConnectionState().TLS.DidResume {
		s.met.resumedHandshakes.Inc()
	} else {
		s.met.fullHandshakes.Inc()
	}

	hctx, hcancel := context.WithTimeout(ctx, s.opts.HandshakeTimeout)
	ctl, hello, err := wire.AcceptControl(hctx, conn, wire.Limits{})
	timedOut := hctx.Err() != nil
	hcancel()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			conn.CloseWithError(codeGoingAway, "distributor shutting down")
		case timedOut:
			log.Info("agent sent no Hello in time", "err", err)
			conn.CloseWithError(wire.CodeHandshakeTimeout, "no control stream and Hello in time")
		default:
			s.protocolError(conn, log, "read Hello", err)
		}
		return
	}
	log = log.With("host", hello.GetHostId())

	if hello.GetZone() != s.opts.Zone {
		reason := fmt.Sprintf("agent is in zone %q, this distributor serves %q", hello.GetZone(), s.opts.Zone)
		log.Warn("refusing agent", "reason", reason)
		conn.CloseWithError(wire.CodeWrongZone, reason)
		return
	}
	version, err := wire.Negotiate(hello)
	if err != nil {
		log.Warn("refusing agent", "err", err)
		conn.CloseWithError(wire.CodeUnsupportedVersion, err.Error())
		return
	}
	if err := checkIdentity(conn.ConnectionState().TLS, s.opts.Zone, hello.GetHostId()); err != nil {
		log.Warn("refusing agent", "err", err)
		conn.CloseWithError(wire.CodeUnauthorized, err.Error())
		return
	}

	caps := wire.CommonCapabilities(hello.GetCapabilities(), wire.Capabilities())
	ss := &session{
		srv:         s,
		conn:        conn,
		ctl:         ctl,
		host:        hello.GetHostId(),
		log:         log,
		build:       agentBuild(hello.GetAgentVersion()),
		compact:     wire.HasCapability(caps, wire.CapCompactUpdate),
		signalsCap:  wire.HasCapability(caps, wire.CapSignals),
		signedGoals: wire.HasCapability(caps, wire.CapSignedGoals),
		redialCap:   wire.HasCapability(caps, wire.CapRedialSpread),
		silence:     max(hello.GetSilenceTimeout().AsDuration(), 0),
		ns:          map[string]*nsState{},
		// No push round before the session is set up: kicks until then
		// are taken by its first round, started below.
		pushing: true,
	}
	ss.timer = time.AfterFunc(time.Hour, ss.wakeUp)
	ss.timer.Stop() // armed by a push round's wake time only
	if s.opts.MaxInflightBytes > 0 {
		ss.inflight = semaphore.NewWeighted(s.opts.MaxInflightBytes)
	}
	ss.ctx, ss.cancel = context.WithCancel(ctx)
	defer ss.cancel()
	if err := ss.applyHello(hello); err != nil {
		s.protocolError(conn, log, "Hello", err)
		return
	}
	welcome := &lehrpb.Welcome{
		ProtocolVersion:    version,
		DistributorId:      s.opts.DistributorID,
		Zone:               s.opts.Zone,
		DistributorVersion: s.opts.Version,
		MaxUpdateBytes:     uint64(wire.DefaultMaxUpdateFrame),
		Capabilities:       caps,
	}
	if s.opts.ReportInterval > 0 {
		welcome.ReportInterval = durationpb.New(s.opts.ReportInterval)
	}
	// The spread for the agents connected with this one; adviseLoop
	// updates it as their number changes.
	ss.advised = s.advice(s.connected() + 1)
	welcome.RedialSpread = durationpb.New(ss.advised.spread)
	if ss.advised.keepalive > 0 {
		welcome.KeepaliveInterval = durationpb.New(ss.advised.keepalive)
	}
	if err := ss.send(welcome); err != nil {
		log.Info("send Welcome", "err", err)
		conn.CloseWithError(wire.CodeInternalError, "send Welcome failed")
		return
	}
	if !s.register(ss) {
		ss.goodbye(codeGoingAway, "distributor shutting down")
		return
	}
	defer s.unregister(ss)
	s.want(ss.subscriptions())
	admitted(conn)
	log.Info("agent connected", "protocol_version", version, "cached", len(hello.GetCached()), "subscriptions", len(hello.GetSubscriptions()),
		"build", ss.build, "capabilities", caps)

	if s.refuseStreams {
		ss.wg.Go(ss.refuseStreams)
	}
	ss.mu.Lock()
	ss.pushing = false
	ss.mu.Unlock()
	ss.kick()
	err = ss.readLoop()
	ss.cancel()
	ss.mu.Lock()
	ss.stopped = true // no push round starts after this: wg.Wait below
	ss.mu.Unlock()
	ss.timer.Stop()
	ss.wg.Wait()
	ss.releaseAll()
	s.unwant(ss.subscriptions())
	log.Info("agent disconnected", "err", err)
}

// protocolError closes conn for a frame error, with the code wire assigns
// (protocol violation, or frame too large) and the error as reason.
func (s *Server) protocolError(conn *quic.Conn, log *slog.Logger, what string, err error) {
	var fe *wire.FrameError
	if !errors.As(err, &fe) {
		// Not the peer's fault as far as we can tell: the stream broke.
		log.Info("agent connection ended", "during", what, "err", err)
		conn.CloseWithError(wire.CodeInternalError, fmt.Sprintf("%s: %v", what, err))
		return
	}
	s.met.protocolErrors.Inc()
	err = fmt.Errorf("%s: %w", what, err)
	log.Warn("closing agent connection: protocol violation", "err", err)
	wire.CloseConn(conn, err)
}

// violation closes the session's connection for a semantic protocol error
// (a well-formed frame that breaks the rules).
func (ss *session) violation(format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	ss.srv.met.protocolErrors.Inc()
	ss.log.Warn("closing agent connection: protocol violation", "err", reason)
	ss.conn.CloseWithError(wire.CodeProtocolViolation, reason)
	return errors.New("fanout: protocol violation: " + reason)
}

// applyHello records the agent's subscriptions and what it holds of each.
// Cached entries of namespaces it does not subscribe to (agents before
// protocol change of issue 8 announced their whole cache) are ignored.
func (ss *session) applyHello(h *lehrpb.Hello) error {
	if n, limit := len(h.GetSubscriptions()), ss.srv.opts.MaxNamespacesPerAgent; n > limit {
		return &wire.FrameError{Code: wire.ErrMalformed, Type: wire.FrameHello, Reason: fmt.Sprintf("%d subscriptions; at most %d per agent", n, limit)}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, ns := range h.GetSubscriptions() {
		ss.ns[ns] = &nsState{subscribed: true}
	}
	for _, c := range h.GetCached() {
		if st := ss.ns[c.GetNamespace()]; st != nil {
			st.have = content.Ref{Seq: c.GetVersion(), Checksum: c.GetChecksum()}
		}
	}
	return nil
}

// send writes one frame on the control stream.
func (ss *session) send(msg proto.Message) error { return ss.ctl.Send(msg) }

// goodbye tells the agent why it is being closed, then closes.
func (ss *session) goodbye(code quic.ApplicationErrorCode, reason string) {
	_ = ss.ctl.Goodbye(code, reason, 0)
	ss.conn.CloseWithError(code, reason)
}

// kick asks for a push round: it starts a goroutine running rounds
// (pushRounds) unless one runs, which then runs one more. Not called with
// ss.mu held.
func (ss *session) kick() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.pushing:
		ss.again = true
	case !ss.stopped:
		ss.pushing = true
		ss.wg.Go(ss.pushRounds)
	}
}

// wakeUp is the timer's: the earliest backoff or deadline is due.
func (ss *session) wakeUp() {
	ss.mu.Lock()
	ss.armed = time.Time{}
	ss.mu.Unlock()
	ss.kick()
}

func (ss *session) subscribed(ns string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	st := ss.ns[ns]
	return st != nil && st.subscribed
}

// onReport keeps the agent's latest report of each namespace it subscribes
// to. A report split over several frames updates each namespace once.
func (ss *session) onReport(r *lehrpb.Report) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if q := r.GetCacheQuarantineTime(); q.IsValid() {
		ss.quarantined = q.AsTime()
	}
	for _, nr := range r.GetNamespaces() {
		if st := ss.ns[nr.GetNamespace()]; st != nil && st.subscribed {
			st.report = nr
		}
	}
}

// eachSubscribed calls f with every namespace the agent subscribes to,
// under the session's lock: f must not block or call back into the
// session. What the zone's sums read of each session without copying it.
func (ss *session) eachSubscribed(f func(ns string, st *nsState)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ns, st := range ss.ns {
		if st.subscribed {
			f(ns, st)
		}
	}
}

// holds returns the version the agent holds of ns (zero: nothing) and
// whether it subscribes to ns.
func (ss *session) holds(ns string) (have content.Ref, subscribed bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	st := ss.ns[ns]
	if st == nil {
		return content.Ref{}, false
	}
	return st.have, st.subscribed
}

// readLoop handles control frames until the stream or connection ends.
func (ss *session) readLoop() error {
	for {
		msg, err := ss.ctl.Recv()
		if err != nil {
			if err == io.EOF {
				ss.conn.CloseWithError(wire.CodeNoError, "control stream closed")
				return err
			}
			if ss.ctx.Err() == nil {
				ss.srv.protocolError(ss.conn, ss.log, "read control stream", err)
			}
			return err
		}
		switch m := msg.(type) {
		case *lehrpb.Subscribe:
			if err := ss.onSubscribe(m); err != nil {
				return err
			}
		case *lehrpb.Unsubscribe:
			ss.onUnsubscribe(m)
		case *lehrpb.Ack:
			if err := ss.onAck(m); err != nil {
				return err
			}
		case *lehrpb.Resync:
			if err := ss.onResync(m); err != nil {
				return err
			}
		case *lehrpb.Report:
			ss.onReport(m)
		case *lehrpb.Signals:
			ss.onSignals(m)
		case *lehrpb.Ping:
			if err := ss.send(&lehrpb.Pong{Nonce: m.GetNonce()}); err != nil {
				return err
			}
		case *lehrpb.Pong:
		case *lehrpb.Goodbye:
			ss.log.Info("agent said goodbye", "code", wire.CodeName(quic.ApplicationErrorCode(m.GetCode())), "reason", m.GetReason())
			ss.conn.CloseWithError(wire.CodeNoError, "goodbye")
			return wire.GoodbyeErr(m)
		}
	}
}

func (ss *session) onSubscribe(m *lehrpb.Subscribe) error {
	ss.mu.Lock()
	if limit := ss.srv.opts.MaxNamespacesPerAgent; len(ss.ns)+len(m.GetNamespaces()) > limit {
		ss.mu.Unlock()
		return ss.violation("Subscribe: more than %d namespaces for one agent", limit)
	}
	var started []string
	for _, c := range m.GetNamespaces() {
		st := ss.ns[c.GetNamespace()]
		if st == nil {
			st = &nsState{}
			ss.ns[c.GetNamespace()] = st
		}
		if !st.subscribed {
			started = append(started, c.GetNamespace())
		}
		st.subscribed = true
		st.unavailable = 0
		if st.sending.Seq == 0 {
			st.have = content.Ref{Seq: c.GetVersion(), Checksum: c.GetChecksum()}
		}
	}
	ss.mu.Unlock()
	ss.srv.want(started)
	ss.kick()
	return nil
}

// onUnsubscribe forgets the namespaces, but for those with an update in
// flight, which are forgotten once it is answered or times out; their
// subscriptions no longer count against their domains' quotas.
func (ss *session) onUnsubscribe(m *lehrpb.Unsubscribe) {
	var released, ended []string
	ss.mu.Lock()
	for _, ns := range m.GetNamespaces() {
		if st := ss.ns[ns]; st != nil {
			if st.subscribed {
				ended = append(ended, ns)
			}
			st.subscribed = false
			if st.admitted {
				st.admitted = false
				released = append(released, ns)
			}
			ss.forgetIfIdleLocked(ns, st)
		}
	}
	ss.mu.Unlock()
	ss.srv.unwant(ended)
	for _, ns := range released {
		ss.srv.releaseSub(ns)
	}
}

// subscriptions returns the namespaces the agent subscribes to.
func (ss *session) subscriptions() []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var nss []string
	for ns, st := range ss.ns {
		if st.subscribed {
			nss = append(nss, ns)
		}
	}
	return nss
}

// releaseAll uncounts every subscription the session holds; called once
// it has ended.
func (ss *session) releaseAll() {
	ss.mu.Lock()
	var released []string
	for ns, st := range ss.ns {
		if st.admitted {
			st.admitted = false
			released = append(released, ns)
		}
	}
	ss.mu.Unlock()
	for _, ns := range released {
		ss.srv.releaseSub(ns)
	}
}

// overQuota reports whether the session waits for room in domain d's
// subscription quota.
func (ss *session) overQuota(d string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ns, st := range ss.ns {
		if st.unavailable == lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA && strings.HasPrefix(ns, d+"/") {
			return true
		}
	}
	return false
}

// releaseLocked gives back what st's update held of the in-flight budget.
func (ss *session) releaseLocked(st *nsState) {
	if st.held > 0 {
		ss.inflight.Release(st.held)
		st.held = 0
	}
}

// forgetIfIdleLocked drops the entry of ns when the agent neither
// subscribes to it nor has an update of it in flight.
func (ss *session) forgetIfIdleLocked(ns string, st *nsState) {
	if !st.subscribed && st.sending.Seq == 0 {
		delete(ss.ns, ns)
	}
}

// onAck matches an Ack to the update in flight it answers. An answer to
// no update in flight (it came after the update's deadline, or crossed an
// Unsubscribe) is counted and ignored: with deadlines, late answers are
// normal, not a protocol violation. A positive Ack for the version sent
// but with another checksum than the one sent means the agent did not
// apply it (an agent older than the repair rule calls a repair "stale"):
// it counts as a refusal, so a repeated one backs off.
func (ss *session) onAck(m *lehrpb.Ack) error {
	ns := m.GetNamespace()
	ss.mu.Lock()
	st := ss.ns[ns]
	var answers bool
	switch {
	case st == nil || st.sending.Seq == 0:
	case m.GetUpdateVersion() != 0:
		answers = m.GetUpdateVersion() == st.sending.Seq
	default: // an agent that does not name the update it answers
		answers = !m.GetOk() || m.GetVersion() == st.sending.Seq
	}
	if !answers {
		ss.mu.Unlock()
		ss.srv.met.strayAcks.Inc()
		ss.log.Debug("ignoring an Ack of no update in flight", "namespace", ns, "update_version", m.GetUpdateVersion(), "version", m.GetVersion(), "ok", m.GetOk())
		return nil
	}
	sent := st.sending
	st.sending, st.deadline = content.Ref{}, time.Time{}
	ss.releaseLocked(st)
	ok, why := m.GetOk(), m.GetError()
	if ok && m.GetVersion() == sent.Seq && m.GetChecksum() != sent.Checksum {
		ok, why = false, fmt.Sprintf("acknowledged version %d with checksum %s, not the %s sent", sent.Seq, m.GetChecksum(), sent.Checksum)
	}
	if ok {
		st.have = content.Ref{Seq: m.GetVersion(), Checksum: m.GetChecksum()}
		st.needSnapshot = false
		st.refusals = 0
		st.notBefore = time.Time{}
	} else {
		// Refused: the next attempt is a snapshot, after a backoff that
		// grows while the agent keeps refusing (a push round wakes for it).
		st.needSnapshot = true
		st.refusals++
		st.notBefore = ss.srv.now().Add(refusalBackoff.Ceiling(st.refusals - 1))
	}
	// a push round has something to do only if the namespace moved on while
	// the update was in flight (plan skips a namespace in flight), or the
	// update was refused: an Ack of the goal wakes nobody.
	replan := !ok || ss.pendingLocked(ns, st)
	ss.forgetIfIdleLocked(ns, st)
	ss.mu.Unlock()
	if ok {
		ss.srv.met.acks.Inc()
	} else {
		ss.srv.met.refusals.Inc()
		ss.log.Warn("agent refused an update", "namespace", ns, "version", sent.Seq, "err", why)
	}
	if replan {
		ss.kick()
	}
	return nil
}

// pendingLocked says whether plan may have an update of ns to send the
// agent now that none is in flight: it subscribes, and it needs a snapshot
// or holds another version than its goal (or there is no goal, of which
// plan tells it). A goal set after this reads the goals kicks the session
// itself (SetGoal).
func (ss *session) pendingLocked(ns string, st *nsState) bool {
	if !st.subscribed {
		return false
	}
	if st.needSnapshot {
		return true
	}
	goal := (*ss.srv.goals.Load())[ns]
	if goal == nil {
		return true
	}
	return update.Plan(st.have, goal.For(ss.host).Ref(), true) != update.SendNothing
}

// onResync notes that the agent wants a snapshot. A Resync for a namespace
// it does not subscribe to (it raced its own Unsubscribe) is ignored.
func (ss *session) onResync(m *lehrpb.Resync) error {
	ss.mu.Lock()
	st := ss.ns[m.GetNamespace()]
	if st == nil || !st.subscribed {
		ss.mu.Unlock()
		ss.log.Debug("ignoring a Resync of a namespace not subscribed", "namespace", m.GetNamespace())
		return nil
	}
	st.needSnapshot = true
	if st.sending.Seq == 0 {
		st.have = content.Ref{Seq: m.GetHaveVersion(), Checksum: m.GetHaveChecksum()}
	}
	// An update in flight stays in flight until its Ack: the snapshot is
	// sent after it, never alongside, so updates are not reordered.
	ss.mu.Unlock()
	ss.srv.met.resyncs.Inc()
	ss.log.Info("agent asked for a resync", "namespace", m.GetNamespace(), "reason", m.GetReason().String(), "detail", m.GetDetail())
	ss.kick()
	return nil
}

// refuseStreams treats any stream the agent opens after the control stream
// as a protocol violation: agents never open update streams. It runs only
// when the QUIC configuration lets agents open such streams at all (see
// Server.refuseStreams); with wire.ServerQUICConfig quic-go refuses them.
func (ss *session) refuseStreams() {
	errc := make(chan string, 2)
	ss.wg.Go(func() {
		if _, err := ss.conn.AcceptUniStream(ss.ctx); err == nil {
			errc <- "agents must not open unidirectional streams"
		} else {
			errc <- ""
		}
	})
	ss.wg.Go(func() {
		if _, err := ss.conn.AcceptStream(ss.ctx); err == nil {
			errc <- "agents open exactly one bidirectional (control) stream"
		} else {
			errc <- ""
		}
	})
	for range 2 {
		if reason := <-errc; reason != "" {
			ss.violation("%s", reason)
			ss.cancel()
		}
	}
}

// job is one update to push.
type job struct {
	ns   string
	goal *content.Version
	// base is the version the agent holds, to patch from.
	base     content.Ref
	snapshot bool
	// proof is the signed goal naming goal for the agent's host, sent
	// with the update (wire.CapSignedGoals); nil for none.
	proof *lehrpb.GoalState
}

// pushRounds runs push rounds until one ends with no kick since it began,
// or the session ends. A frame it cannot send ends the session through
// fail, which closes the connection: ending only the rounds would leave
// the read loop — and with it the session, registered and counted
// connected — up, pushing nothing while the agent's keepalives keep the
// connection alive.
func (ss *session) pushRounds() {
	for ss.ctx.Err() == nil && ss.pushRound() {
		ss.mu.Lock()
		if !ss.again {
			ss.pushing = false
			ss.mu.Unlock()
			return
		}
		ss.again = false
		ss.mu.Unlock()
	}
}

// pushRound starts the pushes due now, sends the Unavailable and Advice
// frames due, and arms the timer for the next moment something is due. It
// reports false when a frame could not be sent (the session is ending).
func (ss *session) pushRound() bool {
	jobs, unavailable, wake := ss.plan()
	// The timer only moves earlier: one armed for a deadline since
	// answered fires once, for nothing, rather than every push waking
	// a round to arm it (push kicks only for a deadline before it).
	ss.mu.Lock()
	if !wake.IsZero() && (ss.armed.IsZero() || wake.Before(ss.armed)) {
		ss.armed = wake
		ss.timer.Reset(max(wake.Sub(ss.srv.now()), 0))
	}
	ss.mu.Unlock()
	for _, u := range unavailable {
		if err := ss.send(u); err != nil {
			ss.fail("send Unavailable", err)
			return false
		}
		ss.srv.met.unavailable.Inc()
		if u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND && ss.srv.opts.DomainWanted != nil && !ss.srv.knowsDomain(u.GetNamespace()) {
			ss.srv.opts.DomainWanted(u.GetNamespace())
		}
	}
	if a := ss.takeAdvice(); a != nil {
		if err := ss.send(a); err != nil {
			ss.fail("send Advice", err)
			return false
		}
		ss.srv.met.advice.Inc()
	}
	for _, j := range jobs {
		ss.wg.Go(func() { ss.push(j) })
	}
	return true
}

// plan decides, under the session lock, which namespaces need an update now
// and marks them in flight; it gives up on updates unanswered past their
// deadline. wake is the next moment plan has something to do: the end of
// the earliest refusal backoff or Ack deadline (zero: none is pending).
func (ss *session) plan() (jobs []job, unavailable []*lehrpb.Unavailable, wake time.Time) {
	goals := *ss.srv.goals.Load()
	now := ss.srv.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	earliest := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for ns, st := range ss.ns {
		if st.sending.Seq != 0 {
			if st.deadline.IsZero() {
				continue // being written
			}
			if now.Before(st.deadline) {
				earliest(st.deadline)
				continue
			}
			// Unanswered past its deadline: stop waiting and plan again,
			// as a snapshot since what the agent holds is unknown.
			ss.srv.met.ackTimeouts.Inc()
			ss.log.Warn("update unanswered; planning the namespace again", "namespace", ns, "version", st.sending.Seq, "timeout", ss.srv.opts.AckTimeout)
			st.sending, st.deadline = content.Ref{}, time.Time{}
			ss.releaseLocked(st)
			st.needSnapshot = true
			ss.forgetIfIdleLocked(ns, st)
		}
		if !st.subscribed {
			continue
		}
		goal := goals[ns]
		// Readers first: a domain whose readers do not admit the zone has
		// no goal here at all (control withholds it), and the host should
		// hear why.
		if why := ss.srv.forbidden(ns, ss.host); why != "" {
			if st.unavailable != lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN {
				st.unavailable = lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN
				unavailable = append(unavailable, &lehrpb.Unavailable{Namespace: ns, Reason: st.unavailable,
					Detail: why + ": this host may not receive the namespace; it keeps what it holds"})
			}
			continue
		}
		if goal == nil {
			if p := ss.srv.opts.Pending; p != nil && p(ns) {
				continue // SetGoal kicks the session once it is loaded
			}
			if st.unavailable != lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND {
				st.unavailable = lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND
				detail := "this distributor knows no goal state for the namespace in its zone; an update follows if one appears"
				if st.have.Seq > 0 {
					// The host holds a version, so the namespace had a
					// goal: it was deleted (DeleteNamespace), or its zone.
					detail = fmt.Sprintf("the namespace has no goal state in this zone any more (deleted upstream); the host keeps serving version %d, and an update follows if it is published again", st.have.Seq)
				}
				unavailable = append(unavailable, &lehrpb.Unavailable{Namespace: ns, Reason: st.unavailable, Detail: detail})
			}
			continue
		}
		if !st.admitted {
			ok, why := ss.srv.admitSub(ns)
			if !ok {
				if st.unavailable != lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA {
					st.unavailable = lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA
					unavailable = append(unavailable, &lehrpb.Unavailable{Namespace: ns, Reason: st.unavailable, Detail: why})
				}
				continue
			}
			st.admitted = true
		}
		st.unavailable = 0
		g := goal.For(ss.host)
		// Whether the agent's version is available here is checked by push;
		// assume it is when planning.
		action := update.Plan(st.have, g.Ref(), true)
		if st.needSnapshot {
			action = update.SendSnapshot
		}
		if action == update.SendNothing {
			continue
		}
		if now.Before(st.notBefore) {
			earliest(st.notBefore)
			continue
		}
		st.sending = g.Ref()
		j := job{ns: ns, goal: g, base: st.have, snapshot: action == update.SendSnapshot}
		if ss.signedGoals {
			j.proof = goal.Proof
		}
		jobs = append(jobs, j)
	}
	return jobs, unavailable, wake
}

// push builds one update and writes it on its own stream, then starts the
// wait for its Ack (Options.AckTimeout). A failure to build or write ends
// the session and closes the connection: the agent fails over, reconnects
// and announces what it holds.
func (ss *session) push(j job) {
	frame, snapshot, err := ss.srv.build(ss.ctx, j, ss.compact)
	if errors.Is(err, errGoalUnavailable) && ss.ctx.Err() == nil {
		// Evicted and not fetched again (control unreachable): the agent
		// keeps what it holds, and the namespace is planned again after a
		// backoff; the connection stays up.
		ss.mu.Lock()
		if st := ss.ns[j.ns]; st != nil && st.sending.Seq == j.goal.Seq && st.deadline.IsZero() {
			st.sending = content.Ref{}
			st.refusals++
			st.notBefore = ss.srv.now().Add(refusalBackoff.Ceiling(st.refusals - 1))
		}
		ss.mu.Unlock()
		ss.log.Warn("goal version not in memory and not fetched; the agent keeps what it holds until it can be", "namespace", j.ns, "version", j.goal.Seq, "err", err)
		ss.kick()
		return
	}
	if err != nil {
		ss.fail("build an update", fmt.Errorf("%s@%d: %w", j.ns, j.goal.Seq, err))
		return
	}
	// Counted before writing, so the counters never lag what an agent has
	// seen (tests compare them right after an agent applied an update).
	ss.srv.met.pushed(snapshot, len(frame))
	// Crash point of the kill matrix (testenv/chaos): the distributor dies
	// with half a snapshot written.
	// gofail: var distributorMidSnapshot struct{}
	// if snapshot {
	// 	if s, err := ss.conn.OpenUniStreamSync(ss.ctx); err == nil {
	// 		_, _ = s.Write(frame[:len(frame)/2])
	// 	}
	// 	time.Sleep(100 * time.Millisecond) // let the half leave
	// 	panic("failpoint distributorMidSnapshot: half a snapshot written")
	// }

	// The agent's in-flight budget: an agent applies what it reads before
	// answering, and a cold one is sent every namespace at once; bounding
	// the unanswered bytes per agent bounds its memory peak (bench:
	// bighost). Only this push waits; the budget comes back with the Ack.
	if ss.inflight != nil {
		w := min(int64(len(frame)), ss.srv.opts.MaxInflightBytes)
		if err := ss.inflight.Acquire(ss.ctx, w); err != nil {
			return // the session is ending
		}
		ss.mu.Lock()
		if st := ss.ns[j.ns]; st != nil && st.sending.Seq == j.goal.Seq && st.deadline.IsZero() {
			st.held = w
		} else {
			ss.inflight.Release(w)
		}
		ss.mu.Unlock()
	}
	// The domain's outbound limit: only this push waits (each runs in its
	// own goroutine); the Ack deadline starts once it is written.
	if err := ss.srv.throttle(ss.ctx, j.ns, len(frame)); err != nil {
		return // the session is ending
	}
	// The write's progress is bounded by the Ack timeout too: an agent
	// that stopped taking streams or bytes would otherwise hold this push,
	// unanswered and without a deadline, for as long as its keepalives
	// keep the connection up.
	if err := wire.SendUpdate(ss.ctx, ss.conn, frame, ss.srv.opts.AckTimeout); err != nil {
		if errors.Is(err, wire.ErrStalled) {
			ss.srv.met.stalledPushes.Inc()
		}
		ss.fail("push an update", fmt.Errorf("%s@%d: %w", j.ns, j.goal.Seq, err))
		return
	}
	ss.mu.Lock()
	var arm bool
	if st := ss.ns[j.ns]; st != nil && st.sending.Seq == j.goal.Seq && st.deadline.IsZero() {
		st.deadline = ss.srv.now().Add(ss.srv.opts.AckTimeout)
		// a push round arms the timer for the deadline, unless it fires
		// before it anyway.
		arm = ss.armed.IsZero() || st.deadline.Before(ss.armed)
	}
	ss.mu.Unlock()
	if arm {
		ss.kick()
	}
	if ss.log.Enabled(ss.ctx, slog.LevelDebug) { // not boxing the arguments of every delivery for nothing
		ss.log.Debug("pushed update", "namespace", j.ns, "version", j.goal.Seq, "snapshot", snapshot, "bytes", len(frame))
	}
}

// fail ends the session because doing what failed: it closes the
// connection, so the read loop ends too and the agent fails over, instead
// of leaving a connection up on which nothing is pushed any more.
func (ss *session) fail(doing string, err error) {
	if ss.ctx.Err() != nil {
		return // ending already
	}
	ss.log.Warn("closing agent connection: cannot "+doing, "err", err)
	ss.conn.CloseWithError(wire.CodeInternalError, "distributor cannot "+doing)
	ss.cancel()
}

// errGoalUnavailable is build's error when the goal version is neither in
// memory nor fetched (Options.Versions failed: control unreachable).
var errGoalUnavailable = errors.New("goal version unavailable")

// build returns the encoded Update frame for j: a patch from the agent's
// version when that version is available here (from memory or control) and
// its checksum matches, otherwise a snapshot. update.Build also falls
// back to a snapshot when a patch would not be smaller. compact says the
// agent negotiated wire.CapCompactUpdate.
func (s *Server) build(ctx context.Context, j job, compact bool) (frame []byte, snapshot bool, err error) {
	g := j.goal
	// The goal's content comes from Options.Versions, which may have
	// evicted it (a distributor's memory is bounded; see Goal): fetched
	// again then, and only when no encoded frame is at hand.
	withContent := func() (*content.Version, error) {
		fctx, cancel := context.WithTimeout(ctx, s.opts.FetchTimeout)
		defer cancel()
		v, err := s.opts.Versions.Get(fctx, j.ns, g.Ref())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errGoalUnavailable, err)
		}
		return v, nil
	}
	if !j.snapshot {
		// Most agents of a fan-out need the patch another agent's push
		// built already, from the same base: it is a patch from the
		// version the agent holds, its checksum checked when it was built.
		k := memoKey{ns: j.ns, base: j.base, goal: g.Ref(), compact: compact, proof: string(j.proof.GetSignature())}
		if frame, snap, ok := s.memo.peek(k); ok {
			return frame, snap, nil
		}
		fctx, cancel := context.WithTimeout(ctx, s.opts.FetchTimeout)
		base, err := s.opts.Versions.Get(fctx, j.ns, j.base)
		cancel()
		switch {
		case err != nil:
			s.log.Info("agent's version unavailable; sending a snapshot", "namespace", j.ns, "version", j.base.Seq, "err", err)
		case base.Checksum != j.base.Checksum:
			s.log.Info("agent's checksum differs; sending a snapshot", "namespace", j.ns, "version", j.base.Seq, "agent", j.base.Checksum, "control", base.Checksum)
		default:
			k := memoKey{ns: j.ns, base: base.Ref(), goal: g.Ref(), compact: compact, proof: string(j.proof.GetSignature())}
			frame, snap, err := s.memo.get(k, func() ([]byte, bool, error) {
				g, err := withContent()
				if err != nil {
					return nil, false, err
				}
				u, err := update.Build(base, g)
				if err != nil {
					return nil, false, err
				}
				u.Goal = j.proof
				b, err := encodeUpdate(u, compact)
				return b, u.GetSnapshot(), err
			})
			if err != nil {
				return nil, false, fmt.Errorf("encode update %s@%d..%d: %w", j.ns, base.Seq, g.Seq, err)
			}
			return frame, snap, nil
		}
	}
	k := memoKey{ns: j.ns, snapshot: true, goal: g.Ref(), compact: compact, proof: string(j.proof.GetSignature())}
	frame, _, err = s.memo.get(k, func() ([]byte, bool, error) {
		g, err := withContent()
		if err != nil {
			return nil, true, err
		}
		u, err := update.Build(nil, g)
		if err != nil {
			return nil, true, err
		}
		u.Goal = j.proof
		b, err := encodeUpdate(u, compact)
		return b, true, err
	})
	if err != nil {
		return nil, true, fmt.Errorf("encode snapshot %s@%d: %w", j.ns, g.Seq, err)
	}
	return frame, true, nil
}

// encodeUpdate encodes u as a frame, in compact form for an agent that
// negotiated wire.CapCompactUpdate.
func encodeUpdate(u *lehrpb.Update, compact bool) ([]byte, error) {
	if compact {
		c, err := wire.CompactUpdate(u)
		if err != nil {
			return nil, err
		}
		u = c
	}
	return wire.AppendFrame(nil, u, wire.Limits{})
}
