// Package goalwatch keeps a distributor's view of its zone's goal states: it
// runs control's WatchGoals stream for one zone (registering the zone on
// first contact, when asked to), resumes from the last seen revision + 1
// after a disconnect, restarts from a fresh initial state when control
// answers OUT_OF_RANGE (the revision was compacted), and keeps serving the
// last known goals while control is unreachable (static stability).
//
// It is the one resumable goal watch: package distributor runs it, and the
// lehr CLI's "goals --watch" prints its messages (Options.OnMessage).
// Imported by distributor and cmd/lehr.
package goalwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Client is the part of lehrpb.ControlClient the watcher uses.
type Client interface {
	WatchGoals(ctx context.Context, in *lehrpb.WatchGoalsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[lehrpb.WatchGoalsResponse], error)
}

// Options configures a Watcher.
type Options struct {
	// Zone whose goals to watch. Required; must satisfy names.Zone.
	Zone string
	// Client talks to control. Required.
	Client Client
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MinBackoff is the first delay before reconnecting; default 100ms.
	// Each failed attempt doubles it up to MaxBackoff (default 5s); the
	// actual wait is drawn uniformly from [d/2, d] (jitter). A stream that
	// delivered at least one message resets the delay.
	MinBackoff, MaxBackoff time.Duration
	// OnChange, if set, is called from Run's goroutine after the goal map
	// changed, with the namespaces whose goal was set, changed or deleted
	// (sorted). No lock is held during the call; a slow OnChange delays the
	// watch but loses nothing.
	OnChange func(namespaces []string)
	// OnReconnect, if set, is called from Run's goroutine each time the
	// watcher dials control again after a stream ended (for metrics).
	OnReconnect func()
	// OnMessage, if set, is called from Run's goroutine with every message
	// of the stream as it arrives, before it is applied: the initial state
	// (Initial set; sent again after a restart from the current state) and
	// every change. A slow OnMessage delays the watch but loses nothing.
	OnMessage func(*lehrpb.WatchGoalsResponse)
	// CreateZone registers the zone with control on first contact, as
	// distributors do. Without it a zone control does not know ends Run
	// with an error (codes.NotFound).
	CreateZone bool
	// Deltas asks control to send small changes with the goal events
	// that make them (GoalEvent.delta), for OnMessage; distributors set it
	// and build the new versions from them.
	Deltas bool
}

// Watcher holds the goal states of one zone. Create it with New and start it
// with Run. Its read methods are safe for concurrent use.
type Watcher struct {
	opts Options
	log  *slog.Logger

	synced     chan struct{}
	syncedOnce sync.Once

	mu        sync.Mutex
	goals     map[string]*lehrpb.GoalState
	revision  int64 // last revision fully applied; 0 before the first sync
	connected bool
	stats     Stats
}

// Stats counts the watcher's streams.
type Stats struct {
	// Streams counts WatchGoals calls; Resumes those that resumed from a
	// revision; Restarts the times the watch started over from the current
	// state because its revision was compacted (OUT_OF_RANGE).
	Streams, Resumes, Restarts int
}

// New validates opts and returns a Watcher. It starts nothing.
func New(opts Options) (*Watcher, error) {
	if err := names.Zone(opts.Zone); err != nil {
		return nil, fmt.Errorf("goalwatch: Options.Zone: %w", err)
	}
	if opts.Client == nil {
		return nil, errors.New("goalwatch: Options.Client is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	return &Watcher{
		opts:   opts,
		log:    opts.Logger.With("zone", opts.Zone),
		synced: make(chan struct{}),
		goals:  map[string]*lehrpb.GoalState{},
	}, nil
}

// Synced is closed once the first complete initial state has been received.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Goal returns the goal state of namespace ns, if the zone has one. The
// returned message must not be modified.
func (w *Watcher) Goal(ns string) (*lehrpb.GoalState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.goals[ns]
	return g, ok
}

// Goals returns a copy of the goal map, namespace → goal. The messages must
// not be modified.
func (w *Watcher) Goals() map[string]*lehrpb.GoalState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.goals)
}

// Revision is the store revision the goal map reflects (0 before the first
// sync).
func (w *Watcher) Revision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.revision
}

// Stats returns the watcher's counters.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Connected reports whether a watch stream is currently delivering.
func (w *Watcher) Connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.connected
}

// Run watches until ctx is done and then returns nil. Control being
// unreachable is not an error: Run retries with backoff and jitter while the
// last known goals stay available. It returns an error only for a request
// retrying cannot fix: one control rejects as invalid
// (codes.InvalidArgument), or an unknown zone without Options.CreateZone
// (codes.NotFound).
func (w *Watcher) Run(ctx context.Context) error {
	pace := backoff.Policy{Min: w.opts.MinBackoff, Max: w.opts.MaxBackoff}
	attempt := 0 // failures since the stream last delivered
	first := true
	for {
		if !first && w.opts.OnReconnect != nil {
			w.opts.OnReconnect()
		}
		first = false
		progressed, err := w.watchOnce(ctx)
		w.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		switch status.Code(err) {
		case codes.OutOfRange:
			w.log.Warn("goal watch revision no longer available; restarting from the current state", "revision", w.Revision(), "err", err)
			w.mu.Lock()
			w.revision = 0
			w.stats.Restarts++
			w.mu.Unlock()
			attempt = 0
			continue // at once: control is up
		case codes.InvalidArgument:
			return fmt.Errorf("goalwatch: watch zone %s: %w", w.opts.Zone, err)
		case codes.NotFound:
			if !w.opts.CreateZone {
				return fmt.Errorf("goalwatch: watch zone %s: %w", w.opts.Zone, err)
			}
		}
		if progressed {
			attempt = 0
		}
		wait := pace.Equal(attempt)
		w.log.Info("goal watch interrupted; retrying", "err", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
		attempt++
	}
}

// replica names the control replica a stream is connected to, for logs:
// with several replicas, which one serves the zone now.
func replica(s grpc.ClientStream) string {
	if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// watchOnce runs one stream until it fails. progressed reports whether it
// delivered anything.
func (w *Watcher) watchOnce(ctx context.Context) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	start := w.revision
	if start > 0 {
		start++
		w.stats.Resumes++
	}
	w.stats.Streams++
	w.mu.Unlock()
	stream, err := w.opts.Client.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{
		Zone:          w.opts.Zone,
		StartRevision: start,
		CreateZone:    w.opts.CreateZone,
		Deltas:        w.opts.Deltas,
	})
	if err != nil {
		return false, fmt.Errorf("open watch: %w", err)
	}
	if start > 0 {
		// Resumed: control sends its headers at once (a resumed watch may
		// carry no message for a long time); until then it is not known to
		// be connected. Before that, the connection was called lost until
		// the next goal changed.
		if _, err := stream.Header(); err != nil {
			return false, fmt.Errorf("resume watch: %w", err)
		}
		w.setConnected(true)
		w.log.Info("goal watch connected to control", "zone", w.opts.Zone, "replica", replica(stream), "resumed_from", start)
	}
	// initial collects the initial state when starting from 0; it replaces
	// the goal map only once complete, so a stream cut mid-way leaves the
	// previous (last good) map in place.
	var initial map[string]*lehrpb.GoalState
	if start == 0 {
		initial = map[string]*lehrpb.GoalState{}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, fmt.Errorf("receive: %w", err)
		}
		if !progressed {
			progressed = true
			if !w.Connected() {
				w.setConnected(true)
				w.log.Info("goal watch connected to control", "zone", w.opts.Zone, "replica", replica(stream), "revision", resp.GetRevision())
			}
		}
		if w.opts.OnMessage != nil {
			w.opts.OnMessage(resp)
		}
		var changed []string
		if initial != nil {
			for _, ev := range resp.GetEvents() {
				applyEvent(initial, ev)
			}
			if !resp.GetInitialComplete() {
				continue
			}
			changed = w.replace(initial, resp.GetRevision())
			initial = nil
			w.syncedOnce.Do(func() { close(w.synced) })
			w.log.Info("goal states synced", "namespaces", len(w.Goals()), "revision", resp.GetRevision())
		} else {
			w.logEvents(ctx, resp)
			changed = w.apply(resp)
		}
		if len(changed) > 0 && w.opts.OnChange != nil {
			w.opts.OnChange(changed)
		}
	}
}

// logEvents logs, at Debug, each goal event of a change message as it
// arrives (after the initial state), before it is applied: the moment the
// distributor learns of a new goal. Benchmarks time the
// control → distributor hop by the record "goal changed" and its
// attributes namespace, version, checksum (empty for a deletion), deleted
// and revision.
func (w *Watcher) logEvents(ctx context.Context, resp *lehrpb.WatchGoalsResponse) {
	if !w.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	for _, ev := range resp.GetEvents() {
		g := ev.GetGoal()
		w.log.LogAttrs(ctx, slog.LevelDebug, "goal changed",
			slog.String("namespace", g.GetNamespace()),
			slog.Uint64("version", g.GetVersion()),
			slog.String("checksum", g.GetChecksum()),
			slog.Bool("deleted", ev.GetType() == lehrpb.GoalEvent_TYPE_DELETE),
			slog.Int64("revision", resp.GetRevision()))
	}
}

func applyEvent(m map[string]*lehrpb.GoalState, ev *lehrpb.GoalEvent) {
	ns := ev.GetGoal().GetNamespace()
	if ns == "" {
		return
	}
	switch ev.GetType() {
	case lehrpb.GoalEvent_TYPE_PUT:
		m[ns] = ev.GetGoal()
	case lehrpb.GoalEvent_TYPE_DELETE:
		delete(m, ns)
	}
}

// replace swaps in a complete initial state and returns what differs.
func (w *Watcher) replace(next map[string]*lehrpb.GoalState, rev int64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var changed []string
	for ns, g := range next {
		if old, ok := w.goals[ns]; !ok || !sameGoal(old, g) {
			changed = append(changed, ns)
		}
	}
	for ns := range w.goals {
		if _, ok := next[ns]; !ok {
			changed = append(changed, ns)
		}
	}
	w.goals = next
	w.revision = rev
	slices.Sort(changed)
	return changed
}

// apply applies one change message and returns what differs.
func (w *Watcher) apply(resp *lehrpb.WatchGoalsResponse) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var changed []string
	for _, ev := range resp.GetEvents() {
		ns := ev.GetGoal().GetNamespace()
		old, had := w.goals[ns]
		applyEvent(w.goals, ev)
		now, has := w.goals[ns]
		if had != has || (has && !sameGoal(old, now)) {
			changed = append(changed, ns)
		}
	}
	if resp.GetRevision() > w.revision {
		w.revision = resp.GetRevision()
	}
	slices.Sort(changed)
	return slices.Compact(changed)
}

// sameGoal reports whether two goals make every host hold the same
// versions: the stable goal and the candidate with its cohort.
func sameGoal(a, b *lehrpb.GoalState) bool {
	return a.GetVersion() == b.GetVersion() && a.GetChecksum() == b.GetChecksum() &&
		proto.Equal(a.GetCandidate(), b.GetCandidate())
}

func (w *Watcher) setConnected(c bool) {
	w.mu.Lock()
	w.connected = c
	w.mu.Unlock()
}
