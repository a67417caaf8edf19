// Package buildinfo is what a Lehr binary knows of its own build: the
// release version "make build" stamps into it (from the VERSION file at
// the root of the tree), and the commit, commit time and uncommitted
// changes the Go toolchain records in every binary it builds from a git
// checkout (runtime/debug.ReadBuildInfo) — or make build stamps too, for
// a git worktree, where the toolchain records none — with the Go version
// and platform. It is the one source of "lehr version", of --version on every
// binary, of the lehr_build_info gauge on every daemon's /metrics, of the
// build agents announce in Hello and distributors in Welcome and in their
// zone reports, and of the build control replicas register.
//
// A binary built without the stamp (go run, go test, a plain go build)
// says so: its version is "devel", and its commit is the toolchain's, if
// it recorded one. Nothing records the time of the build itself, so two
// builds of one commit give the same binary (reproducible builds); the
// commit's time stands in for it.
//
// Imported by agent, agent/agentcmd, distributor, distributor/fanout,
// control, control/service, internal/metricshttp, cmd/lehr,
// cmd/lehr-bench and testenv/chaos.
package buildinfo

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// What "make build" stamps when linking, with -ldflags "-X
// lehr.dev/lehr/internal/buildinfo.version=0.1.0 -X …commit=… -X
// …commitTime=… -X …modified=true": the release version (the VERSION
// file), and the commit as git tells it, for the trees the Go toolchain
// cannot read it from itself — a git worktree, whose .git is a file
// (the toolchain looks for a .git directory), or a GOFLAGS of
// -buildvcs=false. Each is empty in a build without it.
var version, commit, commitTime, modified string

// Devel is the Version of a binary built without a release version.
const Devel = "devel"

// Unknown is what Lehr counts and shows for a component that announced no
// build (an agent older than builds being announced).
const Unknown = "unknown"

// Info describes one build of Lehr.
type Info struct {
	// Version is the release version: the one "make build" stamped (the
	// VERSION file, e.g. "0.1.0", or "0.2.0-dev" between releases), or the
	// module version "go install lehr.dev/lehr/cmd/lehr@v0.1.0" builds
	// (without its "v"), or Devel when the binary has neither.
	Version string
	// Commit is the full hex revision of the commit the binary was built
	// from (the toolchain's vcs.revision, else the one make build
	// stamped); empty when neither recorded one (go run, go test, a tree
	// outside git).
	Commit string
	// CommitTime is the commit's time (vcs.time, or stamped), in UTC; zero
	// when unknown.
	CommitTime time.Time
	// Modified reports that the tree had uncommitted changes
	// (vcs.modified, or stamped): the binary is not exactly Commit.
	Modified bool
	// GoVersion is the Go release that built the binary ("go1.26.8").
	GoVersion string
	// Platform is the binary's GOOS/GOARCH ("linux/amd64").
	Platform string
}

// Get returns this binary's build, read once.
func Get() Info { return get() }

var get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi, Stamp{Version: version, Commit: commit, CommitTime: commitTime, Modified: modified})
})

// Stamp is what a build was stamped with when linking (make build), as
// text: each empty when not stamped.
type Stamp struct {
	Version string
	// Commit is a full hex revision, CommitTime its time in RFC 3339, and
	// Modified "true" for a tree with uncommitted changes.
	Commit, CommitTime, Modified string
}

// pseudoVersion matches a Go pseudo-version (v0.0.0-20250301120000-
// 237c09b1a2b3, with an optional +dirty): what the toolchain records as
// the main module's version when it builds an untagged commit. It names a
// commit, not a release.
var pseudoVersion = regexp.MustCompile(`(^|[-.])\d{14}-[0-9a-f]{12}(\+|$)`)

// FromBuildInfo is the Info of a binary with build information bi (nil:
// none) and stamp. The stamped version wins over the module's; the
// toolchain's VCS information over the stamped commit (they agree when
// both are there). Tests use it; binaries use Get.
func FromBuildInfo(bi *debug.BuildInfo, stamp Stamp) Info {
	i := Info{Version: stamp.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		i.fromToolchain(bi)
	}
	i.Version = cmp.Or(i.Version, Devel)
	if i.Commit == "" && stamp.Commit != "" {
		i.Commit, i.Modified = stamp.Commit, stamp.Modified == "true"
		if t, err := time.Parse(time.RFC3339, stamp.CommitTime); err == nil {
			i.CommitTime = t.UTC()
		}
	}
	return i
}

// fromToolchain fills in what the Go toolchain recorded: the Go version,
// platform and VCS information, and the module's version if it is a
// release and none was stamped.
func (i *Info) fromToolchain(bi *debug.BuildInfo) {
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; i.Version == "" && v != "" && v != "(devel)" && !pseudoVersion.MatchString(v) {
		v, _, _ = strings.Cut(v, "+") // "+dirty" is Modified's
		i.Version = strings.TrimPrefix(v, "v")
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339Nano, s.Value); err == nil {
				i.CommitTime = t.UTC()
			}
		case "vcs.modified":
			i.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		i.Platform = goos + "/" + goarch
	}
}

// ShortCommitLen is how many hex digits of the commit a build string
// carries.
const ShortCommitLen = 12

// String is the build as one word, what agents announce in Hello,
// distributors in Welcome and their zone reports, and control replicas
// in their registration: the version, then — as semver build metadata —
// the commit's first ShortCommitLen hex digits and ".dirty" when Modified:
// "0.1.0+237c09b1a2b3", "devel+237c09b1a2b3.dirty"; the version alone
// when the commit is unknown ("devel"). Two binaries with the same string
// were built from the same commit as the same release.
func (i Info) String() string {
	if i.Commit == "" {
		return i.Version
	}
	s := i.Version + "+" + i.Commit[:min(ShortCommitLen, len(i.Commit))]
	if i.Modified {
		s += ".dirty"
	}
	return s
}

// Release returns the version part of a build string (what precedes its
// "+"): "0.1.0" of "0.1.0+237c09b1a2b3".
func Release(build string) string {
	v, _, _ := strings.Cut(build, "+")
	return v
}

// WriteText writes the build as "lehr version" and every binary's
// --version print it: a first line naming program and build, then the
// parts one per line.
func (i Info) WriteText(w io.Writer, program string) error {
	commit := i.Commit
	switch {
	case commit == "":
		commit = "unknown (built without version control information, as by go run or go test, or outside a git checkout)"
	case i.Modified:
		commit += " with uncommitted changes"
	}
	version := i.Version
	if version == Devel {
		version += " (built without a release version; make build stamps the VERSION file's)"
	}
	committed := "unknown"
	if !i.CommitTime.IsZero() {
		committed = i.CommitTime.Format(time.RFC3339)
	}
	_, err := fmt.Fprintf(w, "%s %s\n  version    %s\n  commit     %s\n  committed  %s\n  go         %s %s\n",
		program, i, version, commit, committed, i.GoVersion, i.Platform)
	return err
}
