package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Markdown renders reports as the table docs/operations.md quotes: one
// row per run, then the violations, if any.
func Markdown(reps []*Report) string {
	var b strings.Builder
	b.WriteString("| topology | seed | ops (publishes / refused / retried) | kills | crash points fired | converge after last kill | update ack → all consumers p50 / max | distributor kill → update applied, left down p50 / max | … restarted at once p50 / max | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range reps {
		var kills, crashes []string
		kinds := make([]string, 0, len(r.Events))
		for k := range r.Events {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for _, k := range kinds {
			item := fmt.Sprintf("%s ×%d", k, r.Events[k])
			if strings.HasPrefix(k, "kill") {
				kills = append(kills, item)
			} else {
				crashes = append(crashes, item)
			}
		}
		if len(r.NotFired) > 0 {
			crashes = append(crashes, fmt.Sprintf("(armed, not fired: %s)", strings.Join(r.NotFired, ", ")))
		}
		dp50, dmax := durations(r.FailoverDown)
		rp50, rmax := durations(r.FailoverRestart)
		fmt.Fprintf(&b, "| %s | %d | %d (%d / %d / %d) | %s | %s | %s | %s / %s | %s / %s | %s / %s | %d |\n",
			r.Topology, r.Seed, r.Ops, r.Publishes, r.Refused, r.Retried,
			strings.Join(kills, ", "), strings.Join(crashes, ", "),
			round(r.Converge), round(r.UpdateP50), round(r.UpdateMax),
			round(dp50), round(dmax), round(rp50), round(rmax), len(r.Violations))
	}
	for _, r := range reps {
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "\n- violation (%s, seed %d): %s", r.Topology, r.Seed, v)
		}
	}
	return b.String()
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}
