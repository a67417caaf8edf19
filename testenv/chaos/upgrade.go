package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/proto/lehrpb"
)

// UpgradeConfig is one rolling upgrade (RunUpgrade).
type UpgradeConfig struct {
	// Old and New are the lehr binaries upgraded from and to (BuildCommit,
	// Build). Required.
	Old, New string
	// From and To name them in the report: a commit, "this tree".
	From, To string
	// Dir holds the run's processes; keep it short (unix sockets).
	Dir      string
	Topology Topology
	// Namespaces, OpsPerNamespace, BigValue, Think and Seed shape the
	// workload that runs throughout (see Workload); it keeps writing past
	// OpsPerNamespace until the last replacement is done.
	Namespaces, OpsPerNamespace, BigValue int
	Think                                 time.Duration
	Seed                                  uint64
	// Dwell is how long the cluster runs, writing, after each step
	// before the next: every mix of old and new the upgrade passes
	// through serves the workload for that long, as an operator watches
	// one replacement before the next.
	Dwell time.Duration
	// Rollback, once everything runs New, replaces every process by Old
	// again in the reverse order: agents, distributors, control.
	Rollback bool
	// Grace bounds each graceful stop (SIGTERM until exit); 0 means 30 s.
	// A daemon still running then is killed, and that is a violation.
	Grace time.Duration
	// ConvergeBound bounds each wait for an update to reach every agent,
	// and the final convergence.
	ConvergeBound time.Duration
	Logger        *slog.Logger
}

// UpgradeStep is one process replaced.
type UpgradeStep struct {
	// Phase is "upgrade" or "rollback"; Proc names the process, Build the
	// build it runs after the step.
	Phase, Proc, Build string
	// Down is from SIGTERM to the new process's READY=1. Applied is from
	// SIGTERM to every agent holding an update published once the new
	// process was ready.
	Down, Applied time.Duration
	// Ops counts the workload's ops answered from the step's SIGTERM to
	// the end of its dwell (the next step's SIGTERM): the writes this mix
	// of builds served.
	Ops int
}

// UpgradeReport is what a rolling upgrade found: the workload's and
// consumers' figures and violations in Report (Lost, Torn...), and each
// step's.
type UpgradeReport struct {
	Report
	From, To string
	// FromBuild and ToBuild are the builds the binaries announce
	// (buildinfo.Unknown for one that announces none).
	FromBuild, ToBuild string
	Steps              []UpgradeStep
	// Builds records what control's zone status (lehr zones status) said
	// of each zone's builds at the end of each phase.
	Builds []string
}

// Phases of an upgrade.
const (
	phaseUpgrade  = "upgrade"
	phaseRollback = "rollback"
)

// RunUpgrade starts the cluster on cfg.Old with consumers on every agent
// and producers writing, then replaces its processes one at a time by
// cfg.New in the order docs/operations.md ("Upgrades") gives — control,
// then each zone's distributors, then the agents — each stopped with
// SIGTERM and started from the new binary on the same data and command
// line, as a package upgrade restarts a systemd unit. After each, it
// publishes an update and waits until every agent holds it. Once every
// process runs New it checks that control's zone status counts every
// distributor and agent under New's build; with cfg.Rollback it then
// replaces them by Old again in the reverse order. While it runs, the
// workload keeps publishing. At the end every agent must hold every
// namespace's latest version and the invariants hold (Verify): no
// acknowledged publish lost, no torn view, no version going backwards.
func RunUpgrade(ctx context.Context, cfg UpgradeConfig) (*UpgradeReport, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	start := time.Now()
	rep := &UpgradeReport{Report: Report{Topology: cfg.Topology, Seed: cfg.Seed, Events: map[string]int{}}, From: cfg.From, To: cfg.To}
	rep.FromBuild, rep.ToBuild = buildOf(ctx, cfg.Old), buildOf(ctx, cfg.New)
	run, stop := context.WithCancel(ctx)
	defer stop()
	// Every publish moves every zone at once: an update reaches every
	// agent through whatever runs, not a rollout's stages.
	cl, namespaces, obs, err := startObserved(ctx, run, ClusterOptions{Binary: cfg.Old, Dir: cfg.Dir, Topology: cfg.Topology, Logger: log},
		cfg.Namespaces)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	defer obs.Close()

	stepsDone := make(chan struct{})
	w := &Workload{Producer: cl.Producer(), Namespaces: namespaces, OpsPerNamespace: cfg.OpsPerNamespace,
		Seed: cfg.Seed, BigValue: cfg.BigValue, Think: cfg.Think, Until: stepsDone}
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
	u := &upgrader{cl: cl, w: w, rep: rep, log: log, ns: namespaces[0], grace: grace, bound: cfg.ConvergeBound}
	uerr := u.run(sctx, cfg)
	close(stepsDone)
	if uerr != nil {
		wcancel(uerr)
	}
	wg.Wait()
	switch {
	case werr != nil:
		return rep, fmt.Errorf("workload: %w", werr)
	case uerr != nil:
		return rep, fmt.Errorf("upgrade: %w", uerr)
	}
	if err := Verify(ctx, &rep.Report, cl, w, obs, namespaces, cfg.ConvergeBound); err != nil {
		return rep, err
	}
	for _, f := range cl.Failures() {
		rep.violate("%s", f)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// upgrader carries out the steps of RunUpgrade.
type upgrader struct {
	cl    *Cluster
	w     *Workload
	rep   *UpgradeReport
	log   *slog.Logger
	ns    string // the namespace each step's update goes to
	grace time.Duration
	bound time.Duration
}

func (u *upgrader) run(ctx context.Context, cfg UpgradeConfig) error {
	// Every namespace published, and held by every agent, before the
	// first replacement.
	if err := poll(ctx, u.bound, func() error {
		if n := u.w.Answered(); n < 2*len(u.w.Namespaces) {
			return fmt.Errorf("%d ops answered", n)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("workload start: %w", err)
	}
	// At least what was published by now: the workload goes on writing,
	// so the agents may hold newer versions by the time they are asked.
	goals, err := latest(ctx, u.cl.Producer(), u.w.Namespaces)
	if err != nil {
		return err
	}
	if err := poll(ctx, u.bound, func() error {
		for _, a := range u.cl.Agents {
			st, err := a.Status(ctx)
			if err != nil {
				return fmt.Errorf("agent %s: %w", a.HostID, err)
			}
			for ns, g := range goals {
				if v := nsVersion(st, ns); v < g.seq {
					return fmt.Errorf("agent %s holds %s@%d, want %d or later", a.HostID, ns, v, g.seq)
				}
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("before the upgrade: %w", err)
	}

	var dists []*Proc
	for _, z := range u.cl.Zones() {
		for _, d := range u.cl.Distributors[z] {
			dists = append(dists, d.Proc)
		}
	}
	var agents []*Proc
	for _, a := range u.cl.Agents {
		agents = append(agents, a.Proc)
	}
	order := append(append([]*Proc{u.cl.Control}, dists...), agents...)
	for _, p := range order {
		if err := u.replace(ctx, phaseUpgrade, p, cfg.New, u.rep.ToBuild, cfg.Dwell); err != nil {
			return err
		}
	}
	u.checkBuilds(ctx, phaseUpgrade, u.rep.ToBuild, u.rep.ToBuild)
	if !cfg.Rollback {
		return nil
	}
	slices.Reverse(order)
	for i, p := range order {
		if err := u.replace(ctx, phaseRollback, p, cfg.Old, u.rep.FromBuild, cfg.Dwell); err != nil {
			return err
		}
		if i == len(agents)-1 {
			// Agents back on the old build under the new distributors
			// and control: what the skew policy allows.
			u.checkBuilds(ctx, phaseRollback+" of the agents", u.rep.ToBuild, u.rep.FromBuild)
		}
	}
	return nil
}

// replace stops p with SIGTERM, starts it from bin, publishes an update,
// waits until every agent holds it, then lets the workload run for dwell.
func (u *upgrader) replace(ctx context.Context, phase string, p *Proc, bin, build string, dwell time.Duration) error {
	u.log.Info("chaos: replacing", "phase", phase, "proc", p.Name, "bin", bin)
	t0, ops0 := time.Now(), u.w.Answered()
	running, err := p.Stop(u.grace)
	if err != nil {
		u.rep.violate("%s of %s: %v", phase, p.Name, err)
	}
	if !running {
		return fmt.Errorf("%s of %s: not running", phase, p.Name)
	}
	p.SetBinary(bin)
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("%s of %s: %w", phase, p.Name, err)
	}
	down := time.Since(t0)
	seq, err := u.probe(ctx, len(u.rep.Steps))
	if err != nil {
		return fmt.Errorf("%s of %s: update: %w", phase, p.Name, err)
	}
	if err := poll(ctx, u.bound, func() error {
		for _, a := range u.cl.Agents {
			st, err := a.Status(ctx)
			if err != nil {
				return fmt.Errorf("agent %s: %w", a.HostID, err)
			}
			if v := nsVersion(st, u.ns); v < seq {
				return fmt.Errorf("agent %s holds %s@%d, want %d", a.HostID, u.ns, v, seq)
			}
		}
		return nil
	}); err != nil {
		u.rep.violate("%s of %s: the next update did not reach every agent: %v", phase, p.Name, err)
	}
	applied := time.Since(t0)
	if err := sleepCtx(ctx, dwell); err != nil {
		return err
	}
	u.rep.Steps = append(u.rep.Steps, UpgradeStep{Phase: phase, Proc: p.Name, Build: build, Down: down, Applied: applied, Ops: u.w.Answered() - ops0})
	u.rep.Events[phase+" "+strings.Fields(p.Name)[0]]++
	return nil
}

// probe patches the step's namespace through the workload's ledger (so
// Verify checks it as any op) and returns the version acknowledged; a
// patch refused because a worker moved the namespace on is tried again.
func (u *upgrader) probe(ctx context.Context, step int) (uint64, error) {
	for try := 0; ; try++ {
		op := &Op{ID: fmt.Sprintf("u%d-%d", step, try), Namespace: u.ns}
		u.w.Ledger.add(op)
		info, err := u.w.do(ctx, op, func(ctx context.Context) (*lehrpb.VersionInfo, error) {
			base, err := u.w.latest(ctx, u.ns)
			if err != nil {
				return nil, err
			}
			return u.w.Producer.Patch(ctx, u.ns, base, producer.Patch{Set: []producer.Property{{Key: "op", Value: []byte(op.ID)}}},
				producer.WithRequestID(op.ID), producer.WithMessage(op.ID))
		})
		if err != nil {
			return 0, err
		}
		if info != nil {
			return info.GetSeq(), nil
		}
	}
}

// checkBuilds waits until control's status of every zone counts every
// distributor under dist and every agent under agent, as lehr zones
// status shows them, and records what it said; a count that does not
// come to that is a violation.
func (u *upgrader) checkBuilds(ctx context.Context, phase, dist, agent string) {
	for _, z := range u.cl.Zones() {
		wantD := map[string]int32{dist: int32(len(u.cl.Distributors[z]))}
		var wantA int32
		for _, a := range u.cl.Agents {
			if a.Zone == z {
				wantA++
			}
		}
		want := map[string]int32{agent: wantA}
		var gotD, gotA map[string]int32
		err := poll(ctx, u.bound, func() error {
			st, err := u.cl.Producer().RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
			if err != nil {
				return err
			}
			gotD, gotA = counts(st.GetDistributorBuilds()), counts(st.GetAgentBuilds())
			if !maps.Equal(gotD, wantD) || !maps.Equal(gotA, want) {
				return fmt.Errorf("distributors %v, agents %v; want %v, %v", gotD, gotA, wantD, want)
			}
			return nil
		})
		u.rep.Builds = append(u.rep.Builds, fmt.Sprintf("after the %s, zone %s: distributors %s, agents %s", phase, z, fmtCounts(gotD), fmtCounts(gotA)))
		if err != nil {
			u.rep.violate("after the %s, zone %s's builds: %v", phase, z, err)
		}
	}
}

func counts(bs []*lehrpb.BuildCount) map[string]int32 {
	m := map[string]int32{}
	for _, b := range bs {
		m[b.GetBuild()] += b.GetCount()
	}
	return m
}

func fmtCounts(m map[string]int32) string {
	if len(m) == 0 {
		return "none reported"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// buildOf returns the build bin announces, as "lehr version -o json"
// says; buildinfo.Unknown for a binary without that command (older than
// builds being announced: its agents and distributors announce none).
func buildOf(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "version", "-o", "json").Output()
	if err != nil {
		return buildinfo.Unknown
	}
	var v struct {
		Build string `json:"build"`
	}
	if json.Unmarshal(out, &v) != nil || v.Build == "" {
		return buildinfo.Unknown
	}
	return v.Build
}

// UpgradeMarkdown renders upgrade reports: a summary row per run, then
// each run's steps, the builds control counted, and the violations.
func UpgradeMarkdown(reps []*UpgradeReport) string {
	var b strings.Builder
	b.WriteString("| topology | from → to | ops (publishes / refused / retried) | acknowledged | lost | torn | replacements | replace → next update on every agent p50 / max | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range reps {
		var ds []time.Duration
		for _, s := range r.Steps {
			ds = append(ds, s.Applied)
		}
		p50, maxd := durations(ds)
		fmt.Fprintf(&b, "| %s | %s (%s) → %s (%s) | %d (%d / %d / %d) | %d | %d | %d | %d | %s / %s | %d |\n",
			r.Topology, r.From, r.FromBuild, r.To, r.ToBuild, r.Ops, r.Publishes, r.Refused, r.Retried,
			r.Acked, r.Lost, r.Torn, len(r.Steps), round(p50), round(maxd), len(r.Violations))
	}
	for _, r := range reps {
		fmt.Fprintf(&b, "\n%s, %s → %s, in %s:\n\n", r.Topology, r.From, r.To, round(r.Duration))
		b.WriteString("| step | phase | process | now runs | SIGTERM → ready | SIGTERM → next update on every agent | ops answered until the next step |\n|---|---|---|---|---|---|---|\n")
		for i, s := range r.Steps {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %d |\n", i+1, s.Phase, s.Proc, s.Build, round(s.Down), round(s.Applied), s.Ops)
		}
		for _, s := range r.Builds {
			fmt.Fprintf(&b, "\n- builds %s", s)
		}
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "\n- violation (%s): %s", r.Topology, v)
		}
		b.WriteString("\n")
	}
	return b.String()
}
