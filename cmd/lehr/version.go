package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"lehr.dev/lehr/internal/buildinfo"
)

func runVersion(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr version", doc{
		usage:   "lehr version [-o json]",
		summary: "show this lehr's build: release version, commit, Go version",
		about: `Prints the build of this lehr binary: its release version (stamped by 'make
build' from the VERSION file; "devel" for a binary built without it, as by go
run), the commit it was built from and whether the tree had uncommitted
changes, the commit's time, and the Go version and platform. 'lehr --version'
prints the same; lehr-agent --version and lehr-bench --version print theirs.
The first line's build string (version+commit) is what agents and
distributors announce: 'lehr zones status ZONE' counts a zone's agents and
distributors per build, and 'lehr control status' shows each control
replica's (docs/operations.md, "Versions").`,
		examples: []string{
			"lehr version",
			"lehr version -o json | jq -r .commit",
			"lehr --version",
		},
	})
	output := fs.String("o", "text", "output `format`: text, or json (for scripts; docs/cli.md)")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	if *output != "text" && *output != "json" {
		return usageError(e, fs, "-o %q: want text or json", *output)
	}
	if e.checkOnly {
		return exitOK
	}
	if err := writeBuild(e.stdout, buildinfo.Get(), *output == "json"); err != nil {
		fmt.Fprintf(e.stderr, "lehr version: %v\n", err)
		return exitError
	}
	return exitOK
}

// buildJSON is "lehr version -o json": snake_case, fields at their zero
// value left out, times in RFC 3339 (docs/cli.md).
type buildJSON struct {
	// Build is the build string agents and distributors announce.
	Build      string `json:"build"`
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
}

// writeBuild prints b as "lehr version" does.
func writeBuild(w io.Writer, b buildinfo.Info, asJSON bool) error {
	if !asJSON {
		return b.WriteText(w, "lehr")
	}
	j := buildJSON{Build: b.String(), Version: b.Version, Commit: b.Commit, Modified: b.Modified, GoVersion: b.GoVersion, Platform: b.Platform}
	if !b.CommitTime.IsZero() {
		j.CommitTime = b.CommitTime.UTC().Format(time.RFC3339)
	}
	out, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}
