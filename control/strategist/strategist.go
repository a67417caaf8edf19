package strategist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultInterval is how often the strategist looks at every rollout in
// flight.
const DefaultInterval = time.Second

// KeepRollouts is how many rollouts of a namespace, with their event logs,
// the strategist keeps; older finished ones are removed.
const KeepRollouts = 20

// Options configure a Strategist.
type Options struct {
	// Store and Client reach etcd. Required; control passes its
	// *store.Store.
	Store  Store
	Client *clientv3.Client
	// ElectionKey is the etcd key prefix of the election among control
	// replicas; default store.DefaultPrefix + "strategist".
	ElectionKey string
	// ID names this replica in the election; default "control".
	ID string
	// Interval is how often a domain with rollouts in flight is looked
	// at (bakes, deadlines, evidence) and running canary evaluations are
	// stepped; a domain is also looked at as soon as one of its
	// namespaces gets a version or a command is queued. Default
	// DefaultInterval.
	Interval time.Duration
	// Policy returns the policy in effect for a namespace and where it
	// comes from. Required.
	Policy func(ctx context.Context, ns string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error)
	// Metrics receives lehr_control_rollouts{state},
	// lehr_control_rollbacks_total{reason} and
	// lehr_control_rollout_stage_seconds; nil means a private set.
	Metrics *metrics.Set
	Logger  *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Evaluations runs canary analyses: canary stages are judged by it,
	// and the leader steps every running evaluation each round. Nil
	// means one on Store with this strategist's clock and logger.
	Evaluations *evaluation.Service
	// Audit, if set, records the strategist's goal moves and rollbacks in
	// the audit log (service.Service.Audit), as Author, with the rollout
	// and the reason.
	Audit func(*lehrpb.AuditRecord)
	// Ended, if set, is told of every rollout the strategist ended
	// (SUCCEEDED, FAILED, ABORTED or SUPERSEDED) once that is written;
	// control's service then stops what the rollout needed of the hosts
	// (service.Service.RolloutEnded). Called from the round, never
	// concurrently; it must not wait on the strategist.
	Ended func(ctx context.Context, r *lehrpb.Rollout)
	// Alerts, if set, is control's alerts source: the monitoring check
	// of a policy that names alerts reads it when a stage is due (one
	// read per Source interval, shared by every rollout). Nil: control
	// has none, and such a stage follows its policy's on_source_error,
	// saying so.
	Alerts *alerts.Source
	// MetricsSource, if set, is control's metrics source, which the
	// canary checks written as queries read (evaluation.Options.Source);
	// used when Evaluations is nil.
	MetricsSource evaluation.MetricSource
	// Leading, if set, runs in its own goroutine while this replica
	// leads, with g the leadership's guard; its ctx ends when the
	// leadership does, and the strategist waits for it to return before
	// campaigning again. Control measures propagation in it
	// (propagation.Runner.Lead): one replica at a time.
	Leading func(ctx context.Context, g store.Guard)
}

// Strategist walks every rollout through its stages (Select → Update →
// Validate) while it leads the election among control replicas: it starts
// a rollout for each new version, moves goal states stage by stage, reads
// the evidence distributors report (zone status), and rolls a failing
// rollout back. Everything it decides is in etcd, written in one guarded
// transaction per step, so a replica that takes over resumes every rollout
// where it stood.
type Strategist struct {
	opts Options
	log  *slog.Logger
	met  *metrics.Set

	leading  atomic.Bool // lehr_control_strategist_leader
	statesMu sync.Mutex
	states   map[string]map[lehrpb.RolloutState]int // rollouts by state, per domain, at its last round
}

// NewStrategist validates opts; it starts nothing (see Run).
func New(opts Options) (*Strategist, error) {
	switch {
	case opts.Store == nil:
		return nil, errors.New("strategist: Options.Store is required")
	case opts.Client == nil:
		return nil, errors.New("strategist: Options.Client is required")
	case opts.Policy == nil:
		return nil, errors.New("strategist: Options.Policy is required")
	}
	if opts.ElectionKey == "" {
		opts.ElectionKey = store.DefaultPrefix + "strategist"
	}
	if opts.ID == "" {
		opts.ID = "control"
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Strategist{opts: opts, log: opts.Logger, met: opts.Metrics}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.opts.Evaluations == nil {
		evs, err := evaluation.New(evaluation.Options{Store: opts.Store, Now: opts.Now, Logger: s.log, Source: opts.MetricsSource})
		if err != nil {
			return nil, err
		}
		s.opts.Evaluations = evs
	}
	if s.met == nil {
		s.met = metrics.NewSet()
	}
	// Series an alert watches exist from the start, at 0, so that the
	// first rollback or stage is an increase (Prometheus's increase() does
	// not count a series' first sample); deploy/prometheus/lehr-alerts.yaml.
	for _, state := range []lehrpb.RolloutState{lehrpb.RolloutState_ROLLOUT_STATE_FAILED, lehrpb.RolloutState_ROLLOUT_STATE_ABORTED} {
		s.met.GetOrCreateCounter(fmt.Sprintf(`lehr_control_rollbacks_total{reason=%q}`, rollout.StateName(state)))
	}
	s.met.GetOrCreatePrometheusHistogramExt(`lehr_control_rollout_stage_seconds`, stageBuckets)
	s.met.GetOrCreateGauge(`lehr_control_strategist_leader`, func() float64 {
		if s.leading.Load() {
			return 1
		}
		return 0
	})
	return s, nil
}

var campaignBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}

// Run campaigns for leadership and, while leading, runs a round every
// Interval; it campaigns again when it loses its etcd session. It returns
// nil when ctx ends.
func (s *Strategist) Run(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.campaign(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("rollout strategist: election failed; retrying", "err", err)
			if !backoff.Sleep(ctx, campaignBackoff.Full(attempt)) {
				return nil
			}
			continue
		}
		attempt = 0
	}
}

// campaign wins the election, leads until the session or ctx ends, then
// resigns.
func (s *Strategist) campaign(ctx context.Context) error {
	sess, err := concurrency.NewSession(s.opts.Client, concurrency.WithTTL(5), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, s.opts.ElectionKey)
	if err := e.Campaign(ctx, s.opts.ID); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	guard := store.Guard{Key: e.Key(), Rev: e.Rev()}
	s.log.Info("rollout strategist: leading", "id", s.opts.ID)
	s.leading.Store(true)
	defer func() {
		// Only the leader counts rollouts: a replica that no longer leads
		// says 0 rather than what it counted last.
		s.leading.Store(false)
		s.statesMu.Lock()
		s.states = nil
		s.statesMu.Unlock()
		s.setStateGauges()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = e.Resign(rctx)
		cancel()
		s.log.Info("rollout strategist: no longer leading", "id", s.opts.ID)
	}()
	if s.opts.Leading != nil {
		lctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.opts.Leading(lctx, guard) }()
		defer func() { stop(); <-done }()
	}
	return s.lead(ctx, guard, sess.Done())
}

// Round runs one round of every domain, reading every namespace, after a
// look of every running canary evaluation: what the leader does over an
// Interval, for tests that drive a strategist by hand. Writes are guarded
// by g (the zero Guard in tests that run one strategist).
func (s *Strategist) Round(ctx context.Context, g store.Guard) error {
	if err := s.opts.Evaluations.StepAll(ctx, g); err != nil {
		return err
	}
	doms, err := s.opts.Store.DomainNames(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		res, err := s.domainRound(ctx, g, d, nil)
		if errors.Is(err, store.ErrNotLeader) {
			return err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var known domainState
		known.merge(res, nil, true)
		s.setDomainStates(d, known.sum())
	}
	s.setStateGauges()
	return errors.Join(errs...)
}

// nsResult is what a round leaves of one namespace: whether it has a
// rollout in flight (or a command queued), which later rounds read again,
// and its stored rollouts by state.
type nsResult struct {
	inFlight bool
	states   map[lehrpb.RolloutState]int
}

// domainRound decides once on the namespaces nss of domain — every
// namespace of it if nss is nil: it carries out queued commands, starts
// rollouts for new versions, steps every running one and admits those
// waiting for a stage (nss must name every namespace with a rollout in
// flight, for the domain's max_concurrent). It returns what it leaves of
// each namespace it read.
func (s *Strategist) domainRound(ctx context.Context, g store.Guard, domain string, nss []string) (map[string]nsResult, error) {
	st := s.opts.Store
	in, err := st.ReadRolloutInputs(ctx, domain, nss)
	if err != nil {
		return nil, err
	}
	// Preview namespaces carry experiments that are never enforced; every
	// version of one goes to every zone at once (control/service).
	heads := slices.DeleteFunc(in.Heads, func(h *lehrpb.Namespace) bool { return names.IsPreview(h.GetName()) })
	zl, err := st.ListZones(ctx)
	if err != nil {
		return nil, err
	}
	zones := make([]string, 0, len(zl))
	lastReport := make(map[string]time.Time, len(zl))
	for _, z := range zl {
		zones = append(zones, z.GetName())
		if t := z.GetLastReportTime(); t != nil {
			lastReport[z.GetName()] = t.AsTime()
		}
	}
	slices.Sort(zones)
	rd := round{g: g, zones: zones, lastReport: lastReport, headRev: in.Rev, written: map[string]*lehrpb.Rollout{}, status: map[string][]*lehrpb.DistributorStatus{}}
	latest := map[string]*lehrpb.Rollout{}
	byID := map[string]*lehrpb.Rollout{}
	byNS := map[string][]*lehrpb.Rollout{} // oldest first, as listed
	for _, r := range in.Rollouts {
		if cur := latest[r.GetNamespace()]; cur == nil || cur.GetVersion() < r.GetVersion() {
			latest[r.GetNamespace()] = r
		}
		byID[r.GetId()] = r
		byNS[r.GetNamespace()] = append(byNS[r.GetNamespace()], r)
	}
	var errs []error
	// Bounded history: a namespace keeps its newest KeepRollouts rollouts
	// (active ones always).
	for ns, rs := range byNS {
		var drop []uint64
		for _, r := range rs[:max(0, len(rs)-KeepRollouts)] {
			if !rollout.Active(r) {
				drop = append(drop, r.GetVersion())
			}
		}
		if err := st.PruneRollouts(ctx, rd.g, ns, drop); err != nil {
			errs = append(errs, err)
			continue
		}
		byNS[ns] = slices.DeleteFunc(rs, func(r *lehrpb.Rollout) bool { return slices.Contains(drop, r.GetVersion()) })
	}
	// Operator commands first: a pause must hold before the next step.
	queued := map[string]bool{}
	for _, qc := range in.Commands {
		r := byID[qc.Command.GetRolloutId()]
		if r == nil {
			queued[qc.Namespace] = true
			continue // its rollout is not readable yet; the next round sees it
		}
		nr, err := s.command(ctx, rd, r, qc)
		if err != nil {
			queued[qc.Namespace] = true
			errs = append(errs, fmt.Errorf("carry out %v on %s: %w", qc.Command.GetAction(), r.GetId(), err))
			continue
		}
		if latest[r.GetNamespace()].GetVersion() == nr.GetVersion() {
			latest[r.GetNamespace()] = nr
		}
	}
	for _, h := range heads {
		ns := h.GetName()
		r := latest[ns]
		if h.GetLatestVersion() > 1 && (r == nil || r.GetVersion() < h.GetLatestVersion()) {
			nr, err := s.start(ctx, rd, h, r)
			if err != nil {
				if errors.Is(err, store.ErrNotLeader) {
					return nil, err
				}
				errs = append(errs, fmt.Errorf("start the rollout of %s@%d: %w", ns, h.GetLatestVersion(), err))
				continue
			}
			if nr != nil {
				r = nr
				latest[ns] = nr
			}
		}
		// Only the rollout of the namespace's latest version moves goals:
		// an older one still in flight was just superseded, or its
		// supersede failed and the next round tries again.
		if rollout.Active(r) && r.GetVersion() == h.GetLatestVersion() {
			if err := s.step(ctx, rd, r); err != nil {
				if errors.Is(err, store.ErrNotLeader) {
					return nil, err
				}
				errs = append(errs, fmt.Errorf("step %s: %w", r.GetId(), err))
			}
		}
	}
	var active []*lehrpb.Rollout
	for _, r := range latest {
		if rollout.Active(r) {
			active = append(active, r)
		}
	}
	if err := s.admit(ctx, rd, active); err != nil {
		errs = append(errs, err)
	}

	// What the round leaves: every rollout as last written.
	res := map[string]nsResult{}
	for _, ns := range nss {
		res[ns] = nsResult{}
	}
	for _, h := range in.Heads {
		res[h.GetName()] = nsResult{}
	}
	for id, r := range rd.written {
		if byID[id] == nil {
			byNS[r.GetNamespace()] = append(byNS[r.GetNamespace()], r)
		}
	}
	for ns, rs := range byNS {
		out := nsResult{states: map[lehrpb.RolloutState]int{}}
		for _, r := range rs {
			if w := rd.written[r.GetId()]; w != nil {
				r = w
			}
			out.states[r.GetState()]++
			out.inFlight = out.inFlight || rollout.Active(r)
		}
		res[ns] = out
	}
	for ns := range queued {
		r := res[ns]
		r.inFlight = true
		res[ns] = r
	}
	return res, errors.Join(errs...)
}

// round is what a domain's round decides under: the leadership guard of
// its writes, the registered zones (sorted) and the revision its heads
// were read at, which guards every goal it moves (store.RolloutStep).
// written collects every rollout the round stored, by id; status the zone
// status it read, by zone: every rollout of the round decides on the same
// reports, read once (with a thousand rollouts baking in one zone, reading
// it per rollout was a thousand reads a second).
type round struct {
	g     store.Guard
	zones []string
	// lastReport is when each zone's distributors last reported
	// (Zone.last_report_time), for telling a silent zone from an empty one.
	lastReport map[string]time.Time
	headRev    int64
	written    map[string]*lehrpb.Rollout
	status     map[string][]*lehrpb.DistributorStatus
}

// zoneStatus returns zone z's status as the round first read it.
func (rd round) zoneStatus(ctx context.Context, st Store, z string) ([]*lehrpb.DistributorStatus, error) {
	if sts, ok := rd.status[z]; ok {
		return sts, nil
	}
	sts, err := st.ZoneStatus(ctx, z)
	if err == nil && rd.status != nil {
		rd.status[z] = sts
	}
	return sts, err
}

// wrote records that the round stored r.
func (rd round) wrote(r *lehrpb.Rollout) {
	if rd.written != nil {
		rd.written[r.GetId()] = r
	}
}

// setDomainStates records domain's rollouts by state for the gauges.
func (s *Strategist) setDomainStates(domain string, states map[lehrpb.RolloutState]int) {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	if s.states == nil {
		s.states = map[string]map[lehrpb.RolloutState]int{}
	}
	s.states[domain] = states
}

// setStateGauges sets lehr_control_rollouts{state} from the domains'
// last rounds.
func (s *Strategist) setStateGauges() {
	sum := map[lehrpb.RolloutState]int{}
	s.statesMu.Lock()
	for _, states := range s.states {
		for st, n := range states {
			sum[st] += n
		}
	}
	s.statesMu.Unlock()
	for v := range lehrpb.RolloutState_name {
		if state := lehrpb.RolloutState(v); state != lehrpb.RolloutState_ROLLOUT_STATE_UNSPECIFIED {
			s.met.GetOrCreateGauge(fmt.Sprintf(`lehr_control_rollouts{state=%q}`, rollout.StateName(state)), nil).Set(float64(sum[state]))
		}
	}
}

// zoneGoals reads the goal of ns in each zone (nil where it has none).
func (s *Strategist) zoneGoals(ctx context.Context, ns string, zones []string) (map[string]*lehrpb.GoalState, error) {
	out := map[string]*lehrpb.GoalState{}
	for _, z := range zones {
		gs, _, err := s.opts.Store.Goals(ctx, z, ns)
		if err != nil {
			return nil, err
		}
		if len(gs) > 0 {
			out[z] = gs[0]
		}
	}
	return out, nil
}

// contentOf is rollout.ContentOf of version v of ns, read from the store.
func (s *Strategist) contentOf(ctx context.Context, ns string, v uint64) (uint64, error) {
	return rollout.ContentOf(v, func(v uint64) (*lehrpb.VersionInfo, error) {
		vi, err := s.opts.Store.Version(ctx, ns, v)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil // compacted away: the lineage stops here
		}
		return vi, err
	})
}

// requires returns what a rollout under a policy naming after requires:
// the content of each namespace's latest version. A namespace without a
// version (not published yet, or deleted) requires nothing.
func (s *Strategist) requires(ctx context.Context, after []string) ([]*lehrpb.RolloutRequirement, error) {
	var out []*lehrpb.RolloutRequirement
	for _, ns := range after {
		h, _, err := s.opts.Store.Head(ctx, ns)
		if errors.Is(err, store.ErrNotFound) || (err == nil && h.GetLatestVersion() == 0) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("what %s requires: %w", ns, err)
		}
		c, err := s.contentOf(ctx, ns, h.GetLatestVersion())
		if err != nil {
			return nil, fmt.Errorf("what %s requires: %w", ns, err)
		}
		out = append(out, &lehrpb.RolloutRequirement{Namespace: ns, Version: c})
	}
	return out, nil
}

// reached reads how far the namespaces r requires have gone in zones:
// each one's goal there and the content it holds.
func (s *Strategist) reached(ctx context.Context, r *lehrpb.Rollout, zones []string) ([]rollout.Reached, error) {
	var out []rollout.Reached
	for _, req := range r.GetRequires() {
		ns := req.GetNamespace()
		goals, err := s.zoneGoals(ctx, ns, zones)
		if err != nil {
			return nil, fmt.Errorf("how far %s went: %w", ns, err)
		}
		rc := rollout.Reached{Namespace: ns, Zones: map[string]rollout.ZoneContent{}}
		content := map[uint64]uint64{}
		for z, g := range goals {
			v := g.GetVersion()
			c, ok := content[v]
			if !ok {
				if c, err = s.contentOf(ctx, ns, v); err != nil {
					return nil, fmt.Errorf("how far %s went: %w", ns, err)
				}
				content[v] = c
			}
			rc.Zones[z] = rollout.ZoneContent{Goal: v, Content: c}
		}
		out = append(out, rc)
	}
	return out, nil
}

// start begins the rollout of h's latest version, superseding prev if it
// still runs (Start), and returns the namespace's latest rollout as it
// now stands: the new one, prev finished (the head is its own rollback)
// or superseded when the version needs none (an operator's rollback moved
// every zone); nil when nothing changed.
func (s *Strategist) start(ctx context.Context, rd round, h *lehrpb.Namespace, prev *lehrpb.Rollout) (*lehrpb.Rollout, error) {
	zones := rd.zones
	ns, seq := h.GetName(), h.GetLatestVersion()
	goals, err := s.zoneGoals(ctx, ns, zones)
	if err != nil {
		return nil, err
	}
	d, err := rollout.Start(rollout.StartInput{
		Head: h, Prev: prev, Goals: goals, Zones: zones, Now: s.opts.Now(),
		Latest: func() (*lehrpb.VersionInfo, error) { return s.opts.Store.Version(ctx, ns, seq) },
		Policy: func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
			return s.opts.Policy(ctx, ns)
		},
		ExpectedChecks: func() ([]*lehrpb.CanaryCheck, error) { return s.opts.Store.ExpectedChecks(ctx, ns, seq) },
		Requires:       func(after []string) ([]*lehrpb.RolloutRequirement, error) { return s.requires(ctx, after) },
	})
	if err != nil {
		return nil, err
	}
	if d.Finish != nil {
		return d.Finish.Rollout, s.apply(ctx, rd, *d.Finish, nil)
	}
	if d.Superseded != nil {
		if err := s.apply(ctx, rd, *d.Superseded, nil); err != nil {
			return nil, err
		}
		s.log.Info("rollout superseded", "rollout", prev.GetId(), "by", seq)
	}
	if d.Started == nil {
		if d.Superseded != nil {
			return d.Superseded.Rollout, nil // ended: nothing of it to step
		}
		return nil, nil
	}
	return d.Started.Rollout, s.apply(ctx, rd, *d.Started, nil)
}

// admit enters the first stage of the rollouts waiting for it (Admit).
func (s *Strategist) admit(ctx context.Context, rd round, active []*lehrpb.Rollout) error {
	zones := rd.zones
	ds, err := rollout.Admit(active, zones, s.opts.Now(), func(ns string) (map[string]*lehrpb.GoalState, error) { return s.zoneGoals(ctx, ns, zones) },
		func(r *lehrpb.Rollout) ([]rollout.Reached, error) { return s.reached(ctx, r, zones) }, s.alerts(ctx))
	errs := []error{err}
	for _, d := range ds {
		if err := s.apply(ctx, rd, d, nil); err != nil {
			errs = append(errs, fmt.Errorf("admit %s: %w", d.Rollout.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

// step advances a running rollout as far as the evidence allows: it reads
// what Step decides on — the evidence, the stage's canary evaluation, the
// goals when the decision needs them — and applies the decision.
func (s *Strategist) step(ctx context.Context, rd round, r *lehrpb.Rollout) error {
	zones := rd.zones
	stages := rollout.Resolve(r.GetPolicy(), zones)
	if len(stages) == 0 || r.GetStageStartTime() == nil {
		return nil // no zone registered; not entered yet: admit decides
	}
	ev, err := rollout.Gather(r, stages, rd.lastReport, func(z string) ([]*lehrpb.DistributorStatus, error) { return rd.zoneStatus(ctx, s.opts.Store, z) })
	if err != nil {
		return err
	}
	in := rollout.StepInput{Rollout: r, Stages: stages, Zones: zones, Evidence: ev, Now: s.opts.Now(), Alerts: s.alerts(ctx),
		Goals:   func() (map[string]*lehrpb.GoalState, error) { return s.zoneGoals(ctx, r.GetNamespace(), zones) },
		Reached: func() ([]rollout.Reached, error) { return s.reached(ctx, r, zones) }}
	if id := r.GetEvaluationId(); id != "" && id == rollout.AnalysisID(r, min(int(r.GetStage()), len(stages)-1)) {
		if in.Analysis, err = s.opts.Evaluations.Get(ctx, id, false); err != nil {
			return err
		}
	}
	d, err := rollout.Step(in)
	if err != nil {
		return err
	}
	if d.Analysis != nil {
		// Start the stage's canary evaluation, judge its first look, and
		// step on with it.
		cev, err := s.opts.Evaluations.Create(ctx, d.Analysis)
		if err != nil {
			return fmt.Errorf("start canary analysis %s: %w", d.Analysis.GetId(), err)
		}
		if cev, err = s.opts.Evaluations.Step(ctx, rd.g, cev); err != nil {
			return err
		}
		if err := s.apply(ctx, rd, d, nil); err != nil {
			return err
		}
		in.Rollout, in.Analysis = d.Rollout, cev
		if d, err = rollout.Step(in); err != nil {
			return err
		}
	}
	return s.apply(ctx, rd, d, nil)
}

// alerts returns the reader of control's alerts source the monitoring
// check calls when a stage is due (nil: control has none). The Source
// reads at most once per its interval, whichever rollout asks.
func (s *Strategist) alerts(ctx context.Context) func() rollout.Alerts {
	src := s.opts.Alerts
	if src == nil {
		return nil
	}
	return func() rollout.Alerts {
		res := src.Read(ctx)
		out := rollout.Alerts{Source: src.Name(), Err: res.Err}
		for _, a := range res.Firing {
			out.Firing = append(out.Firing, rollout.Alert{Labels: a.Labels, ActiveAt: a.ActiveAt})
		}
		return out
	}
}

// apply carries out decision d (and the operator command done, if any,
// which it removes in the same transaction).
func (s *Strategist) apply(ctx context.Context, rd round, d rollout.Decision, done *store.QueuedCommand) error {
	if d.StagePassed > 0 {
		s.met.GetOrCreatePrometheusHistogramExt(`lehr_control_rollout_stage_seconds`, stageBuckets).Update(d.StagePassed.Seconds())
	}
	switch r := d.Rollout; {
	case d.End != nil:
		return s.end(ctx, rd, r, d.End, done)
	case r == nil:
		return nil
	default:
		if r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
			s.log.Info("rollout succeeded", "rollout", r.GetId())
		} else if len(d.Goals) > 0 {
			s.log.Info("rollout stage", "rollout", r.GetId(), "stage", r.GetStage())
		}
		if err := s.opts.Store.PutRollout(ctx, rd.g, store.RolloutStep{Rollout: r, Goals: d.Goals, HeadRev: rd.headRev, Events: d.Events, Done: done}); err != nil {
			return err
		}
		if r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
			// The version is kept: its evaluations that passed teach the
			// judge (docs/canary.md, "Learning from history").
			if _, err := s.opts.Evaluations.LearnVersion(ctx, rd.g, r.GetNamespace(), r.GetVersion()); err != nil {
				if errors.Is(err, store.ErrNotLeader) {
					return err
				}
				s.log.Warn("canary history: learning from a succeeded rollout failed", "rollout", r.GetId(), "err", err)
			}
		}
		rd.wrote(r)
		if len(d.Goals) > 0 {
			s.audit("MoveGoals", r, r.GetVersion(), d.Events, d.Goals)
		}
		if !rollout.Active(r) {
			s.ended(ctx, r)
		}
		return nil
	}
}

// ended tells Options.Ended that r ended.
func (s *Strategist) ended(ctx context.Context, r *lehrpb.Rollout) {
	if s.opts.Ended != nil {
		s.opts.Ended(ctx, r)
	}
}

// audit records an action of the strategist on r in the audit log: what
// its events say, and the zones whose goals it moved.
func (s *Strategist) audit(method string, r *lehrpb.Rollout, version uint64, evs []*lehrpb.RolloutEvent, goals []*lehrpb.GoalState) {
	if s.opts.Audit == nil {
		return
	}
	var msgs, zones []string
	for _, e := range evs {
		msgs = append(msgs, e.GetKind()+": "+e.GetMessage())
	}
	for _, g := range goals {
		zones = append(zones, g.GetZone())
	}
	msg := strings.Join(msgs, "; ")
	if len(zones) > 0 {
		msg += " (goals of " + strings.Join(zones, ", ") + ")"
	}
	d, _, _ := strings.Cut(r.GetNamespace(), "/")
	s.opts.Audit(&lehrpb.AuditRecord{Method: method, Author: rollout.Author, TransportIdentity: "rollout " + r.GetId(),
		Target: r.GetNamespace(), Domain: d, Version: version, Message: msg})
}

// end ends r as e says (FAILED, or ABORTED by the operator command done)
// and rolls every zone back: a new version with the base version's content
// becomes every zone's goal. A rollback that finds a newer publish (the
// latest intent) leaves the goals to that version's rollout (RolledBack).
func (s *Strategist) end(ctx context.Context, rd round, r *lehrpb.Rollout, e *rollout.Ending, done *store.QueuedCommand) error {
	st, ns, now := s.opts.Store, r.GetNamespace(), s.opts.Now()
	s.log.Warn("rollout ended; rolling back", "rollout", r.GetId(), "state", rollout.StateName(e.State), "reason", e.Reason)
	s.met.GetOrCreateCounter(fmt.Sprintf(`lehr_control_rollbacks_total{reason=%q}`, rollout.StateName(e.State))).Inc()
	evs := []*lehrpb.RolloutEvent{rollout.Ended(r, e, now)}
	_, snap, err := st.Content(ctx, ns, r.GetBaseVersion())
	if err != nil {
		return fmt.Errorf("read base version %d to roll back to: %w", r.GetBaseVersion(), err)
	}
	info, err := st.Commit(ctx, store.Commit{
		Namespace: ns, ExpectedLatest: r.GetVersion(), Content: snap,
		Info: &lehrpb.VersionInfo{Author: rollout.Author, Message: rollout.RollbackMessage(r.GetVersion(), e.Reason),
			Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: r.GetBaseVersion()},
		RequestID: "rollback:" + r.GetId(),
		Goals:     store.GoalsNone,
	})
	var current uint64
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ce):
		info, current = nil, ce.Current
	case err != nil:
		return fmt.Errorf("commit the rollback of %s: %w", r.GetId(), err)
	}
	headRev := rd.headRev
	if info != nil {
		// The rollback is the head now, unless a version was committed
		// right after it: the goals move only while it is.
		h, rev, err := st.Head(ctx, ns)
		if err != nil {
			return fmt.Errorf("read the head after the rollback of %s: %w", r.GetId(), err)
		}
		if headRev = rev; h.GetLatestVersion() != info.GetSeq() {
			info, current = nil, h.GetLatestVersion()
		}
	}
	d := rollout.RolledBack(r, e, evs, info, current, rd.zones, now)
	if err := st.PutRollout(ctx, rd.g, store.RolloutStep{Rollout: d.Rollout, Goals: d.Goals, HeadRev: headRev, Events: d.Events, Done: done}); err != nil {
		return err
	}
	rd.wrote(d.Rollout)
	if info != nil {
		s.met.GetOrCreateCounter(`lehr_control_publishes_total{kind="rollback"}`).Inc()
	}
	s.audit("Rollback", d.Rollout, d.Rollout.GetRollbackVersion(), d.Events, d.Goals)
	s.ended(ctx, d.Rollout)
	return nil
}

// command carries out an operator's command on r (Command) and returns r
// as it then stands.
func (s *Strategist) command(ctx context.Context, rd round, r *lehrpb.Rollout, qc store.QueuedCommand) (*lehrpb.Rollout, error) {
	d := rollout.Command(r, qc.Command, s.opts.Now())
	s.log.Info("rollout command", "rollout", r.GetId(), "action", qc.Command.GetAction(), "author", qc.Command.GetAuthor())
	return d.Rollout, s.apply(ctx, rd, d, &qc)
}
