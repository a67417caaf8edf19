package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Profile names a set of sizes: how many repetitions, operations, agents.
type Profile string

// The profiles.
const (
	// Smoke runs every scenario at minimal sizes, in seconds: the
	// package's own test uses it so the harness cannot rot.
	Smoke Profile = "smoke"
	// Quick is "make bench": every scenario, under 5 minutes on 2 cores.
	Quick Profile = "quick"
	// Full is "make bench-full": the large sizes (10,000 agents).
	Full Profile = "full"
)

// ParseProfile returns the profile named s.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case Smoke, Quick, Full:
		return p, nil
	}
	return "", fmt.Errorf("bench: unknown profile %q: want smoke, quick or full", s)
}

// pick returns the value for profile p.
func pick[T any](p Profile, smoke, quick, full T) T {
	switch p {
	case Smoke:
		return smoke
	case Full:
		return full
	}
	return quick
}

// Env is what a scenario runs with.
type Env struct {
	// Profile selects the sizes.
	Profile Profile
	// Dir is a scratch directory of the scenario's own, on the same file
	// system as the run's work directory; removed afterwards.
	Dir string
	// OutDir, if not empty, receives artefacts worth keeping (profile
	// summaries), named after the scenario.
	OutDir string
	// Log receives progress and the components' warnings.
	Log *slog.Logger
	// Self is the path of an executable that runs a real Lehr agent
	// when started with the arguments "agent" followed by the agent's
	// flags (the lehr binary). Empty: scenarios that need a separate agent
	// process build cmd/lehr-agent into Dir.
	AgentBinary string
	// StormAgents, if positive, replaces the profile's agent counts of the
	// storm scenario with this one N.
	StormAgents int
	// FanoutAgents, if positive, replaces the profile's agent counts of
	// the fanout scenario with this one N (profiled as its busiest case).
	FanoutAgents int
	// FanoutSystems, if not empty, are the only systems the fanout
	// scenario runs ("lehr", "etcd", "nats"): Lehr alone measures a change
	// to Lehr without the peers' minutes (and their failures on a loaded
	// machine).
	FanoutSystems []string
	// CatalogAgentsOnly makes the catalog scenario load its catalog and
	// measure only the distributor with its agents (issue 27's row),
	// skipping the idle, publish, history and refusal rows.
	CatalogAgentsOnly bool
	// AgentSilenceTimeout, if positive, is the simulated agents' silence
	// timeout (agenttest.Options.SilenceTimeout; their keepalives go every
	// third of it) instead of the agent's default.
	AgentSilenceTimeout time.Duration
	// FairRaceSystems, if not empty, are the systems the fairrace scenario
	// runs, of "lehr", "etcd" and "nats" (a lever's before and after need
	// only Lehr's); empty runs all three.
	FairRaceSystems []string
}

// Scenario is one benchmark.
type Scenario struct {
	// Name is short and unique, e.g. "publish"; the -scenario filter
	// matches it.
	Name string
	// Title says in a line what it measures.
	Title string
	// Run measures and returns the result. It honours ctx and leaves no
	// goroutine or process behind.
	Run func(ctx context.Context, e *Env) (*Result, error)
}

// Scenarios returns every scenario in run order.
func Scenarios() []Scenario {
	return []Scenario{
		publishScenario(),
		e2eScenario(),
		wireBytesScenario(),
		fanoutScenario(),
		fairRaceScenario(),
		stormScenario(),
		footprintScenario(),
		bighostScenario(),
		rolloutScenario(),
		canaryScenario(),
		isolationScenario(),
		strategistScenario(),
		catalogScenario(),
		consoleScenario(),
	}
}

// Options configures RunScenarios.
type Options struct {
	// Profile selects the sizes; default Quick.
	Profile Profile
	// Filter selects scenarios by name; nil runs every one.
	Filter *regexp.Regexp
	// WorkDir is where scratch directories are made; default os.TempDir().
	// Durable figures depend on its file system.
	WorkDir string
	// OutDir receives artefacts (profile summaries); empty keeps none.
	OutDir string
	// AgentBinary: see Env.AgentBinary.
	AgentBinary string
	// StormAgents: see Env.StormAgents.
	StormAgents int
	// FanoutAgents: see Env.FanoutAgents.
	FanoutAgents int
	// FanoutSystems: see Env.FanoutSystems.
	FanoutSystems []string
	// CatalogAgentsOnly: see Env.CatalogAgentsOnly.
	CatalogAgentsOnly bool
	// AgentSilenceTimeout: see Env.AgentSilenceTimeout.
	AgentSilenceTimeout time.Duration
	// FairRaceSystems: see Env.FairRaceSystems.
	FairRaceSystems []string
	// Logger; default a logger that writes warnings to stderr.
	Logger *slog.Logger
	// Progress, if not nil, receives each scenario's table as soon as it
	// has finished.
	Progress io.Writer
	// Command is recorded in the Run; default os.Args joined by spaces.
	Command string
	// PeerPlaintext runs the etcd and NATS peers without TLS. The zero
	// value runs them with TLS 1.3 and verified client certificates, as
	// Lehr's QUIC always is, so encryption costs the same on both sides.
	PeerPlaintext bool
}

// RunScenarios runs the selected scenarios one after another and returns
// the run. A failing scenario is recorded in its Result.Error and the run
// goes on; the error returned is for a run that could not start or was
// cancelled, or when the filter selects nothing.
func RunScenarios(ctx context.Context, opts Options) (*Run, error) {
	if opts.Profile == "" {
		opts.Profile = Quick
	}
	if opts.WorkDir == "" {
		opts.WorkDir = os.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if opts.Command == "" {
		opts.Command = strings.Join(os.Args, " ")
	}
	var sel []Scenario
	for _, s := range Scenarios() {
		if opts.Filter == nil || opts.Filter.MatchString(s.Name) {
			sel = append(sel, s)
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("bench: no scenario matches %v", opts.Filter)
	}
	root, err := os.MkdirTemp(opts.WorkDir, "lehr-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: create work directory: %w", err)
	}
	defer os.RemoveAll(root)
	run := &Run{
		Started: time.Now(),
		Command: opts.Command,
		Profile: string(opts.Profile),
		Machine: DescribeMachine(root),
		// PeerTransport records the run's peer security; each row carries
		// its own too (Row.Transport).
		PeerTransport: peerTransport(!opts.PeerPlaintext),
	}
	ctx = withPeerTLS(ctx, !opts.PeerPlaintext)
	for _, s := range sel {
		if err := ctx.Err(); err != nil {
			return run, fmt.Errorf("bench: cancelled before %s: %w", s.Name, err)
		}
		dir := filepath.Join(root, s.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return run, fmt.Errorf("bench: create %s: %w", dir, err)
		}
		env := &Env{
			Profile:             opts.Profile,
			Dir:                 dir,
			OutDir:              opts.OutDir,
			Log:                 opts.Logger.With("scenario", s.Name),
			AgentBinary:         opts.AgentBinary,
			StormAgents:         opts.StormAgents,
			FanoutAgents:        opts.FanoutAgents,
			FanoutSystems:       opts.FanoutSystems,
			CatalogAgentsOnly:   opts.CatalogAgentsOnly,
			AgentSilenceTimeout: opts.AgentSilenceTimeout,
			FairRaceSystems:     opts.FairRaceSystems,
		}
		start := time.Now()
		res, err := s.Run(ctx, env)
		if res == nil {
			res = &Result{Title: s.Title}
		}
		res.Scenario = s.Name
		if res.Title == "" {
			res.Title = s.Title
		}
		res.Elapsed = time.Since(start)
		labelTransports(res, run.PeerTransport)
		if err != nil {
			res.Error = err.Error()
		}
		run.Results = append(run.Results, *res)
		if opts.Progress != nil {
			PrintResult(opts.Progress, *res)
			fmt.Fprintln(opts.Progress)
		}
		os.RemoveAll(dir)
		if err != nil && errors.Is(err, context.Canceled) {
			break
		}
	}
	run.Finished = time.Now()
	return run, nil
}

// labelTransports sets Row.Transport, where a scenario left it empty, on
// the rows of a result that compares Lehr with peers: etcd and NATS rows
// get peer (every peer of the run was started with it), Lehr's rows
// TransportLehr, and ratio rows ("lehr/etcd") both, as "a vs b". Results
// without peer rows are left alone: their Lehr rows use other paths
// (control's gRPC, the agent's local socket).
func labelTransports(res *Result, peer string) {
	isPeer := func(sys string) bool { return sys == "etcd" || sys == "nats" }
	has := false
	for _, r := range res.Rows {
		has = has || isPeer(r.System)
	}
	if !has {
		return
	}
	of := func(sys string) string {
		switch {
		case isPeer(sys):
			return peer
		case strings.HasPrefix(sys, "lehr"):
			return TransportLehr
		}
		return ""
	}
	for i := range res.Rows {
		r := &res.Rows[i]
		if r.Transport != "" {
			continue
		}
		if a, b, ok := strings.Cut(r.System, "/"); ok {
			if ta, tb := of(a), of(b); ta != "" && tb != "" {
				r.Transport = ta + " vs " + tb
			}
			continue
		}
		r.Transport = of(r.System)
	}
}
