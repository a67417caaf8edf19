// Command lehr-bench runs Lehr's benchmark scenarios (package bench) and
// prints a table per scenario on stdout and writes the run as JSON under
// -out, with a latency CDF plot (SVG) per latency scenario and case next to
// it, and "<run>-changes.md": the run compared with the previous run of the
// same profile in -out (also printed). "make bench" runs it with -quick, "make bench-full" with -full,
// both through scripts/bench.sh, which also raises the socket buffer and
// file descriptor limits for the run.
//
// Usage:
//
//	lehr-bench [-quick|-full] [-scenario REGEXP] [-storm-agents N] [-out DIR] [-workdir DIR] [-cpuprofile FILE]
//	lehr-bench -targets [-out DIR]
//	lehr-bench -version
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"strings"
	"syscall"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/bench"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/wire"
)

func main() {
	if os.Getenv(bench.SwarmEnv) == "1" {
		bench.SwarmMain()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lehr-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	quick := flag.Bool("quick", false, "quick sizes (the default): every scenario in under 5 minutes on 2 cores")
	full := flag.Bool("full", false, "full sizes: 10,000 agents, more repetitions")
	smoke := flag.Bool("smoke", false, "minimal sizes, seconds per scenario (what the package test runs)")
	filter := flag.String("scenario", "", "run only scenarios whose name matches this regular expression (see -list)")
	list := flag.Bool("list", false, "list the scenarios and exit")
	targets := flag.Bool("targets", false, "print every target the scenarios check with the figure of the newest quick or full run in -out that checked it, as a Markdown table (bench/RESULTS.md's first screen), and exit")
	out := flag.String("out", "bench/results", "directory for the run's JSON file and profile summaries; empty writes none")
	workdir := flag.String("workdir", "", "directory for scratch data (etcd, Badger, files); its file system sets fsync cost; default the system temp dir")
	agentBin := flag.String("agent-binary", "", "lehr-agent binary for the agent-process scenarios; default: build cmd/lehr-agent")
	stormAgents := flag.Int("storm-agents", 0, "run the storm scenario at this one number of agents instead of the profile's")
	fanoutAgents := flag.Int("fanout-agents", 0, "run the fanout scenario at this one number of agents instead of the profile's (profiled as its busiest case)")
	fanoutSystems := flag.String("fanout-systems", "", "fanout scenario: run only these systems, a comma-separated list of lehr, etcd and nats (e.g. lehr, to measure a change to Lehr); empty runs all three")
	catalogAgents := flag.Bool("catalog-agents-only", false, "catalog scenario: load the catalog, then measure only the distributor with its simulated agents (skips the idle, publish, history and refusal rows)")
	silence := flag.Duration("agent-silence-timeout", 0, "the simulated agents' silence timeout (fanout, storm): they send a keepalive every third of it and give up on a distributor silent for it; 0 keeps the agent's default (lehr agent --silence-timeout)")
	fairSystems := flag.String("fairrace-systems", "", "fairrace scenario: run only these systems, a comma-separated list of lehr, etcd and nats (e.g. lehr, to measure a change to Lehr); empty runs all three")
	verbose := flag.Bool("v", false, "log the components' info messages to stderr")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file, and one of each swarm child (the simulated agents) to FILE.swarm-PID; read them with go tool pprof (not with the fanout scenario, which profiles its busiest case itself)")
	version := flag.Bool("version", false, "print lehr-bench's build (release version, commit, Go version) and exit")
	peerTLS := flag.Bool("peer-tls", true, "run the etcd and NATS peers with TLS 1.3 and verified client certificates, as Lehr's QUIC always is; false runs them plaintext (recorded per row)")
	flag.Parse()

	if *version {
		return buildinfo.Get().WriteText(os.Stdout, "lehr-bench")
	}
	if *targets {
		ts, err := bench.CurrentTargets(*out)
		if err != nil {
			return err
		}
		return bench.WriteTargetTable(os.Stdout, ts)
	}
	if *list {
		for _, s := range bench.Scenarios() {
			fmt.Printf("%-12s %s\n", s.Name, s.Title)
		}
		return nil
	}
	n := 0
	profile := bench.Quick
	for _, f := range []struct {
		set bool
		p   bench.Profile
	}{{*quick, bench.Quick}, {*full, bench.Full}, {*smoke, bench.Smoke}} {
		if f.set {
			n++
			profile = f.p
		}
	}
	if n > 1 {
		return fmt.Errorf("-quick, -full and -smoke are exclusive")
	}
	if *silence != 0 && (*silence < agent.MinSilenceTimeout || *silence > agent.MaxSilenceTimeout) {
		return fmt.Errorf("-agent-silence-timeout %v: want %v to %v, as the agent's --silence-timeout (0 keeps its default, %v)", *silence, agent.MinSilenceTimeout, agent.MaxSilenceTimeout, wire.DefaultSilenceTimeout)
	}
	var re *regexp.Regexp
	if *filter != "" {
		var err error
		if re, err = regexp.Compile(*filter); err != nil {
			return fmt.Errorf("-scenario %q: %w", *filter, err)
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
		// Swarm children inherit the environment.
		if err := os.Setenv(bench.SwarmCPUProfileEnv, *cpuProfile+".swarm"); err != nil {
			return err
		}
	}

	fmt.Printf("lehr-bench: %s profile\n\n", profile)
	r, err := bench.RunScenarios(ctx, bench.Options{
		Profile:             profile,
		Filter:              re,
		WorkDir:             *workdir,
		OutDir:              *out,
		AgentBinary:         *agentBin,
		StormAgents:         *stormAgents,
		FanoutAgents:        *fanoutAgents,
		FanoutSystems:       splitList(*fanoutSystems),
		CatalogAgentsOnly:   *catalogAgents,
		AgentSilenceTimeout: *silence,
		FairRaceSystems:     splitList(*fairSystems),
		Logger:              slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Progress:            os.Stdout,
		PeerPlaintext:       !*peerTLS,
	})
	if r != nil {
		fmt.Printf("machine: %s\ncommand: %s\n", r.Machine, r.Command)
		if *out != "" {
			plots, werr := bench.WritePlots(*out, r)
			if werr != nil {
				return werr
			}
			path, werr := bench.WriteJSON(*out, r)
			if werr != nil {
				return werr
			}
			fmt.Println("results:", path)
			for _, p := range plots {
				fmt.Println("plot:", p)
			}
			fmt.Println()
			changes, werr := bench.WriteChanges(*out, r, os.Stdout)
			if werr != nil {
				return werr
			}
			if changes == "" {
				fmt.Printf("changes: no previous %s run in %s to compare with\n", r.Profile, *out)
			} else {
				fmt.Println("\nchanges:", changes)
			}
		}
		for _, res := range r.Results {
			if res.Error != "" {
				err = fmt.Errorf("scenario %s failed: %s", res.Scenario, res.Error)
			}
		}
	}
	return err
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
