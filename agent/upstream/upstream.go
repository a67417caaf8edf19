// Package upstream is the agent's link to its zone's distributors: one QUIC
// connection (ALPN "lehr/1", mutual TLS) at a time, failing over across the
// configured distributors with exponential backoff and full jitter.
//
// On every connection the client opens the control stream and sends Hello
// with its subscriptions and what the agent holds of each (version and
// checksum, from Handler.Held), so the distributor sends only what is
// missing; subscriptions beyond what fits half a control frame follow in
// Subscribe frames. It then accepts the distributor's unidirectional update
// streams concurrently — a large snapshot never blocks a small patch of
// another namespace — and hands each Update to Handler.Apply, serialised
// per namespace and lowest version first.
//
// Every Update read is answered with exactly one Ack naming it
// (Ack.update_version): positive when applied or already held, negative
// when refused — with a Resync when a snapshot would help — when its
// namespace is not subscribed, and when a patch's base has not arrived
// within GapWait. The distributor therefore never waits for an answer
// that will not come.
//
// Subscribe and Unsubscribe change the subscription set at any time; when
// connected they are sent at once, otherwise the next Hello carries them.
//
// Imported by agent, agent/agenttest (the simulated agents of tests) and bench.
package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// MetricsHelp is the HELP text of the metric families a Client registers
// on Options.Metrics (docs/operations.md, "Metrics"). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_agent_bytes_received_total":        "Bytes of updates received from distributors, by kind: snapshot or patch.",
	"lehr_agent_connected":                   "1 while the agent is connected to a distributor, else 0.",
	"lehr_agent_failovers_total":             "Connections to another distributor than the one the agent was last connected to.",
	"lehr_agent_legacy_signed_updates_total": "Updates signed with the version-1 payload, delivered without what it does not cover (message, rollback_of).",
	"lehr_agent_refused_distributors_total":  "Distributors refused because their certificate does not name a distributor of the agent's zone.",
	"lehr_agent_untrusted_updates_total":     "Updates refused because their signature is missing, by an untrusted key, or does not match their content.",
}

// Defaults for zero Options fields.
const (
	DefaultBackoffMin       = 100 * time.Millisecond
	DefaultBackoffMax       = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultReportInterval   = 30 * time.Second
	DefaultGapWait          = 2 * time.Second
)

// Outcome is what Handler.Apply did with an Update.
type Outcome int

const (
	// Applied: the update is durable; the client sends a positive Ack.
	Applied Outcome = iota
	// Stale: the agent already holds this version or a newer one; the
	// update was dropped and the client acks what the agent holds.
	Stale
	// Gap: the update is a patch against a version newer than the one held
	// (an earlier update is still on its way). The client holds it back
	// until another update of the namespace arrives, and asks for a Resync
	// if none does within Options.GapWait.
	Gap
	// Rejected: the update cannot be applied to what is held (base or
	// checksum mismatch, a patch that does not apply, a corrupt cache); the
	// client sends a negative Ack and a Resync with Result.Reason.
	Rejected
	// Failed: a local failure (disk, database); the client sends a negative
	// Ack and nothing else.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Stale:
		return "stale"
	case Gap:
		return "gap"
	case Rejected:
		return "rejected"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("outcome %d", int(o))
}

// OutcomeOf is the Outcome of an update that internal/update's Check or
// Apply refused with err, and for Rejected the reason of the Resync: the
// one mapping from the shared decision to what the link answers. An error
// not from internal/update (a disk failure) is Failed.
func OutcomeOf(err error) (Outcome, lehrpb.ResyncReason) {
	switch {
	case errors.Is(err, update.ErrStale):
		return Stale, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED
	case errors.Is(err, update.ErrGap):
		return Gap, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED
	}
	if r := update.ResyncReason(err); r != lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED {
		return Rejected, r
	}
	return Failed, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED
}

// AckFor is the Ack answering u after res: positive for Applied and Stale
// (with the version and checksum held), negative with the error otherwise,
// and naming u (Ack.update_version) so the distributor can match it to the
// update it has in flight. It is the one place an answer is built; the
// simulated agent (agent/agenttest) uses it too.
func AckFor(u *lehrpb.Update, res Result) *lehrpb.Ack {
	ack := &lehrpb.Ack{Namespace: u.GetNamespace(), UpdateVersion: u.GetVersion(), Ok: res.Outcome == Applied || res.Outcome == Stale}
	if res.Held.Seq > 0 {
		ack.Version, ack.Checksum = res.Held.Seq, res.Held.Checksum
	}
	if !ack.Ok {
		ack.Error = "apply failed"
		if res.Err != nil {
			ack.Error = truncate(res.Err.Error(), 1024)
		}
	}
	return ack
}

// Result is Handler.Apply's answer.
type Result struct {
	Outcome Outcome
	// Held is the version the agent holds after the call; zero if
	// nothing usable.
	Held content.Ref
	// Reason for Rejected.
	Reason lehrpb.ResyncReason
	// Err says why for Rejected and Failed.
	Err error
}

// Handler is the agent side of the link. Its methods are called from the
// client's goroutines, never while the client holds a lock.
type Handler interface {
	// Held returns the version held of ns (the zero Ref if none).
	Held(ns string) content.Ref
	// Apply applies u. Calls for the same namespace never overlap; calls
	// for different namespaces may.
	Apply(ctx context.Context, u *lehrpb.Update) Result
	// Report returns the periodic report, or nil to skip one.
	Report() *lehrpb.Report
	// Signals returns the per-interval signals kept of the namespace w
	// asks for, complete intervals only, or nil when none are kept; the
	// result is the caller's. A distributor's SignalsRequest is answered
	// from it (internal/signals.Answer); w also carries the checks of the
	// analysis watching the host.
	Signals(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals
}

// Options configure a Client.
type Options struct {
	// Distributors are the UDP addresses ("host:port") of the zone's
	// distributors, tried in order, rotating on every loss. Required.
	Distributors []string
	// TLS is the client configuration: the host certificate and the CA
	// that signs distributors. Required. wire.ClientTLSConfig is applied
	// to a clone (ALPN, TLS 1.3, a session cache to resume with). Whatever
	// the CA, the client talks only to a distributor whose certificate
	// names a distributor of Zone (CheckDistributor); any other is refused
	// before Hello (wire.CodeUnauthorized, an error in the log,
	// lehr_agent_refused_distributors_total) and the next is tried.
	TLS *tls.Config
	// QUIC configures connections; nil means wire.ClientQUICConfig() set
	// for SilenceTimeout (wire.SetSilenceTimeout), which a caller's own
	// configuration should be too.
	QUIC *quic.Config
	// SilenceTimeout is how long the client hears nothing from its
	// distributor before it closes the connection (wire.CodeSilent) and
	// fails over (wire.Liveness); zero means wire.DefaultSilenceTimeout
	// (3 s). Keepalives are sent every third of it, or at the longer
	// interval the distributor advises, with which the timeout grows to
	// three intervals.
	SilenceTimeout time.Duration
	// HostID and Zone are announced in Hello. Required.
	HostID, Zone string
	// Labels are announced in Hello; nil means none.
	Labels map[string]string
	// AgentVersion is the build announced in Hello.agent_version
	// (buildinfo.Info.String); "" announces none, as agents before
	// announced builds (distributors count such agents as "unknown").
	AgentVersion string
	// Handler applies updates. Required.
	Handler Handler
	// BackoffMin and BackoffMax bound the wait between connection
	// attempts: attempt n waits a uniformly random time in
	// [0, min(BackoffMax, BackoffMin·2^n)] ("full jitter"). n counts
	// rounds of the distributors that failed or refused, and only a
	// connection that ends otherwise resets it: an agent refused right
	// after Welcome (Refused) backs off like one that cannot connect.
	// Zero means DefaultBackoffMin (100 ms) and DefaultBackoffMax (10 s).
	BackoffMin, BackoffMax time.Duration
	// HandshakeTimeout bounds dialing plus Hello/Welcome; zero means
	// DefaultHandshakeTimeout (10 s).
	HandshakeTimeout time.Duration
	// ReportInterval is the default period of Reports when Welcome asks for
	// none; zero means DefaultReportInterval (30 s).
	ReportInterval time.Duration
	// GapWait is how long a patch whose base has not arrived waits before
	// a Resync; zero means DefaultGapWait (2 s).
	GapWait time.Duration
	// Verifier, if set, checks every update's signature before the
	// Handler sees it (internal/signing): an update that is unsigned,
	// signed by a key it does not trust, or whose namespace, version,
	// checksum, kind, author, time, message or rollback_of differ from
	// what control signed — or that comes without a signed goal of Zone
	// naming its version for HostID (wire.CapSignedGoals) — is refused (a
	// negative Ack, lehr_agent_untrusted_updates_total, an error in the
	// log) and the client drops the distributor that sent it
	// (wire.CodeUntrusted) for the next; so is a distributor that does not
	// send signed goals. The Handler gets only the info the signature
	// covers (signing.Covered): a version signed with the legacy payload
	// (signing.PayloadV1) comes without its message and rollback_of
	// (lehr_agent_legacy_signed_updates_total). Nil accepts unsigned
	// updates, and delivers their info as it came.
	Verifier *signing.Verifier
	// Metrics receives the client's metrics (lehr_agent_connected,
	// lehr_agent_failovers_total, lehr_agent_bytes_received_total{kind},
	// lehr_agent_untrusted_updates_total,
	// lehr_agent_legacy_signed_updates_total,
	// lehr_agent_refused_distributors_total); nil means a private set.
	Metrics *metrics.Set
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// capabilities returns what the client offers in Hello: every capability
// wire implements, except signed goals when it does not verify them.
func (c *Client) capabilities() []string {
	caps := wire.Capabilities()
	if c.opts.Verifier == nil {
		caps = slices.DeleteFunc(caps, func(s string) bool { return s == wire.CapSignedGoals })
	}
	return caps
}

// Status describes the link.
type Status struct {
	// Distributor is the address of the connected distributor, "" when
	// disconnected.
	Distributor   string
	DistributorID string
	// DistributorIdentity is the identity the connected distributor's
	// certificate names (spiffe://lehr/distributor/<zone>/<id>): the client
	// connects only to a distributor of its zone (CheckDistributor).
	DistributorIdentity string
	Connected           bool
	// Unavailable maps namespaces the distributor said it cannot serve to
	// its reason, for the current connection.
	Unavailable map[string]string
	// LastDisconnect is the error that ended the previous connection (nil
	// before the first ended): a *quic.StatelessResetError when a
	// restarted distributor reset it, a *wire.SilenceError when the
	// distributor went silent, a *wire.GoodbyeError when it said goodbye.
	LastDisconnect error
	// RedialSpread is the redial spread the current or last distributor
	// advised (Welcome.redial_spread, Advice; see RedialDelay).
	RedialSpread time.Duration
	// NextAttempt is when the client dials next while disconnected (zero
	// while connected or dialing).
	NextAttempt time.Time
}

// Client is the agent's upstream link.
type Client struct {
	opts Options
	log  *slog.Logger
	tls  *tls.Config
	quic *quic.Config

	connected           *metrics.Gauge
	connectedVal        atomic.Int64
	failovers           *metrics.Counter
	refusedDistributors *metrics.Counter
	untrusted           *metrics.Counter
	legacySigned        *metrics.Counter
	untrustedBy         map[string]uint64 // by namespace, under mu
	bytesSnapshot       *metrics.Counter
	bytesPatch          *metrics.Counter

	mu             sync.Mutex
	subs           map[string]bool
	sess           *session // nil when disconnected
	running        bool
	lastDisconnect error
	// redialSpread is the spread the current or last distributor advised
	// (Welcome.redial_spread, Advice): see RedialDelay.
	redialSpread time.Duration
	nextAttempt  time.Time // Status.NextAttempt
}

// New validates opts and returns a client; Run connects.
func New(opts Options) (*Client, error) {
	switch {
	case len(opts.Distributors) == 0:
		return nil, errors.New("upstream: Options.Distributors is empty: name at least one distributor address")
	case opts.TLS == nil:
		return nil, errors.New("upstream: Options.TLS is required (host certificate and CA)")
	case opts.HostID == "":
		return nil, errors.New("upstream: Options.HostID is required")
	case opts.Zone == "":
		return nil, errors.New("upstream: Options.Zone is required")
	case opts.Handler == nil:
		return nil, errors.New("upstream: Options.Handler is required")
	}
	for i, d := range opts.Distributors {
		if d == "" {
			return nil, fmt.Errorf("upstream: Options.Distributors[%d] is empty", i)
		}
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = opts.BackoffMin
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.SilenceTimeout <= 0 {
		opts.SilenceTimeout = wire.DefaultSilenceTimeout
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = DefaultReportInterval
	}
	if opts.GapWait <= 0 {
		opts.GapWait = DefaultGapWait
	}
	c := &Client{opts: opts, log: opts.Logger, subs: map[string]bool{}}
	if c.log == nil {
		c.log = slog.Default()
	}
	// One config, and so one TLS session cache, for the client's life: a
	// reconnect resumes the last session with that distributor.
	c.tls = wire.ClientTLSConfig(opts.TLS)
	c.quic = opts.QUIC
	if c.quic == nil {
		c.quic = wire.ClientQUICConfig()
		wire.SetSilenceTimeout(c.quic, opts.SilenceTimeout)
	}
	set := opts.Metrics
	if set == nil {
		set = metrics.NewSet()
	}
	c.connected = set.GetOrCreateGauge("lehr_agent_connected", func() float64 { return float64(c.connectedVal.Load()) })
	c.failovers = set.GetOrCreateCounter("lehr_agent_failovers_total")
	c.refusedDistributors = set.GetOrCreateCounter("lehr_agent_refused_distributors_total")
	c.untrusted = set.GetOrCreateCounter("lehr_agent_untrusted_updates_total")
	c.legacySigned = set.GetOrCreateCounter("lehr_agent_legacy_signed_updates_total")
	c.bytesSnapshot = set.GetOrCreateCounter(`lehr_agent_bytes_received_total{kind="snapshot"}`)
	c.bytesPatch = set.GetOrCreateCounter(`lehr_agent_bytes_received_total{kind="patch"}`)
	return c, nil
}

// Subscribe adds namespaces to the subscription set. When connected the
// distributor is told at once (with what the agent holds of each);
// otherwise the next Hello carries them.
func (c *Client) Subscribe(nss ...string) {
	c.mu.Lock()
	for _, ns := range nss {
		c.subs[ns] = true
	}
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.notifySubs()
	}
}

// Unsubscribe removes namespaces from the subscription set. Updates still
// in flight for them are dropped.
func (c *Client) Unsubscribe(nss ...string) {
	c.mu.Lock()
	for _, ns := range nss {
		delete(c.subs, ns)
	}
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.notifySubs()
	}
}

// Subscribed reports whether ns is in the subscription set.
func (c *Client) Subscribed(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[ns]
}

// Subscriptions returns the subscription set, sorted.
func (c *Client) Subscriptions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.subs))
}

// Resync asks the connected distributor for a fresh snapshot of ns, e.g.
// after the agent found its cached copy corrupt and dropped it. When
// disconnected it does nothing: the next Hello announces the cache as it
// is then, which is enough.
func (c *Client) Resync(ns string, reason lehrpb.ResyncReason, detail string) {
	c.mu.Lock()
	s := c.sess
	sub := c.subs[ns]
	c.mu.Unlock()
	if s == nil || !sub {
		return
	}
	held := c.opts.Handler.Held(ns)
	s.send(&lehrpb.Resync{Namespace: ns, HaveVersion: held.Seq, HaveChecksum: held.Checksum, Reason: reason, Detail: detail})
}

// Unavailable returns what the connected distributor last said it cannot
// serve of ns (its reason and detail: a FORBIDDEN names the domain's
// acl.readers), or nil when it said nothing since the connection began or
// an update of ns was applied since. The result is shared: do not modify
// it.
func (c *Client) Unavailable(ns string) *lehrpb.Unavailable {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unavailable[ns]
}

// Status describes the link now.
func (c *Client) Status() Status {
	c.mu.Lock()
	s, last, spread, next := c.sess, c.lastDisconnect, c.redialSpread, c.nextAttempt
	c.mu.Unlock()
	st := Status{}
	if s != nil {
		st = s.status()
	}
	st.LastDisconnect, st.RedialSpread, st.NextAttempt = last, spread, next
	return st
}

// Run connects and keeps connecting until ctx ends, then closes the
// connection and returns nil once every goroutine it started has ended. It
// returns an error only for misuse (a second concurrent Run).
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("upstream: Run called twice")
	}
	c.running = true
	c.mu.Unlock()

	n := len(c.opts.Distributors)
	next := 0
	attempt := 0
	lastConnected := ""
	retryAfter := map[string]time.Time{}
	for ctx.Err() == nil {
		addr := c.opts.Distributors[next%n]
		// Skip a distributor that asked us to stay away, unless all did.
		for i := 0; i < n; i++ {
			if time.Now().After(retryAfter[addr]) {
				break
			}
			next++
			addr = c.opts.Distributors[next%n]
		}
		next++
		established, err := c.runSession(ctx, addr, lastConnected)
		if ctx.Err() != nil {
			return nil
		}
		var ge *wire.GoodbyeError
		if errors.As(err, &ge) && ge.RetryAfter > 0 {
			retryAfter[addr] = time.Now().Add(ge.RetryAfter)
		}
		// A refusal never resets the backoff, even when it ended an
		// established session: an agent turned away (or turning its
		// distributor away) at once after Welcome would otherwise redial
		// at the minimum backoff forever.
		refused := Refused(err)
		wait := c.backoff(attempt)
		if established {
			lastConnected = addr
			c.mu.Lock()
			c.lastDisconnect = err
			if !refused {
				attempt = 0
				wait = RedialDelay(err, c.redialSpread, c.backoff(0))
			}
			c.mu.Unlock()
		}
		switch {
		case errors.Is(err, ErrDistributorIdentity):
			c.log.Error("refusing distributor: its certificate does not name a distributor of this agent's zone; trying the next",
				"distributor", addr, "err", err, "retry_in", wait)
		case refused && refusalAdvice(err) != "":
			c.log.Error("distributor refused this agent; backing off", "distributor", addr, "err", err,
				"fix", refusalAdvice(err), "retry_in", wait)
		case refused:
			c.log.Warn("distributor connection refused; backing off", "distributor", addr, "err", err, "retry_in", wait)
		case established:
			c.log.Warn("distributor connection lost; failing over", "distributor", addr, "err", err, "redial_in", wait)
		default:
			c.log.Info("cannot reach distributor", "distributor", addr, "err", err)
		}
		c.mu.Lock()
		c.nextAttempt = time.Now().Add(wait)
		c.mu.Unlock()
		ok := backoff.Sleep(ctx, wait)
		c.mu.Lock()
		c.nextAttempt = time.Time{}
		c.mu.Unlock()
		if !ok {
			return nil
		}
		// A full round of failures (or refusals) backs off further; the
		// first try after a loss goes to the next distributor almost at
		// once.
		if (!established || refused) && next%n == 0 {
			attempt++
		}
	}
	return nil
}

// RedialDelay is how long an agent waits before its first redial after
// losing an established connection, for the reason cause, whose
// distributor advised spread (Welcome.redial_spread, Advice). When cause
// says the distributor ended every connection — it said it is shutting
// down, or reset the connection after a restart (DistributorWide) — the
// wait is drawn uniformly from [0, spread), so that its agents come back
// at the rate it can admit them instead of all at once; otherwise (the
// link went silent, or this connection alone was closed) and with no
// spread, it is minBackoff (the agent's minimum backoff, jittered). The
// simulated agents of bench's reconnect storm wait the same.
func RedialDelay(cause error, spread, minBackoff time.Duration) time.Duration {
	if spread <= 0 || !DistributorWide(cause) {
		return minBackoff
	}
	return rand.N(spread)
}

// DistributorWide reports whether a connection ended for a reason that
// ends every connection of its distributor at once: a Goodbye or close
// with wire.CodeShuttingDown, or a QUIC stateless reset (the distributor
// restarted and no longer knows the connection).
func DistributorWide(cause error) bool {
	var reset *quic.StatelessResetError
	if errors.As(cause, &reset) {
		return true
	}
	var bye *wire.GoodbyeError
	if errors.As(cause, &bye) {
		return bye.Code == wire.CodeShuttingDown
	}
	var app *quic.ApplicationError
	return errors.As(cause, &app) && app.Remote && app.ErrorCode == wire.CodeShuttingDown
}

// setRedialSpread records the spread a distributor advised.
func (c *Client) setRedialSpread(d *durationpb.Duration) {
	c.mu.Lock()
	c.redialSpread = min(max(d.AsDuration(), 0), wire.MaxRedialSpread)
	c.mu.Unlock()
}

// backoff returns a random wait in [0, min(max, min·2^attempt)] (full
// jitter: a zone's agents reconnecting together spread out).
func (c *Client) backoff(attempt int) time.Duration {
	return backoff.Policy{Min: c.opts.BackoffMin, Max: c.opts.BackoffMax}.Full(attempt)
}

func cachedNS(ns string, held content.Ref) *lehrpb.CachedNamespace {
	return &lehrpb.CachedNamespace{Namespace: ns, Version: held.Seq, Checksum: checksumIf(held)}
}

// Untrusted returns how many updates of ns the client refused because
// their signature did not verify (Options.Verifier).
func (c *Client) Untrusted(ns string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.untrustedBy[ns]
}
