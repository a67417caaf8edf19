package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// PrintRun writes run as human-readable tables to w: the machine, then per
// scenario its setup, one table of rows (columns are the union of the rows'
// metrics in first-seen order), its targets and notes.
func PrintRun(w io.Writer, run *Run) {
	fmt.Fprintf(w, "lehr-bench %s profile, %s\n", run.Profile, run.Started.UTC().Format("2006-01-02 15:04:05Z"))
	fmt.Fprintf(w, "machine: %s\n", run.Machine)
	fmt.Fprintf(w, "command: %s\n", run.Command)
	for _, r := range run.Results {
		fmt.Fprintln(w)
		PrintResult(w, r)
	}
}

// PrintResult writes one scenario's result as a table to w.
func PrintResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "== %s: %s (%.1fs)\n", r.Scenario, r.Title, r.Elapsed.Seconds())
	if r.Setup != "" {
		fmt.Fprintf(w, "   %s\n", r.Setup)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "   ERROR: %s\n", r.Error)
	}
	if len(r.Rows) > 0 {
		var cols []string
		units := map[string]string{}
		for _, row := range r.Rows {
			for _, m := range row.Metrics {
				if _, ok := units[m.Name]; !ok {
					cols = append(cols, m.Name)
					units[m.Name] = m.Unit
				}
			}
		}
		withTransport := false
		for _, row := range r.Rows {
			withTransport = withTransport || row.Transport != ""
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := []string{"system", "case"}
		for _, c := range cols {
			if u := units[c]; u != "" && !strings.HasSuffix(c, u) {
				c += " (" + u + ")"
			}
			head = append(head, c)
		}
		if withTransport {
			head = append(head, "transport")
		}
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for _, row := range r.Rows {
			cells := []string{row.System, row.Case}
			for _, c := range cols {
				if v, ok := row.Get(c); ok {
					cells = append(cells, FormatValue(v))
				} else {
					cells = append(cells, "-")
				}
			}
			if withTransport {
				cells = append(cells, row.Transport)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		tw.Flush()
	}
	for _, t := range r.Targets {
		mark := "MET   "
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "   target %s %s: %s\n", mark, t.Goal, t.Got)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "   note: %s\n", n)
	}
	for _, p := range r.Plots {
		fmt.Fprintf(w, "   plot: %s\n", p)
	}
}

// FormatValue formats a metric value with about three significant digits
// and no exponent for the magnitudes the harness produces.
func FormatValue(v float64) string {
	switch a := abs(v); {
	case v == float64(int64(v)) && a < 1e15:
		return strconv.FormatInt(int64(v), 10)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
