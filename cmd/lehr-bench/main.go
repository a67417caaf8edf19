// Command lehr-bench runs Lehr's benchmark scenarios (package bench) and
// prints a table per scenario on stdout and writes the run as JSON under
// -out. "make bench" runs it with -quick, "make bench-full" with -full,
// both through scripts/bench.sh, which also raises the socket buffer and
// file descriptor limits for the run.
//
// Usage:
//
//	lehr-bench [-quick|-full] [-scenario REGEXP] [-out DIR] [-workdir DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"lehr.dev/lehr/bench"
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
	out := flag.String("out", "bench/results", "directory for the run's JSON file and profile summaries; empty writes none")
	workdir := flag.String("workdir", "", "directory for scratch data (etcd, Badger, files); its file system sets fsync cost; default the system temp dir")
	agentBin := flag.String("agent-binary", "", "lehr-agent binary for the agent-process scenarios; default: build cmd/lehr-agent")
	verbose := flag.Bool("v", false, "log the components' info messages to stderr")
	flag.Parse()

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

	fmt.Printf("lehr-bench: %s profile\n\n", profile)
	r, err := bench.RunScenarios(ctx, bench.Options{
		Profile:     profile,
		Filter:      re,
		WorkDir:     *workdir,
		OutDir:      *out,
		AgentBinary: *agentBin,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Progress:    os.Stdout,
	})
	if r != nil {
		fmt.Printf("machine: %s\ncommand: %s\n", r.Machine, r.Command)
		if *out != "" {
			path, werr := bench.WriteJSON(*out, r)
			if werr != nil {
				return werr
			}
			fmt.Println("results:", path)
		}
		for _, res := range r.Results {
			if res.Error != "" {
				err = fmt.Errorf("scenario %s failed: %s", res.Scenario, res.Error)
			}
		}
	}
	return err
}
