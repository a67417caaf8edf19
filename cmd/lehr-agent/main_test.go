package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"lehr.dev/lehr/internal/buildinfo"
)

// TestLeanBinary checks that the production agent links neither etcd nor
// the control plane nor the distributor.
func TestLeanBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned %d packages: the check would check nothing", len(deps))
	}
	forbidden := []string{"go.etcd.io/etcd", "lehr.dev/lehr/control", "lehr.dev/lehr/distributor"}
	var linked bool
	for _, d := range deps {
		if d == "lehr.dev/lehr/agent" {
			linked = true
		}
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("lehr-agent links %s", d)
			}
		}
	}
	if !linked {
		t.Errorf("lehr-agent does not link lehr.dev/lehr/agent: wrong package under test?")
	}
}

// lehr-agent --help lists its flags as lehr does, "--name VALUE", on
// standard output.
func TestHelpFlagStyle(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
	_, flags, ok := strings.Cut(stdout.String(), "\nFlags:\n")
	if !ok {
		t.Fatalf("--help has no Flags section:\n%s", stdout.String())
	}
	n := 0
	for _, l := range strings.Split(flags, "\n") {
		if strings.HasPrefix(l, "  -") {
			n++
			if !strings.HasPrefix(l, "  --") {
				t.Errorf("flag listed as %q, want --name", l)
			}
		}
	}
	if n < 10 {
		t.Errorf("--help lists %d flags, want every one:\n%s", n, flags)
	}
	for _, want := range []string{"\n  --zone string\n", "\n  --distributors string\n", "\n  --tls-ca string\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// lehr-agent --version prints its build on standard output, as lehr
// version does.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version"} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), []string{arg}, &stdout, &stderr)
		want := "lehr-agent " + buildinfo.Get().String() + "\n  version    "
		if code != 0 || stderr.Len() > 0 || !strings.HasPrefix(stdout.String(), want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0 and %q…", arg, code, stdout.String(), stderr.String(), want)
		}
	}
}
