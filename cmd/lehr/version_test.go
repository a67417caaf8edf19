package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/internal/buildinfo"
)

// TestVersionGolden keeps what "lehr version" prints, text and JSON, for
// a release build from a tree with uncommitted changes and for a build
// that knows nothing (go run), in testdata/version.golden.
func TestVersionGolden(t *testing.T) {
	release := buildinfo.Info{Version: "0.1.0", Commit: "237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091",
		CommitTime: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	devel := buildinfo.Info{Version: buildinfo.Devel, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	var b strings.Builder
	for _, c := range []struct {
		name string
		i    buildinfo.Info
	}{{"a release build, uncommitted changes", release}, {"go run", devel}} {
		for _, j := range []bool{false, true} {
			b.WriteString("--- " + c.name)
			if j {
				b.WriteString(", -o json")
			}
			b.WriteString("\n")
			if err := writeBuild(&b, c.i, j); err != nil {
				t.Fatal(err)
			}
		}
	}
	golden(t, "version", []byte(b.String()))
}

// TestVersionOfThisBinary: "lehr version" and "lehr --version" print this
// binary's build; -o json reads back.
func TestVersionOfThisBinary(t *testing.T) {
	want := buildinfo.Get()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(t, nil, args...)
		if code != exitOK || !strings.HasPrefix(out, "lehr "+want.String()+"\n") || !strings.Contains(out, want.GoVersion) {
			t.Errorf("lehr %s: exit %d, printed %q (stderr %q); want lehr %s and the Go version", strings.Join(args, " "), code, out, errOut, want)
		}
	}
	for _, args := range [][]string{{"version", "-o", "json"}, {"-o", "json", "--version"}} {
		code, out, errOut := runCLI(t, nil, args...)
		var got buildJSON
		if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil {
			t.Fatalf("lehr %s: exit %d, %v\n%s%s", strings.Join(args, " "), code, err, out, errOut)
		}
		if got.Build != want.String() || got.Version != want.Version || got.Commit != want.Commit || got.GoVersion != want.GoVersion {
			t.Errorf("lehr %s = %+v, want the build %+v", strings.Join(args, " "), got, want)
		}
	}
}
