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
