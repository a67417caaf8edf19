package chaos

import (
	"archive/tar"
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

//go:embed upgrade-from
var upgradeFrom string

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// UpgradeFrom returns the commit the rolling-upgrade scenario starts
// from: the previous release, as the file testenv/chaos/upgrade-from
// records it (its comments say how it was chosen and how to move it).
func UpgradeFrom() (string, error) {
	sc := bufio.NewScanner(strings.NewReader(upgradeFrom))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !fullCommit.MatchString(line) {
			return "", fmt.Errorf("chaos: upgrade-from names %q, not a commit of 40 hex digits", line)
		}
		return line, nil
	}
	return "", errors.New("chaos: upgrade-from names no commit")
}

// ErrNoCommit is BuildCommit's error when the commit cannot be had from
// the module's git repository: a shallow clone, a source tree outside
// git, no git installed.
var ErrNoCommit = errors.New("chaos: commit not available")

// CommitBuildOptions configure BuildCommit.
type CommitBuildOptions struct {
	// Commit is the full revision to build. Required.
	Commit string
	// CacheDir keeps the binaries built, one directory per commit; ""
	// means lehr/chaos-commits under the user's cache directory (where Go
	// keeps its build cache).
	CacheDir string
	// Log receives git's and the go tool's output; nil discards it.
	Log io.Writer
}

// BuildCommit returns a lehr binary (cmd/lehr) built from opts.Commit of
// the module's git repository, building it once per cache directory: the
// commit's tree is extracted with "git archive" (the working tree and the
// repository are not touched) and built as make build would, stamped
// with the commit and its VERSION where its internal/buildinfo reads
// them. Its dependencies come from the module cache or proxy. Without the
// commit the error wraps ErrNoCommit and says why.
func BuildCommit(ctx context.Context, opts CommitBuildOptions) (string, error) {
	if !fullCommit.MatchString(opts.Commit) {
		return "", fmt.Errorf("chaos: BuildCommit: %q is not a full commit", opts.Commit)
	}
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	cache := opts.CacheDir
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("chaos: no cache directory for the binaries of old commits: %w", err)
		}
		cache = filepath.Join(dir, "lehr", "chaos-commits")
	}
	bin := filepath.Join(cache, opts.Commit, "lehr")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}

	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("%w: %s: git is not installed", ErrNoCommit, opts.Commit)
	}
	if err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", opts.Commit+"^{commit}").Run(); err != nil {
		why := "the repository does not have it"
		out, gerr := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		switch {
		case gerr != nil:
			why = fmt.Sprintf("%s is not in a git repository (%v)", root, gerr)
		case strings.TrimSpace(string(out)) == "true":
			why = "the repository is a shallow clone (git fetch --unshallow gets the history)"
		}
		return "", fmt.Errorf("%w: %s: %s", ErrNoCommit, opts.Commit, why)
	}

	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := gitArchive(ctx, root, opts.Commit, src, log); err != nil {
		return "", err
	}
	ldflags := "-X lehr.dev/lehr/internal/buildinfo.commit=" + opts.Commit
	if v, err := os.ReadFile(filepath.Join(src, "VERSION")); err == nil {
		ldflags += " -X lehr.dev/lehr/internal/buildinfo.version=" + strings.TrimSpace(string(v))
	}
	out := filepath.Join(tmp, "lehr")
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", out, "./cmd/lehr")
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = log, log
	// -mod=mod: an old go.sum may lack what today's toolchain checks.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("chaos: go build of %s: %w", opts.Commit, err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(out, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// gitArchive extracts commit's tree from the repository at root into dst.
func gitArchive(ctx context.Context, root, commit, dst string, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	cmd.Stderr = log
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: git archive: %w", err)
	}
	xerr := untar(r, dst)
	if xerr != nil {
		_, _ = io.Copy(io.Discard, r)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("chaos: git archive %s: %w", commit, err)
	}
	return xerr
}

// untar writes the directories, regular files and symbolic links of a tar
// stream under dst.
func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("chaos: read git archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("chaos: git archive: unsafe path %q", h.Name)
		}
		path := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
	}
}
