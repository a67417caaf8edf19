package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Run is one invocation of the harness: what ran, where, and what it
// measured. It is written as JSON to <out>/<timestamp>.json.
type Run struct {
	// Started and Finished bound the run.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Command is the command line that produced the run.
	Command string `json:"command"`
	// Profile is the size profile: "smoke", "quick" or "full".
	Profile string `json:"profile"`
	// Machine describes the host.
	Machine Machine `json:"machine"`
	// PeerTransport is how the etcd and NATS peers were reached in this
	// run: TransportPeerTLS or TransportPeerPlaintext. Empty in runs made
	// before peers had TLS, which were plaintext.
	PeerTransport string `json:"peer_transport,omitempty"`
	// Results holds one entry per scenario run, in run order.
	Results []Result `json:"results"`
}

// Result is what one scenario measured.
type Result struct {
	// Scenario is the scenario's name (Scenario.Name).
	Scenario string `json:"scenario"`
	// Title says in a line what is measured.
	Title string `json:"title"`
	// Setup says how: the parts involved, durability, concurrency, sizes.
	Setup string `json:"setup"`
	// Rows are the measurements, one per system and case.
	Rows []Row `json:"rows"`
	// Targets are the goals of issue 4 this scenario checks, and whether
	// they were met.
	Targets []Target `json:"targets,omitempty"`
	// Notes are caveats and approximations a reader must know.
	Notes []string `json:"notes,omitempty"`
	// Plots are the file names, relative to the directory of the run's
	// JSON, of the latency CDF plots drawn from CDFs (WritePlots).
	Plots []string `json:"plots,omitempty"`
	// CDFs are the latency samples to plot; not kept in the JSON (the
	// plots and the rows' percentiles are).
	CDFs []CDFPlot `json:"-"`
	// Partial says the scenario ran only some of its cases (the fair race
	// with -fairrace-systems): its rows and targets are for comparing
	// builds, and do not stand for the scenario's current figures
	// (CurrentTargets skips them).
	Partial bool `json:"partial,omitempty"`
	// Error is set when the scenario failed; Rows then holds what was
	// measured before the failure.
	Error string `json:"error,omitempty"`
	// Elapsed is the scenario's wall time.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Row is one line of a result table: a system ("lehr", "etcd", "nats") and
// a case ("1KiB", "N=1000") with its metrics in display order.
type Row struct {
	System string `json:"system"`
	Case   string `json:"case"`
	// Transport is how the system's clients were reached, in rows that
	// compare Lehr with peers: TransportLehr, TransportPeerTLS,
	// TransportPeerPlaintext, or "a vs b" for a ratio row.
	Transport string   `json:"transport,omitempty"`
	Metrics   []Metric `json:"metrics"`
}

// Metric is one named figure.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Unit is "ms", "B", "MiB", "ops/s", "s", "" (a count or ratio)…
	Unit string `json:"unit,omitempty"`
}

// Target is one goal from issue 4 and how this run fared against it.
type Target struct {
	// Goal states the target, e.g. "p99 <= 10 ms".
	Goal string `json:"goal"`
	// Got states the measured value, e.g. "p99 = 4.1 ms".
	Got string `json:"got"`
	// Met reports whether the goal was met.
	Met bool `json:"met"`
}

// Add appends a metric to the row and returns the row for chaining.
func (r *Row) Add(name string, value float64, unit string) *Row {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: value, Unit: unit})
	return r
}

// AddLatency appends p50, p90, p99 and max of s in milliseconds, each name
// prefixed with prefix (e.g. "" or "last ").
func (r *Row) AddLatency(prefix string, s Summary) *Row {
	r.Add(prefix+"p50", ms(s.P50), "ms")
	r.Add(prefix+"p90", ms(s.P90), "ms")
	r.Add(prefix+"p99", ms(s.P99), "ms")
	r.Add(prefix+"max", ms(s.Max), "ms")
	return r
}

// Get returns the value of the named metric and whether the row has it.
func (r Row) Get(name string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Machine describes the host a run measured.
type Machine struct {
	// NumCPU is the number of logical CPUs usable by the process (nproc).
	NumCPU int `json:"nproc"`
	// CPUModel is the "model name" of /proc/cpuinfo.
	CPUModel string `json:"cpu_model"`
	// MemTotalBytes is MemTotal of /proc/meminfo.
	MemTotalBytes uint64 `json:"mem_total_bytes"`
	// Kernel is the kernel release (/proc/sys/kernel/osrelease).
	Kernel string `json:"kernel"`
	// GoVersion, GOOS and GOARCH describe the toolchain of the binary.
	GoVersion string `json:"go_version"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	// GitCommit is HEAD of the work tree, with "-dirty" if it has
	// uncommitted changes; empty outside a git checkout.
	GitCommit string `json:"git_commit"`
	// Filesystem is the type of the file system holding the scratch
	// directory (fsync cost depends on it), e.g. "ext4".
	Filesystem string `json:"filesystem,omitempty"`
	// LoadAvg is /proc/loadavg when the run started: other work on the
	// machine skews every figure.
	LoadAvg string `json:"loadavg,omitempty"`
}

// DescribeMachine collects the Machine of this host; dir is the scratch
// directory whose file system is reported. Fields it cannot read stay empty.
func DescribeMachine(dir string) Machine {
	m := Machine{
		NumCPU:    runtime.NumCPU(),
		GoVersion: runtime.Version(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				m.MemTotalBytes = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		m.GitCommit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			m.GitCommit += "-dirty"
		}
	}
	m.Filesystem = fsType(dir)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.TrimSpace(string(b))
	}
	return m
}

// fsType returns the type of the file system holding dir, from the longest
// mount point of /proc/self/mounts that contains it; "" if unknown.
func fsType(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil || dir == "" {
		return ""
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	best, typ := -1, ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, typ = len(mp), f[2]
		}
	}
	return typ
}

// String is a one-line description of the machine.
func (m Machine) String() string {
	return fmt.Sprintf("%d × %s, %.1f GiB RAM, Linux %s, %s %s/%s, fs %s, commit %s, loadavg at start %s",
		m.NumCPU, m.CPUModel, float64(m.MemTotalBytes)/(1<<30), m.Kernel, m.GoVersion, m.GOOS, m.GOARCH, m.Filesystem, m.GitCommit, m.LoadAvg)
}

// WriteJSON writes run to dir/<started, UTC, as 20060102T150405Z>.json,
// creating dir, and returns the file's path.
func WriteJSON(dir string, run *Run) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: create results directory %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return "", fmt.Errorf("bench: encode run: %w", err)
	}
	path := filepath.Join(dir, run.Started.UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("bench: write %s: %w", path, err)
	}
	return path, nil
}
