package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry is one file of a package as dpkg-deb -c lists it.
type entry struct {
	mode, owner string
}

// wantContents lists every file of each package (directories aside) with
// its mode and owner: what docs/operations.md, "Install", promises. The
// directories owned by the lehr user (/var/lib/lehr-agent,
// /var/lib/lehr-control) are made by postinst, after it creates the user,
// and by the units' StateDirectory=.
var wantContents = map[string]map[string]entry{
	"lehr-agent": {
		"./usr/bin/lehr-agent":                           {"-rwxr-xr-x", "root/root"},
		"./lib/systemd/system/lehr-agent.service":        {"-rw-r--r--", "root/root"},
		"./etc/lehr/agent.env":                           {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr-agent/operations.md":       {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr-agent/files.md":            {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr-agent/copyright":           {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr-agent/changelog.Debian.gz": {"-rw-r--r--", "root/root"},
		"./usr/share/lintian/overrides/lehr-agent":       {"-rw-r--r--", "root/root"},
		"./etc/lehr/":                    {"drwxr-xr-x", "root/root"},
		"./etc/lehr/tls/":                {"drwxr-xr-x", "root/root"},
		"./usr/share/doc/lehr-agent/":    {"drwxr-xr-x", "root/root"},
		"./lib/systemd/system/":          {"drwxr-xr-x", "root/root"},
		"./usr/bin/":                     {"drwxr-xr-x", "root/root"},
		"./usr/share/lintian/overrides/": {"drwxr-xr-x", "root/root"},
		"./usr/share/doc/":               {"drwxr-xr-x", "root/root"},
		"./usr/share/lintian/":           {"drwxr-xr-x", "root/root"},
		"./usr/share/":                   {"drwxr-xr-x", "root/root"},
		"./usr/":                         {"drwxr-xr-x", "root/root"},
		"./lib/systemd/":                 {"drwxr-xr-x", "root/root"},
		"./lib/":                         {"drwxr-xr-x", "root/root"},
		"./etc/":                         {"drwxr-xr-x", "root/root"},
	},
	"lehr": {
		"./usr/bin/lehr": {"-rwxr-xr-x", "root/root"},
		"./lib/systemd/system/lehr-control.service":     {"-rw-r--r--", "root/root"},
		"./lib/systemd/system/lehr-distributor.service": {"-rw-r--r--", "root/root"},
		"./etc/lehr/control.env":                        {"-rw-r--r--", "root/root"},
		"./etc/lehr/distributor.env":                    {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/operations.md":            {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/design.md":                {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/cli.md":                   {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/wire.md":                  {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/files.md":                 {"-rw-r--r--", "root/root"},
		"./usr/share/doc/lehr/copyright":                {"-rw-r--r--", "root/root"},
		"./usr/share/lehr/prometheus/lehr-alerts.yaml":  {"-rw-r--r--", "root/root"},
		"./usr/share/lehr/grafana/lehr.json":            {"-rw-r--r--", "root/root"},
		"./usr/share/lehr/":                             {"drwxr-xr-x", "root/root"},
		"./usr/share/lehr/prometheus/":                  {"drwxr-xr-x", "root/root"},
		"./usr/share/lehr/grafana/":                     {"drwxr-xr-x", "root/root"},
		"./usr/share/doc/lehr/changelog.Debian.gz":      {"-rw-r--r--", "root/root"},
		"./usr/share/lintian/overrides/lehr":            {"-rw-r--r--", "root/root"},
		"./etc/lehr/":                                   {"drwxr-xr-x", "root/root"},
		"./etc/lehr/tls/":                               {"drwxr-xr-x", "root/root"},
		"./usr/share/doc/lehr/":                         {"drwxr-xr-x", "root/root"},
		"./lib/systemd/system/":                         {"drwxr-xr-x", "root/root"},
		"./usr/bin/":                                    {"drwxr-xr-x", "root/root"},
		"./usr/share/lintian/overrides/":                {"drwxr-xr-x", "root/root"},
		"./usr/share/doc/":                              {"drwxr-xr-x", "root/root"},
		"./usr/share/lintian/":                          {"drwxr-xr-x", "root/root"},
		"./usr/share/":                                  {"drwxr-xr-x", "root/root"},
		"./usr/":                                        {"drwxr-xr-x", "root/root"},
		"./lib/systemd/":                                {"drwxr-xr-x", "root/root"},
		"./lib/":                                        {"drwxr-xr-x", "root/root"},
		"./etc/":                                        {"drwxr-xr-x", "root/root"},
	},
}

// wantConffiles are the files dpkg keeps an administrator's edits of.
var wantConffiles = map[string]string{
	"lehr-agent": "/etc/lehr/agent.env",
	"lehr":       "/etc/lehr/control.env\n/etc/lehr/distributor.env",
}

// needTool returns the path of a Debian tool, skipping the test without it
// (failing it under CI, where scripts/deps.sh installs it).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (scripts/deps.sh installs it)", name)
		}
		t.Skipf("%s not installed (scripts/deps.sh installs it)", name)
	}
	return p
}

// TestPackages builds the Debian packages as `make package` does and
// checks them with Debian's own tools: lintian finds no error or warning
// (deploy/package/lintian-overrides explains each override), dpkg-deb
// lists exactly the files, modes and conffiles expected, the maintainer
// scripts parse, and the binaries of the extracted packages run and name
// the commit they were built from. Nothing is installed on this machine.
func TestPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both packages (about a minute of CPU)")
	}
	dpkgDeb := needTool(t, "dpkg-deb")
	out := t.TempDir()
	if b, err := exec.Command("make", "-C", "..", "package", "PKGDIR="+out).CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, b)
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	debs := map[string]string{}
	for pkg := range wantContents {
		m, _ := filepath.Glob(filepath.Join(out, pkg+"_*.deb"))
		if len(m) != 1 {
			t.Fatalf("make package made %v for %s, want one .deb", m, pkg)
		}
		debs[pkg] = m[0]
	}

	t.Run("lintian", func(t *testing.T) {
		lintian := needTool(t, "lintian")
		// Errors and warnings fail; info tags (-I) are logged. Overrides
		// come from the packages' /usr/share/lintian/overrides.
		b, _ := exec.Command(lintian, "-I", debs["lehr"], debs["lehr-agent"]).CombinedOutput()
		t.Logf("lintian -I:\n%s", b)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
				t.Errorf("lintian: %s", line)
			}
		}
	})

	for pkg, deb := range debs {
		t.Run(pkg, func(t *testing.T) {
			b, err := exec.Command(dpkgDeb, "-c", deb).Output()
			if err != nil {
				t.Fatalf("dpkg-deb -c %s: %v", deb, err)
			}
			got := map[string]entry{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Fields(line) // mode owner size date time path
				if len(f) < 6 {
					t.Fatalf("dpkg-deb -c: unexpected line %q", line)
				}
				got[f[5]] = entry{f[0], f[1]}
			}
			if diff := cmp.Diff(wantContents[pkg], got, cmp.AllowUnexported(entry{})); diff != "" {
				t.Errorf("dpkg-deb -c %s (-want +got):\n%s", filepath.Base(deb), diff)
			}

			ctl := t.TempDir()
			if b, err := exec.Command(dpkgDeb, "-e", deb, ctl).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb -e: %v\n%s", err, b)
			}
			conf, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
			if got := strings.TrimSpace(string(conf)); got != wantConffiles[pkg] {
				t.Errorf("conffiles of %s: got %q, want %q", pkg, got, wantConffiles[pkg])
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				p := filepath.Join(ctl, s)
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("%s %s: %v; want an executable script (0755)", pkg, s, err)
					continue
				}
				if b, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
					t.Errorf("sh -n %s of %s: %v\n%s", s, pkg, err, b)
				}
			}

			root := t.TempDir()
			if b, err := exec.Command(dpkgDeb, "-x", deb, root).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb -x: %v\n%s", err, b)
			}
			exe := filepath.Join(root, "usr", "bin", pkg)
			b, err = exec.Command(exe, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(b), strings.TrimSpace(string(commit))) {
				t.Errorf("%s --version: %v\n%s\nwant the commit %s", exe, err, b, commit)
			}
			t.Logf("%s --version:\n%s", pkg, b)
		})
	}
}
