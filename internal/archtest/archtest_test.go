// Package archtest holds tests that enforce the architecture's import
// direction: which packages may depend on which. It has no non-test code.
package archtest

import (
	"os/exec"
	"slices"
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

// TestImportDirection checks, for every role of the tree, which packages
// it must not depend on. The rules have no exceptions: a package that
// needs one is in the wrong place.
func TestImportDirection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	const (
		agent       = module + "/agent"
		client      = module + "/client"
		control     = module + "/control"
		distributor = module + "/distributor"
		testenv     = module + "/testenv"
		etcd        = "go.etcd.io/etcd"
		etcdServer  = "go.etcd.io/etcd/server"
	)
	rules := []struct {
		pkgs      string // go list pattern
		forbidden []string
		why       string
	}{
		{module + "/proto/...", []string{module + "/"}, "proto imports nothing of ours"},
		{module + "/internal/...", []string{agent, distributor, control, client, testenv}, "internal packages are leaves shared by every role"},
		{client + "/...", []string{agent, distributor, control, testenv, etcdServer}, "client libraries never import the daemons"},
		{agent + "/...", []string{control, distributor, testenv, etcd}, "the agent does not link the control plane or etcd"},
		{distributor + "/...", []string{agent, testenv, etcdServer}, "distributors talk to control over gRPC only"},
		{control + "/...", []string{agent, distributor, testenv}, "control never links what runs in the zones"},
		{module + "/policy/...", []string{agent, distributor, control, client, testenv}, "the policy rule model is a leaf shared by control, hosts and clients"},
		{module + "/canary/...", []string{agent, distributor, control, client, testenv}, "canary analysis is pure statistics shared by control, agents and the CLI"},
		{module + "/preview/...", []string{agent, distributor, control, client, testenv, module + "/canary"}, "the policy preview model is a pure leaf shared by every role"},
	}
	for _, r := range rules {
		got := deps(t, r.pkgs)
		if len(got) == 0 {
			t.Fatalf("go list %s matched nothing: the test would check nothing", r.pkgs)
		}
		for pkg, ds := range got {
			if strings.HasSuffix(pkg, "/internal/archtest") {
				continue
			}
			for _, d := range ds {
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) && !strings.HasPrefix(d, pkg) {
						t.Errorf("%s depends on %s: %s", pkg, d, r.why)
					}
				}
			}
		}
	}
}

// TestImporters checks the packages whose doc comment names who may
// import them: no other package of the module links them (tests, which go
// list leaves out here, may).
func TestImporters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	rules := []struct {
		pkg     string
		allowed []string // besides pkg itself
		why     string
	}{
		{module + "/testenv/devtour", []string{module + "/cmd/lehr"}, `the tour is "lehr dev"'s alone`},
	}
	all := deps(t, module+"/...")
	for _, r := range rules {
		if _, ok := all[r.pkg]; !ok {
			t.Fatalf("%s is not in the module: the rule would check nothing", r.pkg)
		}
		for pkg, ds := range all {
			if pkg == r.pkg || slices.Contains(r.allowed, pkg) {
				continue
			}
			if slices.Contains(ds, r.pkg) {
				t.Errorf("%s depends on %s: %s", pkg, r.pkg, r.why)
			}
		}
	}
}
