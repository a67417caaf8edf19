package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/testenv/chaos"
)

var (
	long   = flag.Bool("chaos.long", false, "run the long kill matrix and lossy-link measurement (make chaos) instead of the short ones")
	report = flag.String("chaos.report", "", "append the matrix's report (markdown) to this file")
	keep   = flag.Bool("chaos.keep", false, "keep each run's directory (processes' data and logs) even when it passes")
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildDir  string
)

// lehrBinary builds cmd/lehr with crash points once per test process.
func lehrBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lehr-chaos-build")
		if buildErr != nil {
			return
		}
		start := time.Now()
		binary, buildErr = chaos.Build(t.Context(), chaos.BuildOptions{Dir: buildDir, Race: raceEnabled, Log: t.Output()})
		t.Logf("built %s (race %v) in %v", binary, raceEnabled, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// runDir returns a short directory for a run (agents' unix sockets live
// under it), removed after the test unless it failed.
func runDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *keep {
			t.Logf("kept the run's directory (processes' logs in */log): %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// The kill matrix (issue 8). The short profile runs in "make test" with
// fixed seeds; -chaos.long ("make chaos") runs at least 1,000 writes per
// topology with many more kills.
func TestKillMatrix(t *testing.T) {
	type profile struct {
		name string
		cfg  chaos.Config
	}
	profiles := []profile{
		{"zones=1", chaos.Config{Topology: chaos.Topology{Zones: 1, DistributorsPerZone: 2, AgentsPerZone: 3},
			Namespaces: 5, OpsPerNamespace: 30, BigValue: 64 << 10, Think: 200 * time.Millisecond, Seed: 1, Events: 9, FailoverReps: 1}},
		{"zones=2", chaos.Config{Topology: chaos.Topology{Zones: 2, DistributorsPerZone: 2, AgentsPerZone: 2, SilenceTimeout: time.Second},
			Namespaces: 5, OpsPerNamespace: 24, BigValue: 64 << 10, Think: 200 * time.Millisecond, Seed: 2, Events: 9, FailoverReps: 1}},
	}
	if *long {
		profiles = []profile{
			{"zones=1", chaos.Config{Topology: chaos.Topology{Zones: 1, DistributorsPerZone: 2, AgentsPerZone: 3},
				Namespaces: 6, OpsPerNamespace: 200, BigValue: 256 << 10, Think: 200 * time.Millisecond, Seed: 11, Events: 40, FailoverReps: 5}},
			{"zones=2", chaos.Config{Topology: chaos.Topology{Zones: 2, DistributorsPerZone: 2, AgentsPerZone: 3, SilenceTimeout: time.Second},
				Namespaces: 6, OpsPerNamespace: 200, BigValue: 256 << 10, Think: 200 * time.Millisecond, Seed: 12, Events: 40, FailoverReps: 5}},
		}
	}
	bin := lehrBinary(t)
	var reps []*chaos.Report
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			cfg := p.cfg
			cfg.Binary, cfg.Dir, cfg.Logger = bin, runDir(t), testLogger(t)
			cfg.ConvergeBound = time.Minute
			ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
			defer cancel()
			rep, err := chaos.Run(ctx, cfg)
			if rep != nil {
				reps = append(reps, rep)
				t.Logf("report:\n%s", chaos.Markdown([]*chaos.Report{rep}))
				for _, v := range rep.Violations {
					t.Errorf("violation: %s", v)
				}
				for _, nf := range rep.NotFired {
					t.Errorf("crash point armed but not fired: %s", nf)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	if len(reps) > 0 {
		appendReport(t, "Kill matrix", chaos.Markdown(reps))
	}
}

// appendReport appends a section to the -chaos.report file, if any.
func appendReport(t *testing.T, title, body string) {
	t.Helper()
	if *report == "" {
		return
	}
	f, err := os.OpenFile(*report, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "\n## %s (%s, long=%v, race=%v)\n\n%s\n", title, time.Now().UTC().Format(time.RFC3339), *long, raceEnabled, body); err != nil {
		t.Fatal(err)
	}
}
