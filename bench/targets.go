package bench

// Where Lehr stands: every target the scenarios check, with the figure of
// the newest run that checked it (RESULTS.md's first screen).

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CurrentTarget is one target as the newest run that checked it left it.
type CurrentTarget struct {
	// Scenario is the scenario that checks it.
	Scenario string
	Target
	// Run is the run's JSON file name, Profile its profile ("quick" or
	// "full") and Commit the commit it measured, shortened ("-dirty" kept).
	Run, Profile, Commit string
}

// CurrentTargets reads the runs in dir (the files WriteJSON writes; smoke
// runs are skipped) and returns every target of the newest quick run and
// of the newest full run of each scenario (a partial run, Result.Partial,
// does not count): a goal both checked is the
// newer run's. The scenarios come in Scenarios' order (those no longer
// listed after them, by name); each scenario's targets in the order its
// newest run gave them, the older run's others after. A scenario's
// failed run counts, with the targets it got to.
func CurrentTargets(dir string) ([]CurrentTarget, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bench: list runs in %s: %w", dir, err)
	}
	type pick struct {
		run  string
		r    *Run
		res  Result
		prof string
	}
	newest := map[[2]string]pick{} // scenario, profile
	for _, e := range ents {
		if e.IsDir() || !runFileRE.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("bench: read run: %w", err)
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("bench: decode run %s: %w", e.Name(), err)
		}
		if r.Profile == string(Smoke) {
			continue
		}
		for _, res := range r.Results {
			if res.Partial {
				continue
			}
			k := [2]string{res.Scenario, r.Profile}
			// Names sort as their start times.
			if p, ok := newest[k]; !ok || e.Name() > p.run {
				newest[k] = pick{run: e.Name(), r: &r, res: res, prof: r.Profile}
			}
		}
	}
	order := map[string]int{}
	for i, s := range Scenarios() {
		order[s.Name] = i
	}
	var scenarios []string
	for k := range newest {
		if !slices.Contains(scenarios, k[0]) {
			scenarios = append(scenarios, k[0])
		}
	}
	slices.SortFunc(scenarios, func(a, b string) int {
		oa, okA := order[a]
		ob, okB := order[b]
		switch {
		case okA && okB:
			return oa - ob
		case okA:
			return -1
		case okB:
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []CurrentTarget
	for _, s := range scenarios {
		var picks []pick
		for _, prof := range []string{string(Full), string(Quick)} {
			if p, ok := newest[[2]string{s, prof}]; ok {
				picks = append(picks, p)
			}
		}
		// The newer run first: its goals win.
		slices.SortFunc(picks, func(a, b pick) int { return strings.Compare(b.run, a.run) })
		seen := map[string]bool{}
		for _, p := range picks {
			for _, t := range p.res.Targets {
				if seen[t.Goal] {
					continue
				}
				seen[t.Goal] = true
				out = append(out, CurrentTarget{Scenario: s, Target: t, Run: strings.TrimSuffix(p.run, ".json"),
					Profile: p.prof, Commit: shortCommit(p.r.Machine.GitCommit)})
			}
		}
	}
	return out, nil
}

// shortCommit shortens a commit hash to 7 digits, keeping a "-dirty"
// suffix.
func shortCommit(c string) string {
	h, dirty := strings.CutSuffix(c, "-dirty")
	if len(h) > 7 {
		h = h[:7]
	}
	if dirty {
		h += "-dirty"
	}
	return h
}

// WriteTargetTable writes targets as a Markdown table: scenario, goal,
// the figure, met or not, the run, and for a missed target what it would
// take (its MissedNotes note, "–" when it has none).
func WriteTargetTable(w io.Writer, targets []CurrentTarget) error {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("| scenario | target | current figure | met? | run | what it would take |\n|---|---|---|---|---|---|\n")
	for _, t := range targets {
		met, take := "no", orDash(missedNote(t))
		if t.Met {
			met, take = "**yes**", ""
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` %s, %s | %s |\n", t.Scenario, cell(t.Goal), cell(t.Got), met, t.Run, t.Profile, orDash(t.Commit), cell(take))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
