// Package archtest holds tests that enforce the architecture's import
// direction: which packages may depend on which. It has no non-test code.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "lehr.dev/lehr"

// deps lists every package pkg links, using the go command.
func deps(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps=false", "-f", `{{.ImportPath}}{{"\t"}}{{join .Deps " "}}`}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", pkgs, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", pkgs, err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, ds, _ := strings.Cut(line, "\t")
		m[path] = strings.Fields(ds)
	}
	return m
}

func TestImportDirection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	rules := []struct {
		pkgs      string // go list pattern
		forbidden []string
		why       string
		except    []string // package prefixes the rule does not apply to
	}{
		{module + "/proto/...", []string{module + "/"}, "proto imports nothing of ours", nil},
		// internal/devcluster is the exception by design: it is the
		// whole-system harness behind `lehr dev`, the end-to-end tests and
		// the benchmarks, so it starts every daemon.
		{module + "/internal/...", []string{module + "/agent", module + "/distributor", module + "/control", module + "/client"}, "internal packages are leaves shared by every role",
			[]string{module + "/internal/devcluster"}},
		{module + "/client/...", []string{module + "/agent", module + "/distributor", module + "/control", "go.etcd.io/etcd/server"}, "client libraries never import the daemons", nil},
		{module + "/agent/...", []string{module + "/control", module + "/distributor", "go.etcd.io/etcd"}, "the agent does not link the control plane or etcd", nil},
		{module + "/distributor/...", []string{module + "/agent", "go.etcd.io/etcd/server"}, "distributors talk to control over gRPC only", nil},
		{module + "/...", []string{module + "/internal/devcluster"}, "only commands, benchmarks and tests may start a whole cluster",
			[]string{module + "/cmd/", module + "/bench", module + "/internal/devcluster"}},
	}
	for _, r := range rules {
		got := deps(t, r.pkgs)
		if strings.Contains(r.pkgs, "/proto/") || strings.Contains(r.pkgs, "/internal/") {
			if len(got) == 0 {
				t.Fatalf("go list %s matched nothing: the test would check nothing", r.pkgs)
			}
		}
	nextPkg:
		for pkg, ds := range got {
			if strings.HasSuffix(pkg, "/internal/archtest") {
				continue
			}
			for _, e := range r.except {
				if strings.HasPrefix(pkg, e) {
					continue nextPkg
				}
			}
			for _, d := range ds {
				for _, f := range r.forbidden {
					if (d == f || strings.HasPrefix(d, f)) && !strings.HasPrefix(d, pkg) {
						t.Errorf("%s depends on %s: %s", pkg, d, r.why)
					}
				}
			}
		}
	}
}
