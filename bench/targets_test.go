package bench

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

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
	wantTable := "| scenario | target | current figure | met? | run | what it would take |\n|---|---|---|---|---|---|\n" +
		"| `storm` | storm \\| 1000 | 1.9 s | **yes** | `20261127T030000Z` quick, 2222222-dirty |  |\n"
	if b.String() != wantTable {
		t.Errorf("WriteTargetTable:\n%s\nwant:\n%s", b.String(), wantTable)
	}
}

// TestMissedNotes checks that every note of MissedNotes links to a section
// RESULTS.md has, and that the table prints a missed row's note, "–" for a
// missed row without one and nothing for a met row.
func TestMissedNotes(t *testing.T) {
	page, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`).FindAllStringSubmatch(string(page), -1) {
		anchors[headingAnchor(m[1])] = true
	}
	link := regexp.MustCompile(`\]\(#([^)]+)\)`)
	for _, n := range MissedNotes {
		links := link.FindAllStringSubmatch(n.Note, -1)
		if len(links) == 0 {
			t.Errorf("note of %s %q links to no section of RESULTS.md", n.Scenario, n.Goal)
		}
		for _, l := range links {
			if !anchors[l[1]] {
				t.Errorf("note of %s %q links to #%s, which is not a heading of RESULTS.md", n.Scenario, n.Goal, l[1])
			}
		}
		if words := len(strings.Fields(n.Note)); words > 35 {
			t.Errorf("note of %s %q has %d words; a note is a sentence, the section holds the rest", n.Scenario, n.Goal, words)
		}
	}
	// Every note still names a goal the runs check, met or not.
	current, err := CurrentTargets("results")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range MissedNotes {
		found := false
		for _, c := range current {
			found = found || (c.Scenario == n.Scenario && strings.Contains(c.Goal, n.Goal))
		}
		if !found {
			t.Errorf("note of %s %q matches no target of the runs in results/", n.Scenario, n.Goal)
		}
	}

	tg := func(scenario, goal string, met bool) CurrentTarget {
		return CurrentTarget{Scenario: scenario, Target: Target{Goal: goal, Got: "x", Met: met}, Run: "20261128T000000Z", Profile: "full", Commit: "abcdef0"}
	}
	var b strings.Builder
	if err := WriteTargetTable(&b, []CurrentTarget{
		tg("storm", "N=10000: storm converged within 15 s", false),
		tg("storm", "N=1000: storm converged within 15 s", true),
		tg("storm", "N=10000: a goal nobody wrote a note for", false),
	}); err != nil {
		t.Fatal(err)
	}
	want := "| scenario | target | current figure | met? | run | what it would take |\n|---|---|---|---|---|---|\n" +
		"| `storm` | N=10000: storm converged within 15 s | x | no | `20261128T000000Z` full, abcdef0 | " +
		missedNote(tg("storm", "converged within 15 s", false)) + " |\n" +
		"| `storm` | N=1000: storm converged within 15 s | x | **yes** | `20261128T000000Z` full, abcdef0 |  |\n" +
		"| `storm` | N=10000: a goal nobody wrote a note for | x | no | `20261128T000000Z` full, abcdef0 | – |\n"
	if b.String() != want {
		t.Errorf("WriteTargetTable:\n%s\nwant:\n%s", b.String(), want)
	}
	if missedNote(tg("storm", "converged within 15 s", false)) == "" {
		t.Error("the storm's 15 s row has no note")
	}
}

// headingAnchor is the anchor GitHub gives a Markdown heading: lower case,
// spaces as hyphens, every other character but letters, digits, hyphens
// and underscores dropped.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
