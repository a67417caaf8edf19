// Package buildinfo is what a Lehr binary knows of its own build: the
// release version "make build" stamps into it (from the VERSION file at
// the root of the tree), and the commit, commit time and uncommitted
// changes the Go toolchain records in every binary it builds from a git
// checkout (runtime/debug.ReadBuildInfo), with the Go version and
// platform. It is the one source of "lehr version", of --version on every
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
// control, control/service, internal/metricshttp, cmd/lehr and
// cmd/lehr-bench.
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

// version is the release version, set when linking:
//
//	go build -ldflags "-X lehr.dev/lehr/internal/buildinfo.version=$(cat VERSION)"
//
// as "make build" does. Empty in a build without it.
var version string

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
	// from (vcs.revision); empty when the toolchain recorded none (go run,
	// go test, a tree outside git, -buildvcs=false).
	Commit string
	// CommitTime is the commit's time (vcs.time), in UTC; zero when
	// unknown.
	CommitTime time.Time
	// Modified reports that the tree had uncommitted changes
	// (vcs.modified): the binary is not exactly Commit.
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
	return FromBuildInfo(bi, version)
})

// pseudoVersion matches a Go pseudo-version (v0.0.0-20250301120000-
// 237c09b1a2b3, with an optional +dirty): what the toolchain records as
// the main module's version when it builds an untagged commit. It names a
// commit, not a release.
var pseudoVersion = regexp.MustCompile(`(^|[-.])\d{14}-[0-9a-f]{12}(\+|$)`)

// FromBuildInfo is the Info of a binary with build information bi (nil:
// none) and the release version stamped (empty: none). Tests use it;
// binaries use Get.
func FromBuildInfo(bi *debug.BuildInfo, stamped string) Info {
	i := Info{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		i.Version = cmp.Or(i.Version, Devel)
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; i.Version == "" && v != "" && v != "(devel)" && !pseudoVersion.MatchString(v) {
		v, _, _ = strings.Cut(v, "+") // "+dirty" is Modified's
		i.Version = strings.TrimPrefix(v, "v")
	}
	i.Version = cmp.Or(i.Version, Devel)
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
	return i
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
		commit = "unknown (built without version control information: go run, go test or -buildvcs=false)"
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
