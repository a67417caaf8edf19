// Package deploy holds the systemd units; its test checks them with
// systemd-analyze against the real binaries and their flags.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// units maps each unit to the binary and subcommand its ExecStart runs.
var units = []struct {
	file, pkg, binary string
	sub               []string
}{
	{"lehr-control.service", "lehr.dev/lehr/cmd/lehr", "lehr", []string{"control"}},
	{"lehr-distributor.service", "lehr.dev/lehr/cmd/lehr", "lehr", []string{"distributor"}},
	{"lehr-agent.service", "lehr.dev/lehr/cmd/lehr-agent", "lehr-agent", nil},
}

func build(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

var flagRE = regexp.MustCompile(`\s(--[a-z][a-z0-9-]*)`)

// TestUnitsUseRealFlags fails when a unit passes a flag its binary does not
// define — the usual way units rot.
func TestUnitsUseRealFlags(t *testing.T) {
	bin := t.TempDir()
	for _, u := range units {
		t.Run(u.file, func(t *testing.T) {
			unit, err := os.ReadFile(u.file)
			if err != nil {
				t.Fatal(err)
			}
			exe := build(t, bin, u.pkg, u.binary)
			help, _ := exec.Command(exe, append(u.sub, "--help")...).CombinedOutput()
			flags := flagRE.FindAllStringSubmatch(execStart(string(unit)), -1)
			if len(flags) == 0 {
				t.Fatalf("%s: no flags found in ExecStart", u.file)
			}
			for _, f := range flags {
				name := strings.TrimPrefix(f[1], "--")
				if !regexp.MustCompile(`-{1,2}` + regexp.QuoteMeta(name) + `\b`).Match(help) {
					t.Errorf("%s passes %s, which `%s %s --help` does not list", u.file, f[1], u.binary, strings.Join(u.sub, " "))
				}
			}
		})
	}
}

// TestSystemdAnalyzeVerify runs systemd-analyze verify on each unit, with
// ExecStart pointed at a freshly built binary (verify insists that the
// executable exists).
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	bin := t.TempDir()
	dir := t.TempDir()
	for _, u := range units {
		unit, err := os.ReadFile(u.file)
		if err != nil {
			t.Fatal(err)
		}
		exe := build(t, bin, u.pkg, u.binary)
		text := strings.Replace(string(unit), "/usr/bin/"+u.binary+" ", exe+" ", 1)
		if text == string(unit) {
			t.Fatalf("%s: ExecStart does not run /usr/bin/%s, where the Debian packages install it", u.file, u.binary)
		}
		p := filepath.Join(dir, u.file)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", p).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u.file, err, out)
		}
	}
}

// execStart returns the ExecStart command line with continuations joined.
func execStart(unit string) string {
	unit = strings.ReplaceAll(unit, "\\\n", " ")
	for _, line := range strings.Split(unit, "\n") {
		if strings.HasPrefix(line, "ExecStart=") {
			return strings.TrimPrefix(line, "ExecStart=")
		}
	}
	return ""
}

// maxExposure is the highest exposure systemd-analyze security may give a
// unit ("OK" goes up to 4.9): the units were at 1.2 when this was written.
const maxExposure = 1.5

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// TestSystemdAnalyzeSecurity keeps the units' sandbox tight: every unit's
// exposure score stays at or below maxExposure.
func TestSystemdAnalyzeSecurity(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	var files []string
	for _, u := range units {
		files = append(files, u.file)
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := exec.Command(sa, "security", "--offline=true", "--no-pager", f).CombinedOutput()
		m := exposureRE.FindSubmatch(b)
		if m == nil {
			t.Errorf("systemd-analyze security --offline=true %s: %v, no exposure level in:\n%s", f, err, b)
			continue
		}
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("%s: exposure %.1f", f, score)
		if score > maxExposure {
			t.Errorf("%s: exposure %.1f, want at most %.1f\n%s", f, score, maxExposure, b)
		}
	}
}
