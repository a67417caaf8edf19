package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// session is one connection to one distributor.
type session struct {
	c    *Client
	addr string
	id   tlsconfig.Identity // the distributor's, from its certificate
	log  *slog.Logger
	conn *quic.Conn
	ctl  *wire.Control
	ctx  context.Context // ends when the session does
	stop context.CancelCauseFunc
	wg   sync.WaitGroup
	live *wire.Liveness // keepalives and the silence timeout

	closeOnce   sync.Once
	subsChanged chan struct{}   // buffered 1: Client.subs changed
	sent        map[string]bool // subscriptions the distributor knows; syncSubs only

	mu      sync.Mutex
	welcome *lehrpb.Welcome
	// unavailable holds the distributor's last Unavailable of each
	// namespace, until an update of it is applied.
	unavailable map[string]*lehrpb.Unavailable
	queues      map[string]*nsQueue
}

// runSession dials addr, runs the connection until it fails or ctx ends,
// and waits for every goroutine of the session. established reports
// whether Welcome arrived.
func (c *Client) runSession(ctx context.Context, addr, lastConnected string) (established bool, err error) {
	// Hello announces the subscriptions with what the agent holds of each,
	// as many as fit in half a control frame; the rest follow in Subscribe
	// frames (syncSubs). What the agent holds but does not subscribe to is
	// not announced: a distributor has no use for it, and it could outgrow
	// any frame.
	var cached []*lehrpb.CachedNamespace
	var subs []string
	size := 0
	for _, ns := range c.Subscriptions() {
		e := cachedNS(ns, c.opts.Handler.Held(ns)) // no lock held: Handler is called lock-free
		if size += 2*len(ns) + proto.Size(e) + 8; size > frameBudget {
			break
		}
		cached, subs = append(cached, e), append(subs, ns)
	}
	hello := &lehrpb.Hello{
		ProtocolVersion:    wire.ProtocolVersion,
		MinProtocolVersion: wire.MinProtocolVersion,
		HostId:             c.opts.HostID,
		Zone:               c.opts.Zone,
		Labels:             c.opts.Labels,
		Cached:             cached,
		Subscriptions:      subs,
		AgentVersion:       c.opts.AgentVersion,
		// Every Update is read with wire.ReadUpdateStream, which accepts
		// each form wire implements (compact updates included); signed
		// goals are asked for only when they are checked.
		Capabilities: c.capabilities(),
		// So the distributor forgets this connection when it stops
		// hearing it about when this agent gives the connection up.
		SilenceTimeout: durationpb.New(c.opts.SilenceTimeout),
	}

	dctx, cancel := context.WithTimeout(ctx, c.opts.HandshakeTimeout)
	defer cancel()
	conn, err := quic.DialAddr(dctx, addr, c.tls, c.quic)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", addr, err)
	}
	// Who answered, before anything is sent: an imposter must not learn
	// the subscriptions, nor deliver anything.
	id, err := CheckDistributor(conn.ConnectionState().TLS, c.opts.Zone)
	if err != nil {
		c.refusedDistributors.Inc()
		conn.CloseWithError(wire.CodeUnauthorized, truncate(err.Error(), 256))
		return false, fmt.Errorf("distributor %s: %w", addr, err)
	}
	ctl, welcome, err := wire.OpenControl(dctx, conn, hello, wire.Limits{})
	if err != nil {
		wire.CloseConn(conn, err)
		return false, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	if welcome.GetZone() != c.opts.Zone {
		err := fmt.Errorf("distributor %s serves zone %q, agent is in %q", addr, welcome.GetZone(), c.opts.Zone)
		conn.CloseWithError(wire.CodeWrongZone, err.Error())
		return false, err
	}
	if c.opts.Verifier != nil && !wire.HasCapability(welcome.GetCapabilities(), wire.CapSignedGoals) {
		err := fmt.Errorf("%w: distributor %s does not send signed goals (capability %q), and this agent verifies what it applies (--trusted-keys): upgrade the distributor", ErrUntrusted, addr, wire.CapSignedGoals)
		conn.CloseWithError(wire.CodeUntrusted, err.Error())
		return false, err
	}
	c.setRedialSpread(welcome.GetRedialSpread())
	sctx, stop := context.WithCancelCause(ctx)
	s := &session{
		c: c, addr: addr, id: id, log: c.log.With("distributor", addr),
		conn: conn, ctl: ctl, ctx: sctx, stop: stop,
		subsChanged: make(chan struct{}, 1),
		sent:        map[string]bool{},
		welcome:     welcome,
		unavailable: map[string]*lehrpb.Unavailable{},
		queues:      map[string]*nsQueue{},
	}
	s.live = wire.NewLiveness(conn, c.opts.SilenceTimeout, c.quic.MaxIdleTimeout, func(nonce uint64) error {
		return s.ctl.Send(&lehrpb.Ping{Nonce: nonce})
	})
	s.live.Advise(welcome.GetKeepaliveInterval().AsDuration())
	for _, ns := range subs {
		s.sent[ns] = true
	}
	defer s.close()
	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
	s.notifySubs() // catch up with changes made during the handshake

	if lastConnected != "" && lastConnected != addr {
		c.failovers.Inc()
	}
	c.connectedVal.Store(1)
	defer c.connectedVal.Store(0)
	s.log.Info("connected to distributor", "distributor_id", welcome.GetDistributorId(), "identity", id.String(),
		"subscriptions_in_hello", len(subs), "distributor_build", welcome.GetDistributorVersion(), "capabilities", welcome.GetCapabilities())

	interval := c.opts.ReportInterval
	if d := welcome.GetReportInterval(); d != nil && d.AsDuration() > 0 {
		interval = d.AsDuration()
	}
	// Each of these runs for the session's life; the first to return ends
	// the session with its error.
	s.wg.Go(func() { s.fail(s.readControl()) })
	s.wg.Go(func() { s.fail(s.acceptUpdates()) })
	s.wg.Go(func() { s.fail(s.report(interval)) })
	s.wg.Go(func() { s.fail(s.syncSubs()) })
	s.wg.Go(func() {
		if err := s.live.Run(sctx); err != nil {
			s.fail(err)
		}
	})
	<-sctx.Done()
	return true, context.Cause(sctx)
}

// fail ends the session because of err (nil: a session goroutine ended
// without one), closing the connection with the matching code.
func (s *session) fail(err error) {
	if err == nil {
		err = errors.New("session goroutine ended")
	}
	s.failCode(wire.CodeFor(err), err)
}

func (s *session) failCode(code quic.ApplicationErrorCode, err error) {
	s.closeOnce.Do(func() {
		s.stop(err)
		if _, _, isClose := wire.CloseCode(err); isClose {
			code = wire.CodeNoError // the connection is closed already
		}
		s.conn.CloseWithError(code, truncate(err.Error(), 256))
	})
}

// close unpublishes the session, closes the connection and waits for every
// goroutine it started.
func (s *session) close() {
	s.c.mu.Lock()
	if s.c.sess == s {
		s.c.sess = nil
	}
	s.c.mu.Unlock()
	s.failCode(wire.CodeNoError, errors.New("agent closing the connection"))
	s.wg.Wait()
}

func (s *session) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	unavailable := make(map[string]string, len(s.unavailable))
	for ns, u := range s.unavailable {
		unavailable[ns] = u.GetReason().String()
	}
	return Status{
		Distributor:         s.addr,
		DistributorID:       s.welcome.GetDistributorId(),
		DistributorIdentity: s.id.String(),
		Connected:           true,
		Unavailable:         unavailable,
	}
}

// send writes msg on the control stream. A write error ends the session.
func (s *session) send(msg proto.Message) {
	if err := s.ctl.Send(msg); err != nil {
		s.fail(fmt.Errorf("send to %s: %w", s.addr, err))
	}
}

func (s *session) notifySubs() {
	select {
	case s.subsChanged <- struct{}{}:
	default:
	}
}

// frameBudget bounds what the agent puts in one Hello, Subscribe or
// Unsubscribe frame: half the control-frame limit, so no subscription set
// can make a frame the distributor must refuse.
const frameBudget = wire.DefaultMaxControlFrame / 2

// syncSubs sends Subscribe and Unsubscribe frames whenever the client's
// subscription set differs from what the distributor was told, each frame
// within frameBudget. One goroutine does it, so frames for one namespace
// are never reordered.
func (s *session) syncSubs() error {
	for {
		select {
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-s.subsChanged:
		}
		want := s.c.Subscriptions()
		wantSet := make(map[string]bool, len(want))
		for _, ns := range want {
			wantSet[ns] = true
		}
		var drop []string
		for ns := range s.sent {
			if !wantSet[ns] {
				drop = append(drop, ns)
			}
		}
		slices.Sort(drop)
		for len(drop) > 0 {
			msg, size := &lehrpb.Unsubscribe{}, 0
			for len(drop) > 0 && (size == 0 || size+len(drop[0])+4 <= frameBudget) {
				size += len(drop[0]) + 4
				msg.Namespaces, drop = append(msg.Namespaces, drop[0]), drop[1:]
			}
			s.send(msg)
			s.mu.Lock()
			for _, ns := range msg.Namespaces {
				delete(s.sent, ns)
				delete(s.unavailable, ns)
			}
			s.mu.Unlock()
		}
		var add []string
		for _, ns := range want {
			if !s.sent[ns] {
				add = append(add, ns)
			}
		}
		for len(add) > 0 {
			msg, size := &lehrpb.Subscribe{}, 0
			for len(add) > 0 {
				e := cachedNS(add[0], s.c.opts.Handler.Held(add[0]))
				n := proto.Size(e) + 8
				if size > 0 && size+n > frameBudget {
					break
				}
				size += n
				msg.Namespaces, add = append(msg.Namespaces, e), add[1:]
			}
			s.send(msg)
			for _, e := range msg.Namespaces {
				s.sent[e.GetNamespace()] = true
			}
		}
	}
}

func goodbyeErr(g *lehrpb.Goodbye) error {
	return &wire.GoodbyeError{
		Code:       quic.ApplicationErrorCode(g.GetCode()),
		Reason:     g.GetReason(),
		RetryAfter: g.GetRetryAfter().AsDuration(),
	}
}

// readControl reads the distributor's control frames after Welcome.
func (s *session) readControl() error {
	for {
		msg, err := s.ctl.Recv()
		if err == io.EOF {
			return errors.New("distributor closed the control stream")
		}
		if err != nil {
			return fmt.Errorf("read control stream: %w", err)
		}
		switch m := msg.(type) {
		case *lehrpb.Ping:
			s.send(&lehrpb.Pong{Nonce: m.GetNonce()})
		case *lehrpb.Pong:
		case *lehrpb.Unavailable:
			s.log.Info("distributor cannot serve namespace", "namespace", m.GetNamespace(),
				"reason", m.GetReason(), "detail", m.GetDetail())
			s.mu.Lock()
			s.unavailable[m.GetNamespace()] = m
			s.mu.Unlock()
		case *lehrpb.SignalsRequest:
			s.send(signals.Answer(m, s.c.opts.Handler.Signals, frameBudget))
		case *lehrpb.Advice:
			s.c.setRedialSpread(m.GetRedialSpread())
			s.live.Advise(m.GetKeepaliveInterval().AsDuration())
		case *lehrpb.Goodbye:
			return goodbyeErr(m)
		}
	}
}

// report sends a Report every interval, split into frames within
// frameBudget that share its time.
func (s *session) report(interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-t.C:
		}
		r := s.c.opts.Handler.Report()
		if r == nil {
			continue
		}
		if r.Time == nil {
			r.Time = timestamppb.Now()
		}
		for _, part := range splitReport(r) {
			s.send(part)
		}
	}
}

// splitReport cuts r into Reports of at most frameBudget bytes each, every
// one with r's time and other fields; r itself when it fits.
func splitReport(r *lehrpb.Report) []*lehrpb.Report {
	if proto.Size(r) <= frameBudget {
		return []*lehrpb.Report{r}
	}
	head := proto.CloneOf(r)
	head.Namespaces = nil
	base := proto.Size(head)
	var parts []*lehrpb.Report
	var cur *lehrpb.Report
	size := 0
	for _, nr := range r.GetNamespaces() {
		n := proto.Size(nr) + 8 // tag and length prefix
		if cur == nil || (len(cur.Namespaces) > 0 && size+n > frameBudget) {
			cur = proto.CloneOf(head)
			parts = append(parts, cur)
			size = base
		}
		cur.Namespaces = append(cur.Namespaces, nr)
		size += n
	}
	return parts
}

// acceptUpdates accepts update streams and reads each on its own goroutine.
func (s *session) acceptUpdates() error {
	for {
		st, err := s.conn.AcceptUniStream(s.ctx)
		if err != nil {
			return fmt.Errorf("accept update stream: %w", err)
		}
		s.wg.Go(func() {
			if err := s.readUpdate(st); err != nil {
				s.fail(err)
			}
		})
	}
}

// readUpdate reads the one Update of a stream and queues it.
func (s *session) readUpdate(st *quic.ReceiveStream) error {
	u, err := wire.ReadUpdateStream(s.ctx, st, wire.Limits{})
	if err != nil {
		var fe *wire.FrameError
		if errors.As(err, &fe) {
			return err // a protocol violation: the session ends
		}
		// A stream the distributor reset (a superseded update) or a
		// closing connection.
		s.log.Debug("update stream ended early", "stream", st.StreamID(), "err", err)
		return nil
	}
	n := proto.Size(u)
	if u.GetSnapshot() {
		s.c.bytesSnapshot.Add(n)
	} else {
		s.c.bytesPatch.Add(n)
	}
	if !s.c.Subscribed(u.GetNamespace()) {
		s.refuseUnsubscribed(u)
		return nil
	}
	s.enqueue(u)
	return nil
}

// refuseUnsubscribed answers an update of a namespace the agent does not
// subscribe to (any more): the distributor may send one that crossed the
// agent's Unsubscribe.
func (s *session) refuseUnsubscribed(u *lehrpb.Update) {
	s.log.Debug("refusing an update of an unsubscribed namespace", "namespace", u.GetNamespace(), "version", u.GetVersion())
	s.answer(u, Result{Outcome: Failed, Held: s.c.opts.Handler.Held(u.GetNamespace()), Err: errors.New("not subscribed")})
}

// answer sends the Ack for u: every update the agent reads gets exactly
// one (see AckFor).
func (s *session) answer(u *lehrpb.Update, res Result) { s.send(AckFor(u, res)) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// nsQueue holds the updates of one namespace waiting for its worker.
type nsQueue struct {
	pending []*lehrpb.Update
	running bool
	wake    chan struct{} // buffered 1: a new update arrived
}

// enqueue queues u and starts the namespace's worker if none runs.
func (s *session) enqueue(u *lehrpb.Update) {
	ns := u.GetNamespace()
	s.mu.Lock()
	q := s.queues[ns]
	if q == nil {
		q = &nsQueue{wake: make(chan struct{}, 1)}
		s.queues[ns] = q
	}
	q.pending = append(q.pending, u)
	start := !q.running
	q.running = true
	s.mu.Unlock()
	if start {
		s.wg.Go(func() { s.work(ns, q) })
		return
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// work applies the namespace's updates one at a time, lowest version
// first, until none is left. Patches whose base has not arrived wait up
// to GapWait for the update that fills the gap.
func (s *session) work(ns string, q *nsQueue) {
	var parked []*lehrpb.Update
	var gapTimer *time.Timer
	var gapC <-chan time.Time
	defer func() {
		if gapTimer != nil {
			gapTimer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		if len(q.pending) == 0 && len(parked) == 0 {
			q.running = false
			s.mu.Unlock()
			return
		}
		if len(q.pending) == 0 {
			s.mu.Unlock()
			select {
			case <-s.ctx.Done():
				return
			case <-q.wake:
				s.mu.Lock()
				q.pending = append(q.pending, parked...)
				parked = nil
				s.mu.Unlock()
			case <-gapC:
				top := parked[len(parked)-1]
				s.log.Info("patch base never arrived; asking for a snapshot", "namespace", ns,
					"version", top.GetVersion(), "base", top.GetBaseVersion())
				held := s.c.opts.Handler.Held(ns)
				detail := fmt.Sprintf("patch to %d needs base %d, which did not arrive within %v", top.GetVersion(), top.GetBaseVersion(), s.c.opts.GapWait)
				for _, p := range parked {
					s.answer(p, Result{Outcome: Rejected, Held: held, Err: errors.New(detail)})
				}
				parked, gapC = nil, nil
				s.send(&lehrpb.Resync{Namespace: ns, HaveVersion: held.Seq, HaveChecksum: checksumIf(held),
					Reason: lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH, Detail: detail})
			}
			continue
		}
		i := lowest(q.pending)
		u := q.pending[i]
		q.pending = slices.Delete(q.pending, i, i+1)
		s.mu.Unlock()
		if s.ctx.Err() != nil {
			continue // the session is ending; nothing can be answered
		}
		if !s.c.Subscribed(ns) {
			s.refuseUnsubscribed(u)
			continue
		}
		if err := s.verify(u); err != nil {
			s.c.untrusted.Inc()
			s.c.mu.Lock()
			if s.c.untrustedBy == nil {
				s.c.untrustedBy = map[string]uint64{}
			}
			s.c.untrustedBy[ns]++
			s.c.mu.Unlock()
			s.log.Error("refusing an update that does not verify (its signature, or the signed goal that should name it for this host); dropping this distributor for another", "namespace", ns,
				"version", u.GetVersion(), "err", err)
			s.answer(u, Result{Outcome: Failed, Held: s.c.opts.Handler.Held(ns), Err: err})
			s.failCode(wire.CodeUntrusted, fmt.Errorf("%w: distributor %s sent an untrusted update: %w", ErrUntrusted, s.addr, err))
			return
		}
		res := s.c.opts.Handler.Apply(s.ctx, u)
		switch res.Outcome {
		case Applied, Stale:
			s.answer(u, res)
			s.mu.Lock()
			delete(s.unavailable, ns) // served after all
			s.mu.Unlock()
			if res.Outcome == Applied && len(parked) > 0 {
				// The gap may be filled now: retry the parked patches.
				s.mu.Lock()
				q.pending = append(q.pending, parked...)
				s.mu.Unlock()
				parked = nil
				gapC = nil
			}
		case Gap:
			parked = append(parked, u)
			slices.SortFunc(parked, func(a, b *lehrpb.Update) int { return cmpU64(a.GetVersion(), b.GetVersion()) })
			if gapC == nil {
				if gapTimer != nil {
					gapTimer.Stop()
				}
				gapTimer = time.NewTimer(s.c.opts.GapWait)
				gapC = gapTimer.C
			}
		case Rejected, Failed:
			s.answer(u, res)
			if res.Outcome == Rejected {
				detail := "apply failed"
				if res.Err != nil {
					detail = truncate(res.Err.Error(), 1024)
				}
				s.send(&lehrpb.Resync{Namespace: ns, HaveVersion: res.Held.Seq, HaveChecksum: checksumIf(res.Held),
					Reason: res.Reason, Detail: detail})
			}
		}
	}
}

// checksumIf is held's checksum to announce: none when nothing is held.
func checksumIf(held content.Ref) string {
	if held.Seq == 0 {
		return ""
	}
	return held.Checksum
}

func lowest(us []*lehrpb.Update) int {
	best := 0
	for i, u := range us {
		if u.GetVersion() < us[best].GetVersion() {
			best = i
		}
	}
	return best
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// verify checks u with the client's Verifier (nil: nothing to check):
// the version's signature over the Update itself — its namespace, version,
// checksum and kind, with the author, time, message and rollback_of of
// its info — so a distributor cannot pair a valid signature with other
// content or change what it says; then that the signed goal that came
// with it names this version for this host in this zone, so a distributor
// cannot deliver what control did not decide for the host (a candidate
// outside its cohort, a version its zone's goal does not name). On
// success u.Info is replaced by what the signature covers
// (signing.Covered): nothing unsigned reaches the cache, the file or the
// local API.
func (s *session) verify(u *lehrpb.Update) error {
	v := s.c.opts.Verifier
	if v == nil {
		return nil
	}
	info := proto.CloneOf(u.GetInfo())
	if info == nil {
		info = &lehrpb.VersionInfo{}
	}
	info.Namespace, info.Seq, info.Checksum = u.GetNamespace(), u.GetVersion(), wire.UpdateChecksum(u)
	pv, err := v.Verify(info, u.GetKind())
	if err != nil {
		return err
	}
	if err := v.VerifyGoal(u.GetGoal(), s.c.opts.Zone, s.c.opts.HostID, info.Namespace, content.Ref{Seq: info.Seq, Checksum: info.Checksum}); err != nil {
		return err
	}
	if pv < signing.PayloadV2 {
		s.c.legacySigned.Inc()
		s.log.Info("a version signed with the legacy payload: its message and rollback_of are not delivered, and its kind is not covered; restart the zone's distributors after upgrading control, which signs every version it serves anew",
			"namespace", info.Namespace, "version", info.Seq)
	}
	u.Info = signing.Covered(info, pv)
	return nil
}
