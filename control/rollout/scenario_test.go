package rollout

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
)

var update = flag.Bool("update", false, "rewrite the golden event logs in testdata/scenarios")

// The rollout state machine driven through scenarios in memory: a world
// holds a namespace's goals, its rollouts and the time; each scenario
// starts, steps, commands and ends rollouts through the pure decisions
// (Start, Step, Admit, Command, Ended and RolledBack) as the strategist
// would, with the evidence its zones would report, and its event log is
// compared with a golden file (-update rewrites them).

type world struct {
	t     *testing.T
	start time.Time
	now   time.Time
	zones []string
	goals map[string]*lehrpb.GoalState // the namespace's goal per zone
	// rollouts by version; latest is the newest.
	rollouts map[uint64]*lehrpb.Rollout
	latest   uint64
	head     uint64 // the namespace's latest version
	policy   *lehrpb.RolloutPolicy
	analysis map[string]*lehrpb.CanaryEvaluation // by id
	// alerts is what the alerts source says; reads counts its reads.
	alerts Alerts
	reads  int
	writes int // decisions that stored the rollout
	log    strings.Builder
	// The namespaces the policy names in after: the content of each
	// one's latest version, and its goal in each zone.
	depLatest map[string]uint64
	depGoals  map[string]map[string]ZoneContent
}

// readAlerts is the world's alerts source, as the strategist reads it.
func (w *world) readAlerts() Alerts {
	w.reads++
	return w.alerts
}

const ns = "pay/limits"

func newWorld(t *testing.T, policy *lehrpb.RolloutPolicy, zones ...string) *world {
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	w := &world{t: t, start: start, now: start, zones: zones, goals: map[string]*lehrpb.GoalState{},
		rollouts: map[uint64]*lehrpb.Rollout{}, head: 1, policy: policy, analysis: map[string]*lehrpb.CanaryEvaluation{}}
	for _, z := range zones {
		w.goals[z] = &lehrpb.GoalState{Zone: z, Namespace: ns, Version: 1, Checksum: "sha256:v1"}
	}
	return w
}

func (w *world) advance(d time.Duration) { w.now = w.now.Add(d) }

func (w *world) note(format string, args ...any) {
	fmt.Fprintf(&w.log, "%8s  # "+format+"\n", append([]any{w.now.Sub(w.start)}, args...)...)
}

// apply records a decision's events and moves the world's goals; an
// ending is rolled back as the strategist does, against newer, the
// namespace's latest version when the rollback commits (a newer publish
// wins).
func (w *world) apply(d Decision) {
	w.t.Helper()
	if d.End != nil {
		evs := []*lehrpb.RolloutEvent{Ended(d.Rollout, d.End, w.now)}
		var info *lehrpb.VersionInfo
		if w.head == d.Rollout.GetVersion() {
			w.head++
			info = &lehrpb.VersionInfo{Namespace: ns, Seq: w.head, Checksum: fmt.Sprintf("sha256:v%d", w.head), Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK}
		}
		d = RolledBack(d.Rollout, d.End, evs, info, w.head, w.zones, w.now)
	}
	if d.Rollout == nil {
		return
	}
	r := d.Rollout
	w.writes++
	w.rollouts[r.GetVersion()] = r
	for _, e := range d.Events {
		fmt.Fprintf(&w.log, "%8s  %s@%d stage %d  %-11s %s\n", w.now.Sub(w.start), "v", r.GetVersion(), e.GetStage(), e.GetKind(), e.GetMessage())
	}
	for _, g := range d.Goals {
		w.goals[g.GetZone()] = g
		cand := ""
		if c := g.GetCandidate(); c != nil {
			cand = fmt.Sprintf(" candidate %d (hosts %v, per million %d)", c.GetVersion(), c.GetHosts(), c.GetPerMillion())
		}
		fmt.Fprintf(&w.log, "%8s      goal %s: %d%s\n", w.now.Sub(w.start), g.GetZone(), g.GetVersion(), cand)
	}
}

// publish commits the namespace's next version and starts its rollout.
func (w *world) publish() {
	w.t.Helper()
	w.head++
	w.note("publish version %d", w.head)
	sd, err := Start(StartInput{
		Head:  &lehrpb.Namespace{Name: ns, LatestVersion: w.head, LatestChecksum: fmt.Sprintf("sha256:v%d", w.head)},
		Prev:  w.rollouts[w.latest],
		Goals: w.goals, Zones: w.zones, Now: w.now,
		Latest: func() (*lehrpb.VersionInfo, error) {
			return &lehrpb.VersionInfo{Namespace: ns, Seq: w.head, Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}, nil
		},
		Policy: func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
			return w.policy, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, 1, nil
		},
		ExpectedChecks: func() ([]*lehrpb.CanaryCheck, error) { return nil, nil },
		Requires: func(after []string) ([]*lehrpb.RolloutRequirement, error) {
			var out []*lehrpb.RolloutRequirement
			for _, a := range after {
				if v := w.depLatest[a]; v > 0 {
					out = append(out, &lehrpb.RolloutRequirement{Namespace: a, Version: v})
				}
			}
			return out, nil
		},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, d := range []*Decision{sd.Finish, sd.Superseded, sd.Started} {
		if d != nil {
			w.apply(*d)
		}
	}
	if sd.Started != nil {
		w.latest = w.head
	}
}

// step steps the latest rollout with the evidence e.
func (w *world) step(e Evidence) {
	w.t.Helper()
	r := w.rollouts[w.latest]
	if !Active(r) {
		w.t.Fatalf("step at %v: the rollout of version %d is %v", w.now.Sub(w.start), w.latest, r.GetState())
	}
	in := StepInput{Rollout: r, Stages: Resolve(r.GetPolicy(), w.zones), Zones: w.zones, Evidence: e, Now: w.now,
		Analysis: w.analysis[r.GetEvaluationId()], Alerts: w.readAlerts,
		Goals:   func() (map[string]*lehrpb.GoalState, error) { return w.goals, nil },
		Reached: func() ([]Reached, error) { return w.reached(r), nil }}
	d, err := Step(in)
	if err != nil {
		w.t.Fatal(err)
	}
	if d.Analysis != nil {
		cev := d.Analysis
		cev.State = lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING
		w.analysis[cev.GetId()] = cev
		w.apply(d)
		in.Rollout, in.Analysis = d.Rollout, cev
		if d, err = Step(in); err != nil {
			w.t.Fatal(err)
		}
	}
	w.apply(d)
}

// reached is how far the namespaces r requires have gone.
func (w *world) reached(r *lehrpb.Rollout) []Reached {
	var out []Reached
	for _, req := range r.GetRequires() {
		out = append(out, Reached{Namespace: req.GetNamespace(), Zones: w.depGoals[req.GetNamespace()]})
	}
	return out
}

// admit runs Admit on the latest rollout, as the strategist's round does
// after its steps.
func (w *world) admit() {
	w.t.Helper()
	ds, err := Admit([]*lehrpb.Rollout{w.rollouts[w.latest]}, w.zones, w.now,
		func(string) (map[string]*lehrpb.GoalState, error) { return w.goals, nil },
		func(r *lehrpb.Rollout) ([]Reached, error) { return w.reached(r), nil }, w.readAlerts)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, d := range ds {
		w.apply(d)
	}
}

// depAt sets the goal of dependency ns in every zone: goal, holding
// content's content.
func (w *world) depAt(ns string, goal, content uint64) {
	w.note("%s: goal %d (content of %d) in every zone", ns, goal, content)
	zs := map[string]ZoneContent{}
	for _, z := range w.zones {
		zs[z] = ZoneContent{Goal: goal, Content: content}
	}
	if w.depGoals == nil {
		w.depGoals = map[string]map[string]ZoneContent{}
	}
	w.depGoals[ns] = zs
}

// judge sets the latest rollout's canary evaluation's result.
func (w *world) judge(v lehrpb.CanaryVerdict, done bool, reason string) {
	w.t.Helper()
	cev := w.analysis[w.rollouts[w.latest].GetEvaluationId()]
	if cev == nil {
		w.t.Fatalf("judge at %v: no canary evaluation started", w.now.Sub(w.start))
	}
	cev.Result = &lehrpb.CanaryResult{Verdict: v, Reason: reason, Look: 4, Looks: 4}
	if done {
		cev.State = lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE
	}
	w.note("canary analysis: %v%s (%s)", v, map[bool]string{true: ", done"}[done], reason)
}

func (w *world) command(a lehrpb.RolloutAction, who string) {
	w.t.Helper()
	w.note("%v by %s", a, who)
	w.apply(Command(w.rollouts[w.latest], &lehrpb.RolloutCommand{Action: a, Author: who}, w.now))
}

// state notes the latest rollout's state, reason and, when it waits for
// something timed, how long is left.
func (w *world) state() {
	r := w.rollouts[w.latest]
	left := WaitLeft(r, w.now)
	if left != "" {
		left = " [" + left + "]"
	}
	w.note("%v: %s%s", r.GetState(), r.GetReason(), left)
}

// check compares the log with testdata/scenarios/<name>.golden.
func (w *world) check(name string) {
	w.t.Helper()
	path := filepath.Join("testdata", "scenarios", name+".golden")
	got := w.log.String()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			w.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			w.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		w.t.Fatalf("%v (go test ./control/rollout -run %s -update writes it)", err, w.t.Name())
	}
	if d := cmp.Diff(string(want), got); d != "" {
		w.t.Errorf("event log of %s differs from %s (-want +got):\n%s", name, path, d)
	}
}

// Evidence builders: what the distributors of the zones the stage
// reaches report.

// zone is one zone's hosts as the evidence counts them.
type zoneHosts struct {
	zone             string
	applied, pending int
	pendingHosts     []string
	agents           int // hosts its distributors serve; 0: applied+pending
	distributors     int // 0: 1
	// silentSince, when set, makes the zone silent: it reported until
	// then (Zone.last_report_time) and has no live report now.
	silentSince time.Time
}

// Each zone's reports come from its distributor "d1" (witness.go): the
// decisions name it. A zone with hosts that applied also carries their
// canary signals.
func evidenceOf(zs ...zoneHosts) Evidence {
	e := Evidence{samples: map[string][]*lehrpb.CohortSample{}, zonesReporting: map[string]int{}, byZone: map[string]*zoneEvidence{},
		heldBy: witnesses{}, behindBy: witnesses{}, rejectedBy: witnesses{}, lapsedBy: witnesses{}, signalsBy: witnesses{}, reporters: witnesses{}}
	for _, z := range zs {
		if !z.silentSince.IsZero() {
			ze := &zoneEvidence{zone: z.zone, lastReport: z.silentSince}
			e.zones, e.byZone[z.zone] = append(e.zones, ze), ze
			e.zonesReporting[z.zone] = 0
			e.silent = append(e.silent, z.zone)
			continue
		}
		if z.distributors >= 0 {
			e.reporters.add(z.zone, "d1")
			if z.applied > 0 {
				e.heldBy.add(z.zone, "d1")
				e.signalsBy.add(z.zone, "d1")
			}
			if z.pending > 0 {
				e.behindBy.add(z.zone, "d1")
			}
		}
		ze := &zoneEvidence{zone: z.zone, distributors: max(1, z.distributors), agents: z.agents,
			applied: z.applied, pending: z.pending, pendingHosts: z.pendingHosts}
		if z.distributors < 0 {
			ze.distributors = 0
		}
		if ze.agents == 0 {
			ze.agents = z.applied + z.pending
		}
		e.zones, e.byZone[z.zone] = append(e.zones, ze), ze
		e.zonesReporting[z.zone] = ze.distributors
		e.applied += z.applied
		e.pending += z.pending
	}
	return e
}

// sampled adds the canary samples of zones (the zone's lowest cohort
// hosts), which a canary stage waits for before naming its hosts.
func (e Evidence) sampled(r *lehrpb.Rollout, zone string, hosts ...string) Evidence {
	e.unsampled = append(e.unsampled, zone)
	if len(hosts) > 0 {
		e.samples[zone] = append(e.samples[zone], &lehrpb.CohortSample{Namespace: ns, Salt: r.GetSalt(), Hosts: hosts})
	}
	return e
}

// withConsumers adds consumer counts; hosts ("zone/host") are those in
// trouble, reported by their zone's distributor d1.
func (e Evidence) withConsumers(n, rejected, lapsed uint32, hosts ...string) Evidence {
	e.consumers, e.rejected, e.lapsed = n, rejected, lapsed
	if rejected > 0 {
		e.rejectingHosts = hosts
	}
	if lapsed > 0 {
		e.lapsedHosts = hosts
	}
	for _, h := range hosts {
		z, _, _ := strings.Cut(h, "/")
		if rejected > 0 {
			e.rejectedBy.add(z, "d1")
		}
		if lapsed > 0 {
			e.lapsedBy.add(z, "d1")
		}
	}
	return e
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// canaryThenAll: one canary host per zone baking 10 minutes, then every
// zone, baking 5.
func canaryThenAll(analysis *lehrpb.CanaryAnalysis) *lehrpb.RolloutPolicy {
	if analysis == nil {
		analysis = &lehrpb.CanaryAnalysis{Disabled: true}
	}
	return &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}, Bake: dur(10 * time.Minute),
			ApplyDeadline: dur(5 * time.Minute), Analysis: analysis},
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: dur(5 * time.Minute)},
	}}
}

func TestScenarioHappyPath(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a", "b")
	w.publish()
	r := w.rollouts[w.latest]
	// The distributors sample their lowest cohort hosts; the stage names
	// one per zone.
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 3}, zoneHosts{zone: "b", agents: 3}).sampled(r, "a", "a-h2", "a-h1").sampled(r, "b", "b-h1"))
	w.advance(5 * time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", pending: 1, pendingHosts: []string{"a-h2"}, agents: 3}, zoneHosts{zone: "b", applied: 1, agents: 3}))
	w.state()
	w.advance(5 * time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 3}, zoneHosts{zone: "b", applied: 1, agents: 3}).withConsumers(4, 0, 0))
	w.advance(5 * time.Minute)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 3}, zoneHosts{zone: "b", applied: 1, agents: 3}).withConsumers(4, 0, 0))
	w.state()
	w.advance(5 * time.Minute)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 3}, zoneHosts{zone: "b", applied: 1, agents: 3}).withConsumers(4, 0, 0))
	w.advance(30 * time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 3}, zoneHosts{zone: "b", applied: 3}).withConsumers(12, 0, 0))
	w.advance(5 * time.Minute)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 3}, zoneHosts{zone: "b", applied: 3}).withConsumers(12, 0, 0))
	w.state()
	w.check("happy-path")
}

func TestScenarioEmptyZoneIsSkipped(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a", "empty")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	// No distributor reports for zone empty: the stage waits for it at
	// first, in case its distributors are starting…
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}, zoneHosts{zone: "empty", distributors: -1}).sampled(r, "a", "a-h1").sampled(r, "empty"))
	w.state()
	w.advance(EmptyZoneWait)
	// …then skips it.
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}, zoneHosts{zone: "empty", distributors: -1}).sampled(r, "empty"))
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, zoneHosts{zone: "empty", distributors: -1}))
	w.state()
	w.check("empty-zone")
}

func TestScenarioHealthGates(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   func(r *lehrpb.Rollout) Evidence
	}{
		{"lapsed-leases", func(*lehrpb.Rollout) Evidence {
			return evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(2, 0, 1, "a/a-h1")
		}},
		{"rejections", func(*lehrpb.Rollout) Evidence {
			return evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(2, 1, 0, "a/a-h1")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, canaryThenAll(nil), "a")
			w.publish()
			r := w.rollouts[w.latest]
			w.advance(time.Second)
			w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
			w.advance(10 * time.Second)
			w.step(c.ev(r))
			w.state()
			w.check(c.name)
		})
	}
}

func TestScenarioApplyDeadline(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a", "b")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}, zoneHosts{zone: "b", agents: 2}).sampled(r, "a", "a-h1").sampled(r, "b", "b-h1"))
	stuck := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, zoneHosts{zone: "b", pending: 1, pendingHosts: []string{"b-h1"}, agents: 2})
	w.advance(time.Minute)
	w.step(stuck)
	w.state()
	w.advance(5 * time.Minute)
	w.step(stuck)
	w.state()
	w.check("apply-deadline")
}

func TestScenarioNoVerdict(t *testing.T) {
	for _, on := range []string{evaluation.OnNoVerdictWait, evaluation.OnNoVerdictFail, evaluation.OnNoVerdictProceed} {
		t.Run(on, func(t *testing.T) {
			w := newWorld(t, canaryThenAll(&lehrpb.CanaryAnalysis{OnNoVerdict: on}), "a")
			w.publish()
			r := w.rollouts[w.latest]
			w.advance(time.Second)
			w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
			ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(1, 0, 0)
			w.advance(10 * time.Second)
			w.step(ok) // applied
			w.advance(time.Second)
			w.step(ok) // the analysis starts
			w.advance(10 * time.Minute)
			w.judge(lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, true, "2 canary hosts, 4 needed")
			w.step(ok)
			w.state()
			if on == evaluation.OnNoVerdictWait {
				w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE, "oncall")
				w.advance(time.Second)
				w.step(ok)
				w.state()
			}
			w.check("no-verdict-" + on)
		})
	}
}

func TestScenarioCanaryFails(t *testing.T) {
	w := newWorld(t, canaryThenAll(&lehrpb.CanaryAnalysis{}), "a")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
	ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(1, 0, 0)
	w.advance(10 * time.Second)
	w.step(ok)
	w.advance(time.Second)
	w.step(ok)
	w.advance(2 * time.Minute)
	w.judge(lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, false, "error ratio up")
	w.step(ok)
	w.state()
	w.check("canary-fails")
}

func TestScenarioFreezeHoldsTheNextStage(t *testing.T) {
	p := canaryThenAll(nil)
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	p.FreezeWindows = []*lehrpb.FreezeWindow{{Reason: "new year", Start: timestamppb.New(start.Add(5 * time.Minute)), End: timestamppb.New(start.Add(time.Hour))}}
	w := newWorld(t, p, "a")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
	ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(1, 0, 0)
	w.advance(time.Second)
	w.step(ok)
	w.advance(11 * time.Minute)
	w.step(ok) // baked; frozen
	w.advance(time.Minute)
	w.step(ok) // still frozen: nothing new
	w.advance(time.Hour)
	w.step(ok) // the window closed
	w.state()
	w.check("freeze")
}

func TestScenarioSupersede(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
	w.advance(time.Minute)
	w.publish() // the latest intent wins; its base is the superseded one's
	w.state()
	w.check("supersede")
}

func TestScenarioOperatorCommands(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
	ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(1, 0, 0)
	w.advance(time.Second)
	w.step(ok)
	w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, "alice")
	w.advance(20 * time.Minute)
	w.step(ok) // paused: the bake does not end it
	w.state()
	w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME, "alice")
	w.advance(time.Minute)
	w.step(ok) // the bake started over at resume
	w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE, "bob")
	w.step(ok)
	w.advance(time.Second)
	w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, "carol")
	w.state()
	w.command(lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, "dave") // over already
	w.check("operator-commands")
}

func TestScenarioRollbackRacesANewerPublish(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a")
	w.publish()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(r, "a", "a-h1"))
	w.advance(time.Second)
	w.head++ // a producer's publish lands before the rollback commits
	w.note("publish version %d (its rollout not started yet)", w.head)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(1, 1, 0, "a/a-h1"))
	w.state()
	w.check("rollback-races-publish")
}

func TestScenarioQueueUnderMaxConcurrent(t *testing.T) {
	// Two namespaces of one domain, at most one rollout in a stage.
	p := canaryThenAll(nil)
	p.MaxConcurrent = 1
	zones := []string{"a"}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	goals := map[string]*lehrpb.GoalState{"a": {Zone: "a", Version: 1}}
	mk := func(ns string, created time.Time) *lehrpb.Rollout {
		sd, err := Start(StartInput{Head: &lehrpb.Namespace{Name: ns, LatestVersion: 2}, Goals: goals, Zones: zones, Now: created,
			Policy: func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
				return p, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, 1, nil
			},
			ExpectedChecks: func() ([]*lehrpb.CanaryCheck, error) { return nil, nil }})
		if err != nil || sd.Started == nil || sd.Started.Rollout.GetStageStartTime() != nil {
			t.Fatalf("start %s: %+v, %v; want recorded, not entered (max_concurrent)", ns, sd, err)
		}
		return sd.Started.Rollout
	}
	first, second := mk("pay/a", now), mk("pay/b", now.Add(time.Second))
	goalsOf := func(string) (map[string]*lehrpb.GoalState, error) { return goals, nil }
	ds, err := Admit([]*lehrpb.Rollout{second, first}, zones, now.Add(2*time.Second), goalsOf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Rollout.GetId() != first.GetId() || ds[0].Rollout.GetStageStartTime() == nil ||
		ds[1].Rollout.GetId() != second.GetId() || ds[1].Rollout.GetStageStartTime() != nil || !strings.HasPrefix(ds[1].Rollout.GetReason(), "queued:") {
		t.Fatalf("admit: %v; want the older entered, the newer queued behind it", ds)
	}
	if ds[1].Events[0].GetKind() != "queued" {
		t.Errorf("the queued rollout's event: %v", ds[1].Events)
	}
	// The queue is recorded once: a second pass that finds it still
	// queued writes nothing.
	entered, queued := ds[0].Rollout, ds[1].Rollout
	again, err := Admit([]*lehrpb.Rollout{entered, queued}, zones, now.Add(3*time.Second), goalsOf, nil, nil)
	if err != nil || len(again) != 0 {
		t.Errorf("admit again while the first is in a stage: %v, %v; want nothing", again, err)
	}
	// When the first ends, the second enters.
	again, err = Admit([]*lehrpb.Rollout{queued}, zones, now.Add(time.Minute), goalsOf, nil, nil)
	if err != nil || len(again) != 1 || again[0].Rollout.GetStageStartTime() == nil || again[0].Events[0].GetKind() != "stage" {
		t.Errorf("admit once the first ended: %v, %v; want the second entered", again, err)
	}
}

// TestStepIsPure: Step changes neither its input rollout nor reads the
// goals unless its decision moves them.
func TestStepIsPure(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a")
	w.publish()
	r := w.rollouts[w.latest]
	before := fmt.Sprint(r)
	read := false
	d, err := Step(StepInput{Rollout: r, Stages: Resolve(r.GetPolicy(), w.zones), Zones: w.zones, Now: w.now.Add(time.Second),
		Evidence: evidenceOf(zoneHosts{zone: "a", pending: 1, agents: 2}),
		Goals:    func() (map[string]*lehrpb.GoalState, error) { read = true; return w.goals, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r) != before {
		t.Error("Step changed its input rollout")
	}
	if read || len(d.Goals) > 0 {
		t.Errorf("a waiting step read the goals (%v) or moved them (%v)", read, d.Goals)
	}
}

// A rollout that only waits — for its hosts to apply, for its bake to end,
// for the canary analysis's last look — is written once when the wait
// begins and not again while the evidence stays the same: the time left
// is derived from WaitUntil, not stored (issue 27: with thousands of
// rollouts baking, each was rewritten every second).
func TestAWaitingRolloutIsNotRewritten(t *testing.T) {
	pending := evidenceOf(zoneHosts{zone: "a", pending: 1, pendingHosts: []string{"a-h1"}, agents: 2})
	applied := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}).withConsumers(2, 0, 0)
	for _, tc := range []struct {
		name  string
		setup func(w *world) Evidence // steps into the wait; returns the evidence it waits with
		until time.Duration           // how long the wait lasts from the last setup step
	}{
		{"apply", func(w *world) Evidence { return pending }, 5 * time.Minute},
		{"bake", func(w *world) Evidence {
			w.step(applied)
			return applied
		}, 10 * time.Minute},
		{"last look", func(w *world) Evidence {
			w.step(applied) // applied
			w.step(applied) // the analysis starts
			w.judge(lehrpb.CanaryVerdict_CANARY_VERDICT_PASS, false, "looks 1-3 of 4 pass")
			w.advance(10 * time.Minute)
			w.step(applied) // baked; the last look is due
			return applied
		}, 5 * time.Minute}, // the grace: max(AnalysisGrace, bake/2)
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := canaryThenAll(nil)
			if tc.name == "last look" {
				policy = canaryThenAll(&lehrpb.CanaryAnalysis{})
			}
			w := newWorld(t, policy, "a")
			w.publish()
			w.advance(time.Second)
			w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}).sampled(w.rollouts[w.latest], "a", "a-h1"))
			ev := tc.setup(w)
			w.step(ev) // the wait begins (or is already written)
			r := w.rollouts[w.latest]
			if r.GetWaitUntil() == nil {
				t.Fatalf("waiting (%s) with no WaitUntil", r.GetReason())
			}
			if got, want := r.GetWaitUntil().AsTime().Sub(w.now), tc.until; got <= 0 || got > want {
				t.Errorf("WaitUntil is %v from now, want within %v", got, want)
			}
			for i := 1; i <= 30; i++ {
				now := w.now.Add(time.Duration(i) * time.Second)
				d, err := Step(StepInput{Rollout: r, Stages: Resolve(r.GetPolicy(), w.zones), Zones: w.zones, Evidence: ev, Now: now,
					Analysis: w.analysis[r.GetEvaluationId()],
					Goals:    func() (map[string]*lehrpb.GoalState, error) { return w.goals, nil }})
				if err != nil {
					t.Fatal(err)
				}
				if d.Rollout != nil || len(d.Events) > 0 || len(d.Goals) > 0 {
					t.Fatalf("%v into the wait (%s) the step rewrote the rollout: reason %q, %d event(s), %d goal(s)",
						now.Sub(w.now), r.GetReason(), d.Rollout.GetReason(), len(d.Events), len(d.Goals))
				}
				if left := WaitLeft(r, now); left == "" || left == "due now" {
					t.Fatalf("WaitLeft %v into the wait = %q", now.Sub(w.now), left)
				}
			}
		})
	}
}

// A zone whose distributors reported once and stopped (their replica of
// control died, their link is cut) is silent: the stage waits for it,
// explained, even past its apply deadline — absence of reports is never
// read as success (issue 29: a canary stage "passed" on 0 hosts and the
// rollout ended SUCCEEDED with no distributor reporting and a host still
// on the old version). When the zone reports again the stage goes on.
func TestScenarioSilentZone(t *testing.T) {
	w := newWorld(t, canaryThenAll(nil), "a", "b")
	w.publish()
	r := w.rollouts[w.latest]
	last := w.start.Add(-2 * time.Minute)
	silentB := zoneHosts{zone: "b", silentSince: last}
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}, silentB).sampled(r, "a", "a-h1").sampled(r, "b"))
	w.advance(5 * time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, silentB).sampled(r, "b"))
	w.state()
	w.advance(10 * time.Minute) // past the 5-minute apply deadline
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, silentB).sampled(r, "b"))
	w.state()
	// Zone b's distributor is back.
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, zoneHosts{zone: "b", agents: 2}).sampled(r, "b", "b-h1"))
	w.advance(5 * time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, zoneHosts{zone: "b", applied: 1, agents: 2}))
	w.state()
	// Baked; then zone a goes silent before the stage passes.
	w.advance(10 * time.Minute)
	w.step(evidenceOf(zoneHosts{zone: "a", silentSince: w.now.Add(-time.Minute)}, zoneHosts{zone: "b", applied: 1, agents: 2}))
	w.state()
	w.check("silent-zone")
}

// Silence never succeeds: with every zone silent the rollout waits, hour
// after hour; with on_no_verdict "fail" it fails at the apply deadline.
func TestScenarioSilenceNeverSucceeds(t *testing.T) {
	for _, tc := range []struct {
		onNoVerdict string
		want        lehrpb.RolloutState
	}{
		{"", lehrpb.RolloutState_ROLLOUT_STATE_RUNNING},
		{evaluation.OnNoVerdictProceed, lehrpb.RolloutState_ROLLOUT_STATE_RUNNING},
		{evaluation.OnNoVerdictWait, lehrpb.RolloutState_ROLLOUT_STATE_RUNNING},
		{evaluation.OnNoVerdictFail, lehrpb.RolloutState_ROLLOUT_STATE_FAILED},
	} {
		t.Run("on_no_verdict="+tc.onNoVerdict, func(t *testing.T) {
			w := newWorld(t, canaryThenAll(&lehrpb.CanaryAnalysis{OnNoVerdict: tc.onNoVerdict}), "a")
			w.publish()
			r := w.rollouts[w.latest]
			silent := zoneHosts{zone: "a", silentSince: w.start.Add(-time.Minute)}
			for range 6 * 60 {
				w.advance(30 * time.Second)
				if !Active(w.rollouts[r.GetVersion()]) {
					break
				}
				w.step(evidenceOf(silent).sampled(r, "a"))
			}
			got := w.rollouts[r.GetVersion()]
			if got.GetState() != tc.want {
				t.Fatalf("after 3 h of silence: %v (%s); want %v", got.GetState(), got.GetReason(), tc.want)
			}
			if got.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING && (got.GetStageAppliedTime() != nil || got.GetStage() != 0) {
				t.Errorf("after 3 h of silence the rollout is at stage %d, applied at %v: it passed on silence", got.GetStage(), got.GetStageAppliedTime())
			}
			if !strings.Contains(got.GetReason(), "no live report from a") {
				t.Errorf("reason %q does not name the silent zone", got.GetReason())
			}
		})
	}
}

// Dependency order: a rollout of a namespace whose policy names another in
// after enters each stage only once that namespace's goal holds the
// content it had at the publish, in every zone the stage moves; a
// rollback of it holds the next stage until it rolls forward.
func TestScenarioAfter(t *testing.T) {
	p := canaryThenAll(nil)
	p.After = []string{"pay/flags"}
	w := newWorld(t, p, "a", "b")
	w.depLatest = map[string]uint64{"pay/flags": 6}
	w.depAt("pay/flags", 5, 5)
	w.publish()
	w.state()
	w.advance(time.Second)
	w.admit()
	w.state()
	w.advance(time.Second)
	w.admit() // still waiting: nothing new
	w.depAt("pay/flags", 6, 6)
	w.advance(time.Second)
	w.admit()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 3}, zoneHosts{zone: "b", agents: 3}).sampled(r, "a", "a-h1").sampled(r, "b", "b-h1"))
	ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 3}, zoneHosts{zone: "b", applied: 1, agents: 3}).withConsumers(2, 0, 0)
	w.advance(5 * time.Second)
	w.step(ok)
	// pay/flags fails somewhere and rolls back: version 7 republishes 5.
	w.depAt("pay/flags", 7, 5)
	w.advance(10 * time.Minute)
	w.step(ok) // baked: the next stage waits
	w.state()
	w.advance(time.Minute)
	w.step(ok) // nothing new
	w.depAt("pay/flags", 8, 8)
	w.advance(time.Minute)
	w.step(ok)
	w.advance(30 * time.Second)
	all := evidenceOf(zoneHosts{zone: "a", applied: 3}, zoneHosts{zone: "b", applied: 3}).withConsumers(6, 0, 0)
	w.step(all)
	w.advance(5 * time.Minute)
	w.step(all)
	w.state()
	w.check("after")
}
