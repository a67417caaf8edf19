package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// cpuProfile is a CPU profile of this process being taken.
type cpuProfile struct {
	path string
	f    *os.File
}

// startCPUProfile starts profiling into dir/name.pprof.
func startCPUProfile(dir, name string) (*cpuProfile, error) {
	return startCPUProfileFile(filepath.Join(dir, name+".pprof"))
}

// startCPUProfileFile starts profiling into the file at path.
func startCPUProfileFile(path string) (*cpuProfile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start CPU profile: %w", err)
	}
	return &cpuProfile{path: path, f: f}, nil
}

// stop ends the profile and returns its file.
func (p *cpuProfile) stop() string {
	pprof.StopCPUProfile()
	p.f.Close()
	return p.path
}

// writeHeapProfile writes the in-use heap of this process to dir/name.pprof
// after a collection.
func writeHeapProfile(dir, name string) (string, error) {
	runtime.GC()
	return writeHeapProfileNoGC(dir, name)
}

// writeHeapProfileNoGC writes the in-use heap as of the last collection
// (one the caller just ran), without another: a second collection would
// empty sync.Pools (quic-go's packet buffers) that the first kept.
func writeHeapProfileNoGC(dir, name string) (string, error) {
	path := filepath.Join(dir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return "", fmt.Errorf("write heap profile: %w", err)
	}
	return path, nil
}

// topSummary renders the top 10 of a profile with "go tool pprof -top"
// (sample index for heap profiles: inuse_space), cumulative and flat, and
// writes it to outDir/name.txt when outDir is set. It returns the text.
func topSummary(profile, outDir, name, header string, extra ...string) (string, error) {
	var out bytes.Buffer
	out.WriteString(header + "\n\n")
	for _, sort := range []string{"-flat", "-cum"} {
		args := append([]string{"tool", "pprof", "-top", "-nodecount=10", sort}, extra...)
		args = append(args, profile)
		cmd := exec.Command("go", args...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool pprof: %w: %s", err, strings.TrimSpace(string(b)))
		}
		fmt.Fprintf(&out, "$ go tool pprof %s\n%s\n", strings.Join(args[2:len(args)-1], " "), b)
	}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(outDir, name+".txt"), out.Bytes(), 0o644); err != nil {
			return "", err
		}
	}
	return out.String(), nil
}

// profileShare is one part of a CPU profile's breakdown.
type profileShare struct {
	Part string
	CPU  time.Duration
}

// Parts of a CPU profile's breakdown (breakdown), in the order they are
// tried on a sample's stack.
const (
	partGC          = "GC (background marking, sweeping, assists)"
	partCrypto      = "crypto (AES-GCM sealing and opening, header protection, TLS)"
	partQUICSyscall = "system calls made by quic-go (sendmsg/recvmsg: the kernel's UDP path)"
	partRTSyscall   = "system calls made by the runtime (futex, epoll: waking and parking threads)"
	partQUIC        = "quic-go (packing, acknowledging, flow control, streams; with the runtime work it calls)"
	partLehr        = "Lehr (fanout, wire, protobuf; with the runtime work it calls: allocation, channels, locks, timers)"
	partSched       = "Go scheduler and timers, outside any of the above"
	partOther       = "other (net/http, metrics, …)"
)

// breakdown splits the CPU profile at path by where the CPU went: each
// sample's stack (from go tool pprof -traces) goes to the first part that
// claims it: GC if any frame is the collector's; crypto or a system call
// by its leaf (system calls split by whether quic-go is on the stack);
// then quic-go or Lehr by the innermost of their frames on the stack, so
// that allocation, channel and lock work counts for the code that asked
// for it; the scheduler for stacks of the runtime alone.
func breakdown(path string) (total time.Duration, parts []profileShare, err error) {
	b, err := exec.Command("go", "tool", "pprof", "-traces", path).Output()
	if err != nil {
		return 0, nil, fmt.Errorf("go tool pprof -traces: %w", err)
	}
	sums := map[string]time.Duration{}
	for _, block := range strings.Split(string(b), "-----------+-------------------------------------------------------") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) == 0 {
			continue
		}
		f := strings.Fields(lines[0])
		if len(f) < 2 {
			continue
		}
		d, err := time.ParseDuration(f[0])
		if err != nil {
			continue // the header
		}
		stack := []string{f[1]}
		for _, l := range lines[1:] {
			if g := strings.Fields(l); len(g) > 0 {
				stack = append(stack, g[0])
			}
		}
		sums[classify(stack)] += d
		total += d
	}
	for _, p := range []string{partLehr, partQUIC, partQUICSyscall, partCrypto, partRTSyscall, partSched, partGC, partOther} {
		parts = append(parts, profileShare{p, sums[p]})
	}
	return total, parts, nil
}

// classify names the part of a sample's stack, leaf first.
func classify(stack []string) string {
	has := func(prefixes ...string) bool {
		for _, fr := range stack {
			for _, p := range prefixes {
				if strings.HasPrefix(fr, p) {
					return true
				}
			}
		}
		return false
	}
	leaf := stack[0]
	switch {
	case has("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination"):
		return partGC
	case strings.HasPrefix(leaf, "crypto/") || strings.HasPrefix(leaf, "vendor/golang.org/x/crypto") || strings.HasPrefix(leaf, "golang.org/x/crypto"):
		return partCrypto
	case strings.HasPrefix(leaf, "internal/runtime/syscall") || strings.HasPrefix(leaf, "syscall.") || strings.HasPrefix(leaf, "runtime.futex") ||
		strings.HasPrefix(leaf, "runtime.epollwait") || strings.HasPrefix(leaf, "runtime.usleep") || strings.HasPrefix(leaf, "runtime.write1") || strings.HasPrefix(leaf, "runtime.read"):
		if has("github.com/quic-go/") {
			return partQUICSyscall
		}
		return partRTSyscall
	}
	for _, fr := range stack {
		switch {
		case strings.HasPrefix(fr, "github.com/quic-go/"):
			return partQUIC
		case strings.HasPrefix(fr, "lehr.dev/lehr/"):
			return partLehr
		}
	}
	if strings.HasPrefix(stack[len(stack)-1], "runtime.") {
		return partSched
	}
	return partOther
}

// formatBreakdown renders a breakdown, per delivery when deliveries > 0.
func formatBreakdown(total time.Duration, parts []profileShare, deliveries int) string {
	var out strings.Builder
	fmt.Fprintf(&out, "%-100s %8s %6s", "where the CPU went", "cpu", "share")
	if deliveries > 0 {
		fmt.Fprintf(&out, " %14s", "µs/delivery")
	}
	out.WriteString("\n")
	row := func(name string, d time.Duration) {
		fmt.Fprintf(&out, "%-100s %8v %5.1f%%", name, d, 100*d.Seconds()/max(total.Seconds(), 1e-9))
		if deliveries > 0 {
			fmt.Fprintf(&out, " %14.1f", float64(d.Microseconds())/float64(deliveries))
		}
		out.WriteString("\n")
	}
	for _, p := range parts {
		row(p.Part, p.CPU)
	}
	row("total", total)
	return out.String()
}
