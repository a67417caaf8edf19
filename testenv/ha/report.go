package ha

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Markdown renders results as the table docs/operations.md quotes: one
// row per scenario run, then each run's figures and notes, then the
// violations, if any.
func Markdown(results []*Result) string {
	var b strings.Builder
	b.WriteString("| scenario | fault | writes acked (refused / retried) | lost | duplicated | progressive rollouts succeeded | fault → next update applied | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d of %d (%d / %d) | %d | %d | %d of %d | %s | %d |\n",
			r.Title, r.Fault, r.Acked, r.Ops, r.Refused, r.Retried, r.Lost, r.Duplicated,
			r.RolloutsSucceeded, r.Rollouts, round(r.FaultToUpdate), len(r.Violations))
	}
	for _, r := range results {
		if len(r.Figures) == 0 && len(r.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s (%s):\n", r.Title, round(r.Duration))
		for _, f := range r.Figures {
			fmt.Fprintf(&b, "- %s: %s\n", f.Name, round(f.D))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	for _, r := range results {
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "\n- violation (%s): %s", r.Scenario, v)
		}
	}
	return b.String()
}

// Summary renders, per scenario run more than once, the median and
// worst of every figure over its runs, and the lost and duplicated writes
// summed.
func Summary(results []*Result) string {
	var order []string
	by := map[string][]*Result{}
	for _, r := range results {
		if by[r.Title] == nil {
			order = append(order, r.Title)
		}
		by[r.Title] = append(by[r.Title], r)
	}
	var b strings.Builder
	b.WriteString("| scenario | runs | lost | duplicated | figure | median | worst |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, title := range order {
		rs := by[title]
		lost, dup := 0, 0
		figs := map[string][]time.Duration{}
		names := []string{"fault → next update applied"}
		for _, r := range rs {
			lost += r.Lost
			dup += r.Duplicated
			figs[names[0]] = append(figs[names[0]], r.FaultToUpdate)
			for _, f := range r.Figures {
				if figs[f.Name] == nil {
					names = append(names, f.Name)
				}
				figs[f.Name] = append(figs[f.Name], f.D)
			}
		}
		for i, name := range names {
			med, worst := medianMax(figs[name])
			if i == 0 {
				fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s |\n", title, len(rs), lost, dup, name, round(med), round(worst))
			} else {
				fmt.Fprintf(&b, "| | | | | %s | %s | %s |\n", name, round(med), round(worst))
			}
		}
	}
	return b.String()
}

func medianMax(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
