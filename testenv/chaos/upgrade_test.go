package chaos_test

import (
	"context"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/testenv/chaos"
)

var upgrade = flag.Bool("chaos.upgrade", false, "run the rolling upgrade from the commit in testenv/chaos/upgrade-from (make upgrade; make chaos runs it too, with -chaos.long)")

// The rolling upgrade (issue 33, item 4): the cluster started on binaries
// built from the previous release (testenv/chaos/upgrade-from), consumers
// on every agent and producers writing throughout; control, then each
// distributor, then each agent stopped with SIGTERM and started from this
// tree's binary on the same data; then every agent, distributor and
// control rolled back the same way, in the reverse order. No acknowledged
// publish lost, no torn view, every consumer converged, and control's
// zone status counting the new build on every distributor and agent.
// Building the old binary takes a minute or more on a cold build cache, so
// it runs under make upgrade and make chaos, not make test. It skips, saying
// why, where the repository lacks the commit (a shallow clone).
func TestRollingUpgrade(t *testing.T) {
	if !*upgrade && !*long {
		t.Skip("the rolling upgrade runs under make upgrade (-chaos.upgrade) and make chaos (-chaos.long)")
	}
	commit, err := chaos.UpgradeFrom()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	old, err := chaos.BuildCommit(t.Context(), chaos.CommitBuildOptions{Commit: commit, Log: t.Output()})
	if errors.Is(err, chaos.ErrNoCommit) {
		t.Skipf("cannot build the previous release to upgrade from: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the binary of %s: %s (%v)", commit[:12], old, time.Since(start).Round(time.Millisecond))
	bin := lehrBinary(t)

	cfg := chaos.UpgradeConfig{
		Old: old, New: bin, From: commit[:12], To: "this tree" + head(t),
		Topology:   chaos.Topology{Zones: 1, DistributorsPerZone: 2, AgentsPerZone: 3},
		Namespaces: 4, OpsPerNamespace: 20, BigValue: 64 << 10, Think: 200 * time.Millisecond, Seed: 33,
		Dwell: 2 * time.Second, Rollback: true, ConvergeBound: time.Minute,
	}
	if *long {
		cfg.Topology = chaos.Topology{Zones: 2, DistributorsPerZone: 2, AgentsPerZone: 3}
		cfg.Namespaces, cfg.BigValue, cfg.Dwell = 6, 256<<10, 5*time.Second
	}
	cfg.Dir, cfg.Logger = runDir(t), testLogger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	rep, err := chaos.RunUpgrade(ctx, cfg)
	if rep != nil {
		t.Logf("report:\n%s", chaos.UpgradeMarkdown([]*chaos.UpgradeReport{rep}))
		if rep.Lost > 0 || rep.Torn > 0 {
			t.Errorf("%d acknowledged publishes lost, %d torn views", rep.Lost, rep.Torn)
		}
		for _, v := range rep.Violations {
			t.Errorf("violation: %s", v)
		}
		if err == nil {
			appendReport(t, "Rolling upgrade", chaos.UpgradeMarkdown([]*chaos.UpgradeReport{rep}))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// head names the commit the tree is at, for the report: " at 5f2dd0e1a2b3"
// (with uncommitted changes, " at 5f2dd0e1a2b3+changes"), or "".
func head(t *testing.T) string {
	out, err := exec.CommandContext(t.Context(), "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := " at " + strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(t.Context(), "git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
		s += "+changes"
	}
	return s
}

// The commit upgrade-from names is main's history before this tree: an
// upgrade goes forward, and CI (a full clone of main) has it. Skipped
// where the repository is a shallow clone, or not one.
func TestUpgradeFromIsAnAncestor(t *testing.T) {
	commit, err := chaos.UpgradeFrom()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "git", "rev-parse", "--is-shallow-repository").Output()
	if err != nil {
		t.Skipf("not in a git repository: %v", err)
	}
	if strings.TrimSpace(string(out)) == "true" {
		t.Skip("a shallow clone: the history to check is not here")
	}
	if out, err := exec.CommandContext(t.Context(), "git", "merge-base", "--is-ancestor", commit, "HEAD").CombinedOutput(); err != nil {
		t.Errorf("upgrade-from names %s, which is not an ancestor of HEAD (%v %s): name a commit of main's history", commit, err, out)
	}
}
