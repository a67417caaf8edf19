package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCurrentTargets(t *testing.T) {
	dir := t.TempDir()
	at := func(h int) time.Time { return time.Date(2026, 11, 27, h, 0, 0, 0, time.UTC) }
	write := func(h int, profile, commit string, results ...Result) {
		t.Helper()
		run := &Run{Started: at(h), Profile: profile, Machine: Machine{GitCommit: commit}, Results: results}
		if _, err := WriteJSON(dir, run); err != nil {
			t.Fatal(err)
		}
	}
	tg := func(goal, got string, met bool) Target { return Target{Goal: goal, Got: got, Met: met} }
	// A full run, then a quick run that checks one of its goals again and
	// one of its own; a later smoke run and a later full run of another
	// scenario; an old quick run of fanout, superseded; a later partial
	// quick run of storm, which does not count.
	write(1, "quick", "0000000000", Result{Scenario: "fanout", Targets: []Target{tg("N=1000: p99 <= 250 ms", "p99 = 999 ms", false)}})
	write(2, "full", "1111111111aaaa", Result{Scenario: "fanout", Targets: []Target{
		tg("N=1000: p99 <= 250 ms", "p99 = 120 ms", true), tg("N=10000: p99 <= 3 s", "p99 = 4000 ms", false)}})
	write(3, "quick", "2222222222bbbb-dirty",
		Result{Scenario: "storm", Targets: []Target{tg("storm | 1000", "1.9 s", true)}},
		Result{Scenario: "fanout", Targets: []Target{tg("N=1000: p99 <= 250 ms", "p99 = 130 ms", true), tg("N=100: none missed", "0", true)}})
	write(6, "quick", "5555555", Result{Scenario: "storm", Partial: true, Targets: []Target{tg("storm | 1000", "partial", false)}})
	write(4, "smoke", "3333333", Result{Scenario: "fanout", Targets: []Target{tg("N=5: x", "y", true)}})
	write(5, "full", "4444444444", Result{Scenario: "publish", Targets: []Target{tg("p50 <= commit + 0.5 ms", "0.49 ms", true)}},
		Result{Scenario: "retired", Targets: []Target{tg("old goal", "old figure", true)}})
	if err := os.WriteFile(filepath.Join(dir, "20261127T020000Z-changes.md"), []byte("not a run"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := CurrentTargets(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []CurrentTarget{
		{Scenario: "publish", Target: tg("p50 <= commit + 0.5 ms", "0.49 ms", true), Run: "20261127T050000Z", Profile: "full", Commit: "4444444"},
		{Scenario: "fanout", Target: tg("N=1000: p99 <= 250 ms", "p99 = 130 ms", true), Run: "20261127T030000Z", Profile: "quick", Commit: "2222222-dirty"},
		{Scenario: "fanout", Target: tg("N=100: none missed", "0", true), Run: "20261127T030000Z", Profile: "quick", Commit: "2222222-dirty"},
		{Scenario: "fanout", Target: tg("N=10000: p99 <= 3 s", "p99 = 4000 ms", false), Run: "20261127T020000Z", Profile: "full", Commit: "1111111"},
		{Scenario: "storm", Target: tg("storm | 1000", "1.9 s", true), Run: "20261127T030000Z", Profile: "quick", Commit: "2222222-dirty"},
		{Scenario: "retired", Target: tg("old goal", "old figure", true), Run: "20261127T050000Z", Profile: "full", Commit: "4444444"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CurrentTargets (-want +got):\n%s", diff)
	}
	var b strings.Builder
	if err := WriteTargetTable(&b, got[4:5]); err != nil {
		t.Fatal(err)
	}
	wantTable := "| scenario | target | current figure | met? | run |\n|---|---|---|---|---|\n" +
		"| `storm` | storm \\| 1000 | 1.9 s | **yes** | `20261127T030000Z` quick, 2222222-dirty |\n"
	if b.String() != wantTable {
		t.Errorf("WriteTargetTable:\n%s\nwant:\n%s", b.String(), wantTable)
	}
}
