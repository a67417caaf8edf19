// Package archtest holds tests that enforce the architecture's import
// direction: which packages may depend on which. It has no non-test code.
package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		{module + "/...", []string{module + "/internal/metricshttp/metricstest"}, "metricstest (promtool, promlint) is for tests"},
		{module + "/...", []string{module + "/internal/reflecttest"}, "reflecttest (a server reflection client) is for tests"},
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

// importedBy finds the "Imported by …." sentence (or clause, to a
// semicolon) of a package comment:
// a list of module-relative package paths ("control", "cmd/lehr",
// "control/..." for a subtree), separated by commas and "and", with
// "tests" for test files (which it does not check) and parenthesised
// notes ignored.
var importedBy = regexp.MustCompile(`(?s)Imported by (.*?[^.])[.;](\s|$)`)

// TestImportedByLines checks that every package comment saying who
// imports the package tells the truth, both ways: every package of the
// module that imports it (test files aside) is named, and every package
// named imports it — so a line goes stale neither when a new importer
// appears nor when an old one leaves.
func TestImportedByLines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dirs := map[string]string{}
	importers := map[string][]string{} // package → the module's packages importing it
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		dirs[pkg] = f[1]
		for _, imp := range strings.Fields(f[2]) {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				importers[rel] = append(importers[rel], pkg)
			}
		}
	}
	checked := 0
	for pkg, dir := range dirs {
		doc := packageDoc(t, dir)
		m := importedBy.FindStringSubmatch(doc)
		if m == nil {
			continue
		}
		checked++
		named, err := parseImporters(m[1])
		if err != nil {
			t.Errorf("%s: package comment %q: %v", pkg, m[0], err)
			continue
		}
		allowed := func(imp string) bool {
			for _, n := range named {
				if imp == n || (strings.HasSuffix(n, "/...") && (imp == strings.TrimSuffix(n, "/...") || strings.HasPrefix(imp, strings.TrimSuffix(n, "...")))) {
					return true
				}
			}
			return false
		}
		for _, imp := range importers[pkg] {
			if !allowed(imp) {
				t.Errorf("%s is imported by %s, which its package comment does not name (%q)", pkg, imp, m[0])
			}
		}
		for _, n := range named {
			if strings.HasSuffix(n, "/...") {
				continue
			}
			if _, ok := dirs[n]; !ok {
				t.Errorf("%s's package comment names %s, which is no package of the module (%q)", pkg, n, m[0])
			} else if !slices.Contains(importers[pkg], n) {
				t.Errorf("%s's package comment names %s, which does not import it (%q)", pkg, n, m[0])
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d package comments say who imports them: the test would check almost nothing", checked)
	}
}

// parseImporters splits the list of an "Imported by" sentence.
func parseImporters(list string) ([]string, error) {
	list = regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(list, "")
	var out []string
	for _, item := range regexp.MustCompile(`,|\band\b`).Split(list, -1) {
		item = strings.Join(strings.Fields(item), " ")
		item = strings.TrimPrefix(item, "package ")
		switch {
		case item == "" || item == "tests" || item == "its tests":
		case regexp.MustCompile(`^[a-z][a-z0-9-]*(/[a-z][a-z0-9-]*)*(/\.\.\.)?$`).MatchString(item):
			out = append(out, item)
		default:
			return nil, fmt.Errorf("%q is not a package path of the module (like control/rollout or control/...) or \"tests\"", item)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("names no package")
	}
	return out, nil
}

// packageDoc returns the package comment of the package in dir.
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			return f.Doc.Text()
		}
	}
	return ""
}
