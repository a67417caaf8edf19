package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

// Config is one run of the kill matrix.
type Config struct {
	// Binary is the lehr binary with crash points (Build). Required.
	Binary string
	// Dir holds the run's processes; keep it short (unix sockets).
	Dir      string
	Topology Topology
	// Namespaces and OpsPerNamespace size the workload (see Workload).
	Namespaces, OpsPerNamespace int
	// BigValue and Think: see Workload.
	BigValue int
	Think    time.Duration
	// Seed fixes the workload and the kill schedule.
	Seed uint64
	// Events is the number of kills and crash points during the
	// workload; the first eight are one of each kind (see eventKinds).
	Events int
	// FailoverReps is how often "distributor kill → next update applied"
	// is measured per zone and way (see Report.FailoverDown).
	FailoverReps int
	// ConvergeBound bounds the convergence after the last kill.
	ConvergeBound time.Duration
	Logger        *slog.Logger
}

// Report is what a run found. Violations lists every broken invariant; a
// correct system has none.
type Report struct {
	Topology Topology
	Seed     uint64
	Duration time.Duration

	Ops, Acked, Refused, Retried, Publishes int
	// Lost counts acknowledged ops whose version history does not hold
	// as acknowledged; Duplicated, ops history holds more than once. A
	// correct system has none (each is a violation too).
	Lost, Duplicated int
	// Torn counts consumer views whose content does not have the
	// checksum they claim (each is a violation too).
	Torn int
	// Events counts what the schedule did, by kind ("kill control",
	// crash point names...); NotFired lists crash points armed that did
	// not fire in time (disarmed).
	Events   map[string]int
	NotFired []string

	// Converge is the time from the end of the last kill to every agent
	// holding every goal.
	Converge time.Duration
	// UpdateP50, UpdateMax: from an op's ack to every consumer seeing
	// its version or a newer one, over every acknowledged op (kills
	// included).
	UpdateP50, UpdateMax time.Duration
	// FailoverDown: from kill -9 of the distributor agents are connected
	// to (left down) to every such agent holding an update published
	// right after; FailoverRestart the same with the distributor
	// restarted at once (as systemd does).
	FailoverDown, FailoverRestart []time.Duration

	Violations []string
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Kinds of schedule events, besides the crash points.
const (
	killControl          = "kill control"
	killDistributor      = "kill distributor"
	killAgent            = "kill agent"
	killZoneDistributors = "kill every distributor of a zone"
)

// eventKinds are the kinds every run has at least once, in this order
// shuffled.
var eventKinds = []string{killControl, killDistributor, killAgent, StoreAfterStage, StoreAfterCommit, AgentAfterCacheCommit, NsfileBeforeRename, DistributorMidSnapshot}

// Run runs the matrix once: it starts the cluster, runs the workload while
// the schedule kills daemons and fires crash points, lets the cluster
// converge, measures distributor failover and checks every invariant. An
// error means the run could not be carried out; what it found is in the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	rep := &Report{Topology: cfg.Topology, Seed: cfg.Seed, Events: map[string]int{}}
	run, stop := context.WithCancel(ctx)
	defer stop()
	// The matrix tests the raw delivery path: every publish moves every
	// zone at once, so convergence is the path's alone.
	cl, namespaces, obs, err := startObserved(ctx, run, ClusterOptions{Binary: cfg.Binary, Dir: cfg.Dir, Topology: cfg.Topology, Logger: log},
		cfg.Namespaces)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	defer obs.Close()

	chaosDone := make(chan struct{})
	w := &Workload{Producer: cl.Producer(), Namespaces: namespaces, OpsPerNamespace: cfg.OpsPerNamespace,
		Seed: cfg.Seed, BigValue: cfg.BigValue, Think: cfg.Think, Until: chaosDone}
	// The workload and the schedule end each other on failure.
	wctx, wcancel := context.WithCancelCause(ctx)
	defer wcancel(nil)
	sctx, scancel := context.WithCancelCause(ctx)
	defer scancel(nil)
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		if werr = w.Run(wctx); werr != nil {
			scancel(fmt.Errorf("workload: %w", werr))
		}
	})
	s := &schedule{cl: cl, rep: rep, log: log, rng: rand.New(rand.NewPCG(cfg.Seed, 99))}
	serr := s.run(sctx, cfg.Events, w)
	close(chaosDone)
	if serr != nil {
		wcancel(serr)
	}
	wg.Wait()
	switch {
	case werr != nil:
		return rep, fmt.Errorf("workload: %w", werr)
	case serr != nil:
		return rep, fmt.Errorf("kill schedule: %w", serr)
	}
	log.Info("chaos: workload done", "ops", len(w.Ledger.Ops()))

	// Everything up again, every agent at every goal within the bound.
	chaosEnd := time.Now()
	if err := cl.StartStopped(ctx); err != nil {
		return rep, err
	}
	goals, err := latest(ctx, cl.Producer(), namespaces)
	if err != nil {
		return rep, err
	}
	if err := converge(ctx, cl.Agents, goals, cfg.ConvergeBound); err != nil {
		rep.violate("convergence after the last kill: %v", err)
	}
	rep.Converge = time.Since(chaosEnd)
	if err := poll(ctx, cfg.ConvergeBound, func() error { return observersAt(obs, cl.Agents, goals) }); err != nil {
		rep.violate("consumers after convergence: %v", err)
	}

	// Distributor failover, measured.
	for _, z := range cl.Zones() {
		for range cfg.FailoverReps {
			d, err := failover(ctx, cl, w, z, namespaces[0], false)
			if err != nil {
				return rep, err
			}
			rep.FailoverDown = append(rep.FailoverDown, d)
			d, err = failover(ctx, cl, w, z, namespaces[0], true)
			if err != nil {
				return rep, err
			}
			rep.FailoverRestart = append(rep.FailoverRestart, d)
		}
	}
	if err := Verify(ctx, rep, cl, w, obs, namespaces, cfg.ConvergeBound); err != nil {
		return rep, err
	}
	for _, f := range cl.Failures() {
		rep.violate("%s", f)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Verify ends a run of w: it waits, up to bound, until every agent holds
// every namespace's latest version and every consumer of obs has seen it,
// then checks the invariants over w's ledger and obs's observations (see
// verify), adding what it finds to rep. Call it once w.Run has returned.
func Verify(ctx context.Context, rep *Report, cl *Cluster, w *Workload, obs *Observer, namespaces []string, bound time.Duration) error {
	goals, err := latest(ctx, cl.Producer(), namespaces)
	if err != nil {
		return err
	}
	if err := converge(ctx, cl.Agents, goals, bound); err != nil {
		rep.violate("convergence: %v", err)
	}
	if err := poll(ctx, bound, func() error { return observersAt(obs, cl.Agents, goals) }); err != nil {
		rep.violate("consumers after convergence: %v", err)
	}
	return verify(ctx, rep, cl, w.Ledger.Ops(), obs.Observations(), namespaces, goals)
}

// schedule is the kill schedule of a run.
type schedule struct {
	cl  *Cluster
	rep *Report
	log *slog.Logger
	rng *rand.Rand
}

// run carries out n events, event i once the workload has answered
// (i+1)/(n+1) of its planned ops.
func (s *schedule) run(ctx context.Context, n int, w *Workload) error {
	kinds := slices.Clone(eventKinds)
	s.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	extra := append(slices.Clone(eventKinds), killZoneDistributors)
	for len(kinds) < n {
		kinds = append(kinds, extra[s.rng.IntN(len(extra))])
	}
	total := w.Total()
	for i, kind := range kinds[:n] {
		at := (i + 1) * total / (n + 1)
		if err := poll(ctx, 0, func() error {
			if w.Answered() < at {
				return fmt.Errorf("%d of %d ops answered, event %d (%s) at %d", w.Answered(), total, i, kind, at)
			}
			return nil
		}); err != nil {
			return err
		}
		s.log.Info("chaos: event", "n", i, "kind", kind, "ops_answered", w.Answered())
		if err := s.event(ctx, kind); err != nil {
			return fmt.Errorf("event %d (%s): %w", i, kind, err)
		}
		s.rep.Events[kind]++
	}
	return nil
}

func (s *schedule) pick(ps []*Proc) *Proc { return ps[s.rng.IntN(len(ps))] }

func (s *schedule) distributors() []*Proc {
	var ps []*Proc
	for _, z := range s.cl.Zones() {
		for _, d := range s.cl.Distributors[z] {
			ps = append(ps, d.Proc)
		}
	}
	return ps
}

func (s *schedule) agents() []*Proc {
	var ps []*Proc
	for _, a := range s.cl.Agents {
		ps = append(ps, a.Proc)
	}
	return ps
}

// downtime is how long a killed daemon stays down: up to 1.5 s.
func (s *schedule) downtime() time.Duration {
	return time.Duration(s.rng.IntN(1500)) * time.Millisecond
}

func (s *schedule) event(ctx context.Context, kind string) error {
	switch kind {
	case killControl:
		return s.kill(ctx, s.cl.Control)
	case killDistributor:
		return s.kill(ctx, s.pick(s.distributors()))
	case killAgent:
		return s.kill(ctx, s.pick(s.agents()))
	case killZoneDistributors:
		z := s.cl.Zones()[s.rng.IntN(len(s.cl.Zones()))]
		var ps []*Proc
		for _, d := range s.cl.Distributors[z] {
			ps = append(ps, d.Proc)
		}
		return s.kill(ctx, ps...)
	case StoreAfterStage, StoreAfterCommit:
		return s.crash(ctx, kind, TermCrash(kind), func() *Proc { return s.cl.Control })
	case AgentAfterCacheCommit, NsfileBeforeRename:
		return s.crash(ctx, kind, TermCrash(kind), func() *Proc { return s.pick(s.agents()) })
	case DistributorMidSnapshot:
		return s.crash(ctx, kind, TermCrashNext, s.serving)
	}
	return fmt.Errorf("unknown event kind %q", kind)
}

// serving returns a distributor some agent is connected to (it will push
// the next snapshot), or any distributor if none is known.
func (s *schedule) serving() *Proc {
	var ps []*Proc
	for _, a := range s.cl.Agents {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := a.Status(sctx)
		cancel()
		if err != nil || !st.GetConnected() {
			continue
		}
		for _, d := range s.cl.Distributors[a.Zone] {
			if d.Addr == st.GetDistributor() {
				ps = append(ps, d.Proc)
			}
		}
	}
	if len(ps) == 0 {
		return s.pick(s.distributors())
	}
	return s.pick(ps)
}

// kill kills ps with SIGKILL, leaves them down for a random time, and
// starts them again.
func (s *schedule) kill(ctx context.Context, ps ...*Proc) error {
	var killed []*Proc
	for _, p := range ps {
		if p.Kill() {
			killed = append(killed, p)
		}
	}
	if err := sleepCtx(ctx, s.downtime()); err != nil {
		return err
	}
	for _, p := range killed {
		if err := p.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// crashWait bounds the wait for an armed crash point to fire; crashTries
// is how many victims are tried (a distributor may lose its agents to a
// failover just after it was picked, and then pushes nothing).
const (
	crashWait  = 10 * time.Second
	crashTries = 3
)

// crash arms point in a victim and waits for it to crash the victim and
// for the victim's supervisor to have it ready again. A point that does
// not fire within crashWait is disarmed, and another victim tried; one
// that never fires is reported.
func (s *schedule) crash(ctx context.Context, point, term string, victim func() *Proc) error {
	var p *Proc
	for range crashTries {
		p = victim()
		if err := poll(ctx, readyTimeout, func() error {
			if !p.Ready() {
				return fmt.Errorf("%s not ready", p.Name)
			}
			return nil
		}); err != nil {
			return err
		}
		before := p.Crashes(point)
		if err := p.Arm(ctx, point, term); err != nil {
			return err
		}
		fired := poll(ctx, crashWait, func() error {
			if p.Crashes(point) == before {
				return fmt.Errorf("%s: %s not fired", p.Name, point)
			}
			return nil
		}) == nil
		if fired {
			return poll(ctx, readyTimeout, func() error {
				if !p.Ready() {
					return fmt.Errorf("%s not ready again after %s", p.Name, point)
				}
				return nil
			})
		}
		if err := p.Disarm(ctx, point); err != nil {
			return err
		}
	}
	s.rep.NotFired = append(s.rep.NotFired, p.Name+": "+point)
	return nil
}

// failover kills -9 the distributor most agents of zone are connected to,
// restarts it at once if restart, publishes a patch to ns and returns the
// time from the kill until every agent that was connected to it holds
// the patch. A distributor left down is started again afterwards.
func failover(ctx context.Context, cl *Cluster, w *Workload, zone, ns string, restart bool) (time.Duration, error) {
	var victim *Distributor
	var agents []*Agent
	if err := poll(ctx, 60*time.Second, func() error {
		by := map[string][]*Agent{}
		for _, a := range cl.Agents {
			if a.Zone != zone {
				continue
			}
			st, err := a.Status(ctx)
			if err != nil || !st.GetConnected() {
				return fmt.Errorf("agent %s not connected (%v)", a.HostID, err)
			}
			by[st.GetDistributor()] = append(by[st.GetDistributor()], a)
		}
		victim, agents = nil, nil
		for _, d := range cl.Distributors[zone] {
			if len(by[d.Addr]) > len(agents) {
				victim, agents = d, by[d.Addr]
			}
		}
		if victim == nil {
			return fmt.Errorf("no agent of %s connected to one of its distributors", zone)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	t0 := time.Now()
	victim.Kill()
	if restart {
		if err := victim.Start(ctx); err != nil {
			return 0, err
		}
	}
	op := &Op{ID: fmt.Sprintf("f-%s-%d", zone, t0.UnixNano()), Namespace: ns}
	w.Ledger.add(op)
	info, err := w.do(ctx, op, func(ctx context.Context) (*lehrpb.VersionInfo, error) {
		base, err := w.latest(ctx, ns)
		if err != nil {
			return nil, err
		}
		return w.Producer.Patch(ctx, ns, base, producer.Patch{Set: []producer.Property{{Key: "op", Value: []byte(op.ID)}}},
			producer.WithRequestID(op.ID), producer.WithMessage(op.ID))
	})
	if err != nil {
		return 0, err
	}
	if info == nil {
		return 0, fmt.Errorf("failover patch %s refused: %v", op.ID, op.Refused)
	}
	err = poll(ctx, 60*time.Second, func() error {
		for _, a := range agents {
			st, err := a.Status(ctx)
			if err != nil {
				return err
			}
			if v := nsVersion(st, ns); v < info.GetSeq() {
				return fmt.Errorf("agent %s holds %s@%d, want %d", a.HostID, ns, v, info.GetSeq())
			}
		}
		return nil
	})
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("failover in %s: %w", zone, err)
	}
	if !restart {
		if err := victim.Start(ctx); err != nil {
			return 0, err
		}
	}
	return d, nil
}

func nsVersion(st *lehrpb.StatusResponse, ns string) uint64 {
	for _, n := range st.GetNamespaces() {
		if n.GetNamespace() == ns {
			return n.GetVersion()
		}
	}
	return 0
}

// goal is a namespace's latest version.
type goal struct {
	seq uint64
	sum string
}

func latest(ctx context.Context, prod *producer.Client, namespaces []string) (map[string]goal, error) {
	goals := map[string]goal{}
	for _, ns := range namespaces {
		meta, err := prod.GetNamespace(ctx, ns)
		if err != nil {
			return nil, err
		}
		goals[ns] = goal{meta.GetLatestVersion(), meta.GetLatestChecksum()}
	}
	return goals, nil
}

// converge waits until every agent holds every goal.
func converge(ctx context.Context, agents []*Agent, goals map[string]goal, bound time.Duration) error {
	return poll(ctx, bound, func() error {
		for _, a := range agents {
			st, err := a.Status(ctx)
			if err != nil {
				return fmt.Errorf("agent %s: %w", a.HostID, err)
			}
			for ns, g := range goals {
				var have *lehrpb.NamespaceStatus
				for _, n := range st.GetNamespaces() {
					if n.GetNamespace() == ns {
						have = n
					}
				}
				if have.GetVersion() != g.seq || have.GetChecksum() != g.sum {
					return fmt.Errorf("agent %s holds %s@%d, goal %d", a.HostID, ns, have.GetVersion(), g.seq)
				}
			}
		}
		return nil
	})
}

func observersAt(obs *Observer, agents []*Agent, goals map[string]goal) error {
	seen := obs.Latest()
	for _, a := range agents {
		for ns, g := range goals {
			if v := seen[[2]string{a.HostID, ns}]; v < g.seq {
				return fmt.Errorf("the consumer on %s saw %s@%d, goal %d", a.HostID, ns, v, g.seq)
			}
		}
	}
	return nil
}

// poll calls cond every 20 ms until it returns nil, ctx ends or timeout
// (if positive) passes; the error then names cond's last complaint.
func poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// durations summarises ds: p50 and max.
func durations(ds []time.Duration) (p50, maxd time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)-1]
}

// Quiet returns a logger of log's warnings and errors only.
func Quiet(log *slog.Logger) *slog.Logger {
	return slog.New(minLevel{log.Handler(), slog.LevelWarn})
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}

// startObserved starts a cluster as opts say with the rollout strategist
// off (every publish moves every zone at once), names n namespaces of
// Domain and puts an observing consumer of each on every agent. The
// caller closes the observer, then the cluster.
func startObserved(ctx, run context.Context, opts ClusterOptions, n int) (*Cluster, []string, *Observer, error) {
	opts.ControlArgs = append(opts.ControlArgs, "--rollouts=false")
	cl, err := StartCluster(ctx, run, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	var namespaces []string
	for i := range n {
		namespaces = append(namespaces, fmt.Sprintf("%s/ns%d", Domain, i))
	}
	// The consumers log every lease they re-acquire after a kill; only
	// their warnings are worth reading here.
	obs, err := Observe(ctx, cl.Agents, namespaces, Quiet(opts.Logger))
	if err != nil {
		cl.Close()
		return nil, nil, nil, err
	}
	return cl, namespaces, obs, nil
}
