package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091"
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	vcs := []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
		{Key: "vcs.time", Value: "2026-03-04T05:06:07Z"}, {Key: "vcs.modified", Value: "false"},
	}
	dirty := append(append([]debug.BuildSetting(nil), vcs[:len(vcs)-1]...), debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	bi := func(main string, settings []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "lehr.dev/lehr", Version: main}, Settings: settings}
	}
	tests := []struct {
		name    string
		bi      *debug.BuildInfo
		stamped Stamp
		want    Info
		str     string
	}{
		{"make build", bi("(devel)", vcs), Stamp{Version: "0.1.0"},
			Info{Version: "0.1.0", Commit: rev, CommitTime: when, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"0.1.0+237c09b1a2b3"},
		{"make build, uncommitted changes", bi("(devel)", dirty), Stamp{Version: "0.2.0-dev"},
			Info{Version: "0.2.0-dev", Commit: rev, CommitTime: when, Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"0.2.0-dev+237c09b1a2b3.dirty"},
		{"go build: a pseudo-version is no release", bi("v0.0.0-20260304050607-237c09b1a2b3+dirty", dirty), Stamp{},
			Info{Version: Devel, Commit: rev, CommitTime: when, Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"devel+237c09b1a2b3.dirty"},
		{"go build after a tag: still a pseudo-version", bi("v0.1.1-0.20260304050607-237c09b1a2b3", vcs), Stamp{},
			Info{Version: Devel, Commit: rev, CommitTime: when, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"devel+237c09b1a2b3"},
		{"go install @v0.1.0", bi("v0.1.0", nil), Stamp{},
			Info{Version: "0.1.0", GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH},
			"0.1.0"},
		{"the stamp wins over the module version", bi("v0.1.0", vcs), Stamp{Version: "0.1.0-rc.1"},
			Info{Version: "0.1.0-rc.1", Commit: rev, CommitTime: when, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"0.1.0-rc.1+237c09b1a2b3"},
		{"make build in a git worktree: the stamped commit", bi("(devel)", nil),
			Stamp{Version: "0.1.0", Commit: rev, CommitTime: "2026-03-04T06:06:07+01:00", Modified: "true"},
			Info{Version: "0.1.0", Commit: rev, CommitTime: when, Modified: true, GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH},
			"0.1.0+237c09b1a2b3.dirty"},
		{"the toolchain's commit wins over the stamped one", bi("(devel)", vcs),
			Stamp{Version: "0.1.0", Commit: "ffffffffffffffffffffffffffffffffffffffff", Modified: "true"},
			Info{Version: "0.1.0", Commit: rev, CommitTime: when, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"0.1.0+237c09b1a2b3"},
		{"go test: no VCS information", bi("(devel)", nil), Stamp{},
			Info{Version: Devel, GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH},
			"devel"},
		{"no build information at all", nil, Stamp{},
			Info{Version: Devel, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH},
			"devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromBuildInfo(tt.bi, tt.stamped)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromBuildInfo (-want +got):\n%s", diff)
			}
			if s := got.String(); s != tt.str {
				t.Errorf("String() = %q, want %q", s, tt.str)
			}
			if r := Release(got.String()); r != got.Version {
				t.Errorf("Release(%q) = %q, want the version %q", got.String(), r, got.Version)
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	var b strings.Builder
	i := Info{Version: "0.1.0", Commit: "237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091", CommitTime: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
		Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if err := i.WriteText(&b, "lehr"); err != nil {
		t.Fatal(err)
	}
	want := `lehr 0.1.0+237c09b1a2b3.dirty
  version    0.1.0
  commit     237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091 with uncommitted changes
  committed  2026-03-04T05:06:07Z
  go         go1.26.8 linux/amd64
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("WriteText (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := (Info{Version: Devel, GoVersion: "go1.26.8", Platform: "linux/amd64"}).WriteText(&b, "lehr-agent"); err != nil {
		t.Fatal(err)
	}
	want = `lehr-agent devel
  version    devel (built without a release version; make build stamps the VERSION file's)
  commit     unknown (built without version control information, as by go run or go test, or outside a git checkout)
  committed  unknown
  go         go1.26.8 linux/amd64
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("WriteText of a devel build (-want +got):\n%s", diff)
	}
}

// TestMakeBuildStamp builds a binary with the -ldflags of make build
// (make -n build says them) and runs it: the stamp reaches Get (a renamed
// variable would silently leave every release "devel", or without its
// commit in a git worktree), and the VERSION file is a version.
func TestMakeBuildStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	// Semantic versioning, as the skew policy counts minor releases.
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		t.Errorf("VERSION is %q; want a semantic version (0.1.0, 0.2.0-dev)", version)
	}
	mk := exec.Command("make", "-s", "-n", "build")
	mk.Dir = root
	out, err := mk.Output()
	if err != nil {
		t.Skipf("make -n build: %v", err) // no make: nothing to check it against
	}
	m := regexp.MustCompile(`-ldflags '([^']*)'`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("make -n build passes no -ldflags '…':\n%s", out)
	}
	bin := filepath.Join(t.TempDir(), "stamp")
	// -buildvcs=false: the commit must come from the stamp alone, as in a
	// worktree.
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", string(m[1]), "-o", bin, "./testdata/stamp")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	got := strings.TrimSpace(string(out))
	if Release(got) != version {
		t.Errorf("the stamped binary says %q; want version %q (make build's -X does not reach buildinfo.version)", got, version)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return // not a git checkout: no commit to stamp
	}
	if want := strings.TrimSpace(string(head))[:ShortCommitLen]; !strings.Contains(got, "+"+want) {
		t.Errorf("the stamped binary says %q; want commit %s (make build's -X does not reach buildinfo.commit)", got, want)
	}
}
