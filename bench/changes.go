package bench

// What changed since the previous run: the newest earlier run of the same
// profile under the results directory, compared row by row.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// runFileRE matches the name WriteJSON gives a run's JSON.
var runFileRE = regexp.MustCompile(`^\d{8}T\d{6}Z\.json$`)

// PreviousRun returns the newest run in dir of the same profile as cur that
// started before it, and its path; nil and "" when there is none. Files
// that are not run JSONs are ignored; a run JSON that cannot be read is an
// error.
func PreviousRun(dir string, cur *Run) (*Run, string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("bench: list previous runs in %s: %w", dir, err)
	}
	var best *Run
	var bestPath string
	for _, e := range ents {
		if e.IsDir() || !runFileRE.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("bench: read previous run: %w", err)
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, "", fmt.Errorf("bench: decode previous run %s: %w", path, err)
		}
		if r.Profile != cur.Profile || !r.Started.Before(cur.Started) {
			continue
		}
		if best == nil || r.Started.After(best.Started) {
			best, bestPath = &r, path
		}
	}
	return best, bestPath, nil
}

// Delta is one metric of a row in two runs.
type Delta struct {
	// Metric is the metric's name, Unit its unit.
	Metric, Unit string
	// Prev and Cur are the values in the previous and the current run.
	Prev, Cur float64
}

// Percent is the change from Prev to Cur in percent; 0 when both are 0 and
// +Inf when only Prev is.
func (d Delta) Percent() float64 {
	if d.Prev == 0 {
		if d.Cur == 0 {
			return 0
		}
		return math.Inf(int(math.Copysign(1, d.Cur)))
	}
	return (d.Cur - d.Prev) / abs(d.Prev) * 100
}

// RowChange is a row present in both runs and how its compared metrics
// moved.
type RowChange struct {
	Scenario, System, Case string
	// PrevTransport and CurTransport are the row's transport in each run
	// (for peers of runs before Row.Transport existed: plaintext; for
	// Lehr's rows of those runs: unknown, "").
	PrevTransport, CurTransport string
	// Deltas are p50, p99 and the byte metrics, in the row's order.
	Deltas []Delta
}

// Changes is the comparison of two runs.
type Changes struct {
	// Rows holds rows present in both runs, in the current run's order.
	Rows []RowChange
	// Added and Removed name rows ("scenario system case") present in only
	// the current or only the previous run, among the scenarios both ran.
	Added, Removed []string
}

// compared reports whether metric m of a row is compared: the p50 and p99
// latencies and every byte count.
func compared(m Metric) bool {
	return m.Name == "p50" || m.Name == "p99" || m.Unit == "B"
}

// rowTransport is a row's transport, filling in what runs made before
// Row.Transport recorded it: their peers were plaintext.
func rowTransport(run *Run, r Row) string {
	if r.Transport != "" || (r.System != "etcd" && r.System != "nats") {
		return r.Transport
	}
	if run.PeerTransport != "" {
		return run.PeerTransport
	}
	return TransportPeerPlaintext
}

// CompareRuns compares cur with prev, scenario by scenario and row by row
// (matched by system and case). Ratio rows ("lehr/etcd") are left out:
// their parts are compared.
func CompareRuns(prev, cur *Run) Changes {
	var c Changes
	prevRes := map[string]Result{}
	for _, r := range prev.Results {
		prevRes[r.Scenario] = r
	}
	key := func(r Row) string { return r.System + "\x00" + r.Case }
	for _, res := range cur.Results {
		pr, ok := prevRes[res.Scenario]
		if !ok {
			continue
		}
		prevRows := map[string]Row{}
		for _, r := range pr.Rows {
			if !strings.Contains(r.System, "/") {
				prevRows[key(r)] = r
			}
		}
		seen := map[string]bool{}
		for _, r := range res.Rows {
			if strings.Contains(r.System, "/") {
				continue
			}
			seen[key(r)] = true
			p, ok := prevRows[key(r)]
			if !ok {
				c.Added = append(c.Added, res.Scenario+" "+r.System+" "+r.Case)
				continue
			}
			rc := RowChange{Scenario: res.Scenario, System: r.System, Case: r.Case,
				PrevTransport: rowTransport(prev, p), CurTransport: rowTransport(cur, r)}
			for _, m := range r.Metrics {
				if !compared(m) {
					continue
				}
				if pv, ok := p.Get(m.Name); ok {
					rc.Deltas = append(rc.Deltas, Delta{Metric: m.Name, Unit: m.Unit, Prev: pv, Cur: m.Value})
				}
			}
			if len(rc.Deltas) > 0 || rc.PrevTransport != rc.CurTransport {
				c.Rows = append(c.Rows, rc)
			}
		}
		for _, r := range pr.Rows {
			if !strings.Contains(r.System, "/") && !seen[key(r)] {
				c.Removed = append(c.Removed, res.Scenario+" "+r.System+" "+r.Case)
			}
		}
	}
	return c
}

// WriteMarkdown writes c as a short Markdown section: one table line per
// row with its p50, p99 and byte metrics as "previous → current (±%)",
// and the row's transport, marked when it is known in both runs and
// differs (a peer moved from plaintext to TLS). prevName and curName
// name the two runs (their JSON files).
func (c Changes) WriteMarkdown(w io.Writer, prevName, curName string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### Changes since the previous run\n\n")
	fmt.Fprintf(&b, "Previous: `%s`; this run: `%s`. Each cell is previous → this run (change); bytes are every byte metric of the row.\n\n", prevName, curName)
	if len(c.Rows) == 0 {
		b.WriteString("No row in common with the previous run.\n")
	} else {
		b.WriteString("| scenario | system | case | p50 ms | p99 ms | bytes | transport |\n|---|---|---|---|---|---|---|\n")
		for _, r := range c.Rows {
			var p50, p99 string
			var bytes []string
			for _, d := range r.Deltas {
				cell := fmt.Sprintf("%s → %s (%s)", FormatValue(d.Prev), FormatValue(d.Cur), formatPercent(d.Percent()))
				switch {
				case d.Metric == "p50":
					p50 = cell
				case d.Metric == "p99":
					p99 = cell
				default:
					bytes = append(bytes, d.Metric+" "+cell)
				}
			}
			tr := r.CurTransport
			if r.PrevTransport != "" && r.CurTransport != "" && r.PrevTransport != r.CurTransport {
				tr = fmt.Sprintf("**changed**: %s → %s", orDash(r.PrevTransport), orDash(r.CurTransport))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Scenario, r.System, r.Case,
				orDash(p50), orDash(p99), orDash(strings.Join(bytes, "; ")), orDash(tr))
		}
	}
	if len(c.Added) > 0 {
		fmt.Fprintf(&b, "\nNew rows: %s.\n", strings.Join(c.Added, ", "))
	}
	if len(c.Removed) > 0 {
		fmt.Fprintf(&b, "\nRows no longer measured: %s.\n", strings.Join(c.Removed, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteChanges compares run with the previous run of its profile in dir
// (PreviousRun) and writes the Markdown to dir/<run>-changes.md and to
// out (if not nil). It returns the file's path, or "" when there is no
// previous run.
func WriteChanges(dir string, run *Run, out io.Writer) (string, error) {
	prev, prevPath, err := PreviousRun(dir, run)
	if err != nil || prev == nil {
		return "", err
	}
	var b strings.Builder
	cur := filepath.Join(dir, runStamp(run)+".json")
	if err := CompareRuns(prev, run).WriteMarkdown(&b, filepath.ToSlash(prevPath), filepath.ToSlash(cur)); err != nil {
		return "", err
	}
	path := filepath.Join(dir, runStamp(run)+"-changes.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("bench: write %s: %w", path, err)
	}
	if out != nil {
		io.WriteString(out, b.String())
	}
	return path, nil
}

// formatPercent formats a change like "+4.2 %" or "−13 %"; "from 0" when
// the previous value was 0.
func formatPercent(p float64) string {
	switch {
	case math.IsInf(p, 0):
		return "from 0"
	}
	sign := "+"
	if p < 0 {
		sign, p = "−", -p
	}
	if p >= 10 || p == 0 {
		return fmt.Sprintf("%s%.0f %%", sign, p)
	}
	return fmt.Sprintf("%s%.1f %%", sign, p)
}

// orDash returns s, or "–" for an empty s.
func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
