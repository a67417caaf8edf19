package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Crash points compiled into the binary Build makes. Each is a gofail
// failpoint ("// gofail: var NAME struct{}") in the daemon's code; armed,
// it crashes the process at that point. See Proc.Arm.
const (
	// StoreAfterStage: control, a commit's blobs staged in etcd, its
	// version transaction not run (control/store/versions.go).
	StoreAfterStage = "storeAfterStage"
	// StoreAfterCommit: control, a commit's version transaction done, the
	// producer not answered (control/store/versions.go).
	StoreAfterCommit = "storeAfterCommit"
	// AgentAfterCacheCommit: agent, an update committed to Badger, the
	// namespace file not written (agent/apply.go).
	AgentAfterCacheCommit = "agentAfterCacheCommit"
	// NsfileBeforeRename: agent, the new namespace file written to its
	// temporary name, not renamed into place (internal/nsfile/write.go).
	NsfileBeforeRename = "nsfileBeforeRename"
	// DistributorMidSnapshot: distributor, half of a snapshot's update
	// stream written (distributor/fanout/session.go). Armed with
	// TermCrashNext, it crashes at the next snapshot pushed.
	DistributorMidSnapshot = "distributorMidSnapshot"
)

// crashPoints lists them all.
var crashPoints = []string{StoreAfterStage, StoreAfterCommit, AgentAfterCacheCommit, NsfileBeforeRename, DistributorMidSnapshot}

// failpointDirs are the package directories holding the crash points.
var failpointDirs = []string{"./agent", "./internal/nsfile", "./control/store", "./distributor/fanout"}

// BuildOptions configure Build.
type BuildOptions struct {
	// Dir receives the binary and the failpoint-enabled copy of the
	// source tree. Required.
	Dir string
	// Race builds with the race detector. Under "go test -race" this
	// reuses the dependencies the tests were compiled with, and finds
	// data races in the daemons while they are being killed.
	Race bool
	// Log receives the go tool's output; nil discards it.
	Log io.Writer
	// NoCrashPoints builds the working tree as it is: no copy, no crash
	// points (Proc.Arm fails), for suites that kill but arm nothing.
	NoCrashPoints bool
}

// Build compiles cmd/lehr with the crash points enabled (unless
// opts.NoCrashPoints) and returns the binary's path. It copies the
// module's source tree (the files git tracks or would track) to
// opts.Dir/src, runs "go tool gofail enable" there on the packages with
// crash points and builds. The working tree is never
// modified, and a normal build of it has no failpoint code: gofail's
// markers are comments.
func Build(ctx context.Context, opts BuildOptions) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	src := root
	if !opts.NoCrashPoints {
		src = filepath.Join(opts.Dir, "src")
		if err := copyTree(root, src); err != nil {
			return "", fmt.Errorf("chaos: copy source tree: %w", err)
		}
	}
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = src
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("chaos: go %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	if !opts.NoCrashPoints {
		if err := run(append([]string{"tool", "gofail", "enable"}, failpointDirs...)...); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(opts.Dir, "lehr")
	args := []string{"build", "-o", bin}
	if opts.Race {
		args = append(args, "-race")
	}
	if err := run(append(args, "./cmd/lehr")...); err != nil {
		return "", err
	}
	return bin, nil
}

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	gomod := string(bytes.TrimSpace(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("chaos: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// copyTree copies the source files under root to dst: regular files, not
// the .git directory, bin/, bench results or other dot directories.
func copyTree(root, dst string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == filepath.Join("bench", "results")) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}
