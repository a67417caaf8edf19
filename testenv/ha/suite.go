package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/chaos"
)

// Config configures a Suite. Every duration is a fault's length or a
// bound on a wait for an event, never an assertion on timing.
type Config struct {
	// Binary is the lehr binary (chaos.Build), EtcdBinary etcd's server
	// (BuildEtcd). Required.
	Binary, EtcdBinary string
	// Dir holds every process's data, sockets and log; keep it short
	// (agents' unix sockets live under it).
	Dir string
	// Pace is how often the workload writes to each namespace; default
	// 500 ms.
	Pace time.Duration
	// Before and After are how many writes of the global-blast namespace
	// are acknowledged before the fault and after the recovery; default 6.
	Before, After int
	// EtcdDown is how long a killed etcd leader stays down; default 2 s.
	EtcdDown time.Duration
	// Outage is how long etcd stays without a quorum; default 20 s.
	Outage time.Duration
	// CanaryBake is the progressive namespace's canary bake; default 3 s.
	CanaryBake time.Duration
	// FailoverBound is how long the killed control replica the
	// distributor was connected to stays down at most, waiting for the
	// next update to be applied without it; default 60 s.
	FailoverBound time.Duration
	// ConvergeBound bounds every wait for convergence and recovery;
	// default 2 min.
	ConvergeBound time.Duration
	// Seed seeds the workload's values.
	Seed   uint64
	Logger *slog.Logger
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Pace, 500*time.Millisecond)
	def(&c.EtcdDown, 2*time.Second)
	def(&c.Outage, 20*time.Second)
	def(&c.CanaryBake, 3*time.Second)
	def(&c.FailoverBound, time.Minute)
	def(&c.ConvergeBound, 2*time.Minute)
	if c.Before <= 0 {
		c.Before = 6
	}
	if c.After <= 0 {
		c.After = 6
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Zone is the suite's one zone.
const Zone = "z0"

// Suite is the cluster the scenarios run on, one after the other: three
// etcd members, two control replicas on them, one zone with a
// distributor given both replicas' addresses, and two agents.
type Suite struct {
	Etcd    *Etcd
	Cluster *chaos.Cluster

	cfg  Config
	log  *slog.Logger
	stop context.CancelFunc // ends supervision
	// failures already reported by an earlier scenario.
	failures map[string]bool
	runs     int
}

// Start starts the suite's cluster. ctx bounds the start and the suite's
// life (supervision); Close ends it.
func Start(ctx context.Context, cfg Config) (_ *Suite, err error) {
	cfg.defaults()
	run, stop := context.WithCancel(ctx)
	s := &Suite{cfg: cfg, log: cfg.Logger, stop: stop, failures: map[string]bool{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Etcd, err = StartEtcd(ctx, run, EtcdOptions{Binary: cfg.EtcdBinary, Dir: cfg.Dir, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if s.Cluster, err = chaos.StartCluster(ctx, run, chaos.ClusterOptions{
		Binary: cfg.Binary, Dir: cfg.Dir, Logger: cfg.Logger,
		Topology:      chaos.Topology{Zones: 1, DistributorsPerZone: 1, AgentsPerZone: 2},
		Controls:      2,
		EtcdEndpoints: s.Etcd.Endpoints(),
		EtcdTLS:       &s.Etcd.TLS,
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Close ends every process.
func (s *Suite) Close() error {
	var errs []error
	if s.Cluster != nil {
		errs = append(errs, s.Cluster.Close())
	}
	if s.Etcd != nil {
		errs = append(errs, s.Etcd.Close())
	}
	s.stop()
	return errors.Join(errs...)
}

func (s *Suite) prod() *producer.Client { return s.Cluster.Producer() }

// applyDeadline is the progressive rollouts' apply deadline: longer than
// any fault lasts, so a stage fails on it only when delivery broke for
// good.
func (s *Suite) applyDeadline() time.Duration {
	return s.cfg.ConvergeBound + s.cfg.FailoverBound + s.cfg.Outage
}

// Scenario is one fault run: Run starts the workload, calls fault once
// enough writes were acknowledged, keeps writing through the recovery,
// then checks and measures.
type Scenario struct {
	// Name names the subtest and prefixes the scenario's namespaces.
	Name string
	// Title says what the fault is, in the report.
	Title string
	fault func(ctx context.Context, r *run) error
}

// Scenarios are issue 29's fault runs, in the order the suite runs them.
var Scenarios = []Scenario{
	{"etcd-leader", "kill the etcd leader", killEtcdLeader},
	{"strategist", "kill the strategist's control replica mid-canary", killStrategist},
	{"quorum", "lose etcd's quorum", loseQuorum},
	{"control", "kill the control replica the distributor is connected to", killConnectedControl},
}

// Result is what a scenario found and measured. Violations lists every
// broken invariant; a correct system has none.
type Result struct {
	Scenario, Title string
	// Fault says what was done, e.g. "SIGKILL etcd m1 (the leader), down 2s".
	Fault    string
	Duration time.Duration
	// Writes (both namespaces): made, acknowledged, refused, retried
	// (called again with the same request id after an error or timeout).
	Ops, Acked, Refused, Retried int
	// Lost and Duplicated acknowledged writes, checked against history.
	Lost, Duplicated int
	// Rollouts of the progressive namespace, and how many succeeded.
	Rollouts, RolloutsSucceeded int
	// FaultToUpdate is the time from the fault to every consumer holding
	// the first write of the global-blast namespace issued after it (0 if
	// none arrived).
	FaultToUpdate time.Duration
	// Figures are the scenario's own measurements.
	Figures []Figure
	// Notes say what the figures depend on.
	Notes      []string
	Violations []string
}

// Figure is one measured duration.
type Figure struct {
	Name string
	D    time.Duration
}

func (r *Result) figure(name string, d time.Duration) {
	r.Figures = append(r.Figures, Figure{name, d})
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// run is one scenario under way.
type run struct {
	s           *Suite
	res         *Result
	blast, prog string
	w           *chaos.Workload
	obs         *chaos.Observer

	// Set by the fault: when it struck, when the system was whole again,
	// and (quorum loss) when etcd had a quorum again.
	t0, recovered, quorumBack time.Time

	mu       sync.Mutex
	current  uint64                         // the progressive version whose rollout the gate waits for
	rollouts map[uint64]lehrpb.RolloutState // how each ended
}

// Run runs sc on the suite: once the cluster is healthy, it starts
// consumers on every agent and the workload — writes every Pace to a
// global-blast namespace and a progressive one (the next write of the
// latter once the last one's rollout ended) — then does the fault, waits
// for After more acknowledged writes, stops the workload and checks:
// every acknowledged write in history exactly once, every agent and
// consumer at the latest versions, no process failure. An error means
// the scenario could not be carried out; what it found is in the result.
func (s *Suite) Run(ctx context.Context, sc Scenario) (*Result, error) {
	start := time.Now()
	res := &Result{Scenario: sc.Name, Title: sc.Title}
	if err := s.waitHealthy(ctx); err != nil {
		return nil, fmt.Errorf("ha: before %s: %w", sc.Name, err)
	}
	s.runs++
	// Namespaces of their own: request ids (the ops' ids) are unique per
	// namespace, and history is checked from version 1.
	r := &run{s: s, res: res, rollouts: map[uint64]lehrpb.RolloutState{},
		blast: fmt.Sprintf("%s/%s-%d-blast", chaos.Domain, sc.Name, s.runs),
		prog:  fmt.Sprintf("%s/%s-%d-canary", chaos.Domain, sc.Name, s.runs),
	}
	namespaces := []string{r.blast, r.prog}
	obs, err := chaos.Observe(ctx, s.Cluster.Agents, namespaces, chaos.Quiet(s.log))
	if err != nil {
		return nil, err
	}
	defer obs.Close()
	r.obs = obs

	stop := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stop) })
	defer stopOnce()
	r.w = &chaos.Workload{Producer: s.prod(), Namespaces: namespaces, Seed: s.cfg.Seed + uint64(s.runs),
		Pace: s.cfg.Pace, PatchesOnly: true, Until: stop, Gate: r.gate}
	wctx, wcancel := context.WithCancelCause(ctx)
	defer wcancel(nil)
	// The fault and the waits end as soon as the workload does (it
	// returns early only on an error no retry can fix).
	sctx, scancel := context.WithCancelCause(ctx)
	defer scancel(nil)
	var werr error
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		werr = r.w.Run(wctx)
		scancel(fmt.Errorf("the workload ended: %w", werr))
	}()
	fail := func(err error) (*Result, error) {
		wcancel(err)
		stopOnce()
		<-wdone
		return res, err
	}

	if err := r.waitWrites(sctx, s.cfg.Before, time.Time{}); err != nil {
		return fail(fmt.Errorf("ha: %s: before the fault: %w", sc.Name, err))
	}
	if err := sc.fault(sctx, r); err != nil {
		return fail(fmt.Errorf("ha: %s: %w", sc.Name, err))
	}
	if r.recovered.IsZero() {
		r.recovered = time.Now()
	}
	if err := r.waitWrites(sctx, s.cfg.After, r.recovered); err != nil {
		return fail(fmt.Errorf("ha: %s: after the recovery: %w", sc.Name, err))
	}
	stopOnce()
	<-wdone
	if werr != nil {
		return res, fmt.Errorf("ha: %s: workload: %w", sc.Name, werr)
	}

	rep := &chaos.Report{}
	if err := chaos.Verify(ctx, rep, s.Cluster, r.w, obs, namespaces, s.cfg.ConvergeBound); err != nil {
		return res, fmt.Errorf("ha: %s: verify: %w", sc.Name, err)
	}
	res.Ops, res.Acked, res.Refused, res.Retried = rep.Ops, rep.Acked, rep.Refused, rep.Retried
	res.Lost, res.Duplicated = rep.Lost, rep.Duplicated
	res.Violations = append(res.Violations, rep.Violations...)
	for _, f := range append(s.Cluster.Failures(), s.Etcd.Failures()...) {
		if !s.failures[f] {
			s.failures[f] = true
			res.violate("%s", f)
		}
	}
	r.mu.Lock()
	res.Rollouts = len(r.rollouts)
	for v, st := range r.rollouts {
		if st == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
			res.RolloutsSucceeded++
		} else {
			res.note("rollout of %s@%d ended %s", r.prog, v, st)
		}
	}
	r.mu.Unlock()

	ops, seen := r.w.Ledger.Snapshot(), obs.Observations()
	if _, at, ok := nextUpdate(ops, seen, r.agents(), r.blast, r.t0, false); ok {
		res.FaultToUpdate = at.Sub(r.t0)
	} else {
		res.violate("no write of %s issued after the fault reached every consumer", r.blast)
	}
	if !r.quorumBack.IsZero() {
		if acked, ok := firstAck(ops, r.quorumBack); ok {
			res.figure("quorum back → first write acknowledged", acked.Sub(r.quorumBack))
		}
		if _, at, ok := nextUpdate(ops, seen, r.agents(), r.blast, r.quorumBack, true); ok {
			res.figure("quorum back → next update applied", at.Sub(r.quorumBack))
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

// setPolicy gives a namespace of the scenario its rollout policy, once
// its first version made it exist: every zone at once for the
// global-blast one; for the progressive one a canary host baking
// CanaryBake (judged by the built-in gates: the canary judge has no
// control population to speak of on two hosts), then the rest.
func (r *run) setPolicy(ctx context.Context, ns string) error {
	p := &lehrpb.RolloutPolicy{GlobalBlast: true}
	if ns == r.prog {
		deadline := durationpb.New(r.s.applyDeadline())
		p = &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
			{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
				Bake: durationpb.New(r.s.cfg.CanaryBake), ApplyDeadline: deadline, Analysis: &lehrpb.CanaryAnalysis{Disabled: true}},
			{Name: "zones", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, ApplyDeadline: deadline},
		}}
	}
	if _, err := r.s.prod().SetRolloutPolicy(ctx, ns, p, "ha suite", 0); err != nil {
		return fmt.Errorf("ha: rollout policy of %s: %w", ns, err)
	}
	return nil
}

// gate gives a namespace its policy once its first version made it
// exist (a first version has no rollout), and holds the progressive
// namespace's next write until the rollout of the version just written
// ended (a newer write would supersede it).
func (r *run) gate(ctx context.Context, ns string, v *lehrpb.VersionInfo) error {
	if v.GetSeq() == 1 {
		return r.setPolicy(ctx, ns)
	}
	if ns != r.prog {
		return nil
	}
	r.mu.Lock()
	r.current = v.GetSeq()
	r.mu.Unlock()
	var ro *lehrpb.Rollout
	err := pollEvery(ctx, 200*time.Millisecond, r.s.applyDeadline()+r.s.cfg.ConvergeBound, func() (err error) {
		if ro, err = r.rollout(ctx, v.GetSeq()); err != nil {
			return err
		}
		if !ended(ro.GetState()) {
			return fmt.Errorf("the rollout of %s@%d is %s at stage %d", ns, v.GetSeq(), ro.GetState(), ro.GetStage())
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.rollouts[v.GetSeq()] = ro.GetState()
	r.mu.Unlock()
	if ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		// Every stage's deadline outlasts the faults: a rollout that did
		// not succeed means delivery broke for good. (A rollback would
		// also make the next patch's delete of the last temporary key
		// refer to a key the rolled-back content lacks.)
		return fmt.Errorf("the rollout of %s@%d ended %s: %s", ns, v.GetSeq(), ro.GetState(), ro.GetReason())
	}
	return nil
}

// currentRollout is the progressive version whose rollout runs, or 0.
func (r *run) currentRollout() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, done := r.rollouts[r.current]; done {
		return 0
	}
	return r.current
}

func (r *run) rollout(ctx context.Context, v uint64) (*lehrpb.Rollout, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.s.prod().GetRollout(ctx, r.prog, v)
}

func ended(st lehrpb.RolloutState) bool {
	switch st {
	case lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED, lehrpb.RolloutState_ROLLOUT_STATE_FAILED,
		lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED, lehrpb.RolloutState_ROLLOUT_STATE_ABORTED:
		return true
	}
	return false
}

// waitWrites waits until n writes of the global-blast namespace issued
// after since (zero: any) were acknowledged and every consumer holds
// both namespaces.
func (r *run) waitWrites(ctx context.Context, n int, since time.Time) error {
	return pollEvery(ctx, 50*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		got := 0
		for _, op := range r.w.Ledger.Snapshot() {
			if op.Namespace == r.blast && op.Acked != nil && !op.IssuedAt.Before(since) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d of %d writes of %s acknowledged", got, n, r.blast)
		}
		seen := r.obs.Latest()
		for _, a := range r.agents() {
			for _, ns := range []string{r.blast, r.prog} {
				if seen[[2]string{a, ns}] == 0 {
					return fmt.Errorf("the consumer on %s has not seen %s yet", a, ns)
				}
			}
		}
		return nil
	})
}

func (r *run) agents() []string {
	var ids []string
	for _, a := range r.s.Cluster.Agents {
		ids = append(ids, a.HostID)
	}
	return ids
}

// nextUpdate finds the first write of ns issued after t (or, if
// ackedAfter, the first acknowledged after t) and returns its version and
// when the last of agents' consumers saw it or a newer one.
func nextUpdate(ops []chaos.Op, obs []chaos.Observation, agents []string, ns string, t time.Time, ackedAfter bool) (uint64, time.Time, bool) {
	var next *chaos.Op
	for i := range ops {
		op := &ops[i]
		if op.Namespace != ns || op.Acked == nil {
			continue
		}
		at := op.IssuedAt
		if ackedAfter {
			at = op.AckedAt
		}
		if at.Before(t) {
			continue
		}
		if next == nil || at.Before(pick(next, ackedAfter)) {
			next = op
		}
	}
	if next == nil {
		return 0, time.Time{}, false
	}
	seq := next.Acked.GetSeq()
	var last time.Time
	for _, a := range agents {
		var at time.Time
		for _, ob := range obs { // in order of arrival
			if ob.Agent == a && ob.NS == ns && ob.Version >= seq {
				at = ob.At
				break
			}
		}
		if at.IsZero() {
			return seq, time.Time{}, false
		}
		last = later(last, at)
	}
	return seq, last, true
}

func pick(op *chaos.Op, acked bool) time.Time {
	if acked {
		return op.AckedAt
	}
	return op.IssuedAt
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// firstAck returns when the first write acknowledged after t was.
func firstAck(ops []chaos.Op, t time.Time) (time.Time, bool) {
	var first time.Time
	for _, op := range ops {
		if op.Acked != nil && !op.AckedAt.Before(t) && (first.IsZero() || op.AckedAt.Before(first)) {
			first = op.AckedAt
		}
	}
	return first, !first.IsZero()
}

// WaitHealthy waits until the cluster is whole, as each scenario does
// before it starts (waitHealthy).
func (s *Suite) WaitHealthy(ctx context.Context) error { return s.waitHealthy(ctx) }

// waitHealthy waits until every process is ready, etcd answers, a
// strategist leads, every agent is connected and the distributor reports
// them.
func (s *Suite) waitHealthy(ctx context.Context) error {
	return pollEvery(ctx, 100*time.Millisecond, s.cfg.ConvergeBound, func() error {
		if err := s.Etcd.Healthy(ctx); err != nil {
			return err
		}
		for _, p := range s.Cluster.Controls {
			if !p.Ready() {
				return fmt.Errorf("%s is not ready", p.Name)
			}
		}
		for _, d := range s.Cluster.Distributors[Zone] {
			if !d.Ready() {
				return fmt.Errorf("%s is not ready", d.Name)
			}
		}
		if _, err := s.strategist(ctx); err != nil {
			return err
		}
		for _, a := range s.Cluster.Agents {
			st, err := a.Status(ctx)
			if err != nil || !st.GetConnected() {
				return fmt.Errorf("agent %s is not connected (%v)", a.HostID, err)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := s.prod().RPC().GetZoneStatus(cctx, &lehrpb.GetZoneStatusRequest{Zone: Zone})
		if err != nil {
			return err
		}
		agents := 0
		for _, d := range st.GetDistributors() {
			agents += int(d.GetAgents())
		}
		if agents != len(s.Cluster.Agents) {
			return fmt.Errorf("the distributors of %s report %d agents, want %d", Zone, agents, len(s.Cluster.Agents))
		}
		return nil
	})
}

// strategistKey is the prefix of the rollout strategist's election keys
// (control/strategist: a concurrency.Election on control/store's
// DefaultPrefix + "strategist"; TestStrategistKey checks it).
const strategistKey = "/lehr/strategist/"

// strategist returns the index of the control replica leading the rollout
// strategist's election: the oldest candidate's value is the leader's
// listen address.
func (s *Suite) strategist(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.Etcd.Client().Get(ctx, strategistKey, clientv3.WithFirstCreate()...)
	if err != nil {
		return -1, fmt.Errorf("read the strategist's election: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return -1, errors.New("no control replica campaigns for the strategist")
	}
	addr := string(resp.Kvs[0].Value)
	if i := slices.Index(s.Cluster.ControlAddrs, addr); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("the strategist's leader %q is no replica of the suite", addr)
}

// pollEvery calls cond every interval until it returns nil, ctx ends or
// timeout passes; the error then wraps ctx's cause and names cond's last
// complaint.
func pollEvery(ctx context.Context, interval, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}
