package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scriptBed runs the packages' maintainer scripts as dpkg would, under
// DPKG_ROOT (a temporary directory standing for /, with systemd "running":
// run/systemd/system exists), with adduser, install, deb-systemd-helper,
// deb-systemd-invoke and systemctl replaced by stubs that record their
// arguments: nothing touches this machine.
type scriptBed struct {
	t          *testing.T
	root, log  string
	path       string
	lastOutput string
}

func newScriptBed(t *testing.T) *scriptBed {
	t.Helper()
	b := &scriptBed{t: t, root: t.TempDir()}
	stubs := t.TempDir()
	b.log = filepath.Join(stubs, "calls")
	for _, name := range []string{"adduser", "install", "deb-systemd-helper", "deb-systemd-invoke", "systemctl"} {
		stub := "#!/bin/sh\necho \"" + name + " $*\" >> " + b.log + "\n"
		if name == "install" { // make the directory, without the owner (no lehr user here)
			stub += "for a; do d=$a; done; mkdir -p \"$d\"\n"
		}
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b.path = stubs + string(os.PathListSeparator) + os.Getenv("PATH")
	b.mkdir("run/systemd/system")
	b.mkdir("etc/lehr/tls")
	return b
}

func (b *scriptBed) mkdir(p string) {
	if err := os.MkdirAll(filepath.Join(b.root, p), 0o755); err != nil {
		b.t.Fatal(err)
	}
}

func (b *scriptBed) write(p, text string) {
	if err := os.WriteFile(filepath.Join(b.root, p), []byte(text), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *scriptBed) exists(p string) bool {
	_, err := os.Stat(filepath.Join(b.root, p))
	return err == nil
}

// run runs package/scripts/SCRIPT with dpkg's arguments and returns the
// stubs' calls it made, one a line.
func (b *scriptBed) run(script string, args ...string) string {
	b.t.Helper()
	os.Remove(b.log)
	cmd := exec.Command("sh", append([]string{filepath.Join("package", "scripts", script)}, args...)...)
	cmd.Env = append(os.Environ(), "DPKG_ROOT="+b.root, "PATH="+b.path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	b.lastOutput = string(out)
	calls, _ := os.ReadFile(b.log)
	return string(calls)
}

func mustHave(t *testing.T, what, calls string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(calls, w) {
			t.Errorf("%s: no %q among the calls:\n%s", what, w, calls)
		}
	}
}

func mustNotHave(t *testing.T, what, calls string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(calls, w) {
			t.Errorf("%s: %q among the calls:\n%s", what, w, calls)
		}
	}
}

// TestAgentMaintainerScripts: install creates the user and data dir and
// enables the unit but starts it only once configured; an upgrade restarts
// it only if running; remove stops it and keeps its data; purge deletes it.
func TestAgentMaintainerScripts(t *testing.T) {
	b := newScriptBed(t)
	const unit = "lehr-agent.service"
	b.write("etc/lehr/agent.env", "#LEHR_ZONE=us-east-1a\n")

	calls := b.run("lehr-agent.postinst", "configure", "")
	mustHave(t, "install, unconfigured", calls, "adduser --system --group", "install -d -o lehr -g lehr -m 0710 "+b.root+"/var/lib/lehr-agent", "deb-systemd-helper enable "+unit)
	mustNotHave(t, "install, unconfigured", calls, "deb-systemd-invoke")
	if !strings.Contains(b.lastOutput, "enabled, not started") {
		t.Errorf("install, unconfigured: output %q, want it to say the agent is not started and why", b.lastOutput)
	}

	b.write("etc/lehr/agent.env", "LEHR_ZONE=us-east-1a\nLEHR_DISTRIBUTORS=d1:7410\n")
	calls = b.run("lehr-agent.postinst", "configure", "")
	mustNotHave(t, "install, no certificate", calls, "deb-systemd-invoke")
	b.write("etc/lehr/tls/host.crt", "cert")
	calls = b.run("lehr-agent.postinst", "configure", "")
	mustHave(t, "install, configured", calls, "deb-systemd-invoke start "+unit)

	calls = b.run("lehr-agent.postinst", "configure", "0.1.0-1")
	mustHave(t, "upgrade", calls, "deb-systemd-invoke try-restart "+unit)
	mustNotHave(t, "upgrade", calls, "deb-systemd-invoke start")

	mustNotHave(t, "prerm upgrade", b.run("lehr-agent.prerm", "upgrade", "0.2.0-1"), "stop")
	mustHave(t, "prerm remove", b.run("lehr-agent.prerm", "remove"), "deb-systemd-invoke stop "+unit)

	b.write("var/lib/lehr-agent/cache", "data")
	mustHave(t, "postrm remove", b.run("lehr-agent.postrm", "remove"), "deb-systemd-helper mask "+unit)
	if !b.exists("var/lib/lehr-agent/cache") {
		t.Error("postrm remove deleted the agent's data; want it kept until purge")
	}
	// Installed again after the remove: dpkg passes the last configured
	// version, as to an upgrade, but the daemon was stopped by the remove;
	// deb-systemd-helper's record of the mask postrm made tells them apart.
	b.mkdir("var/lib/systemd/deb-systemd-helper-masked")
	b.write("var/lib/systemd/deb-systemd-helper-masked/"+unit, "")
	calls = b.run("lehr-agent.postinst", "configure", "0.1.0-1")
	mustHave(t, "install after remove, configured", calls, "deb-systemd-helper unmask "+unit, "deb-systemd-invoke start "+unit)
	mustNotHave(t, "install after remove, configured", calls, "try-restart")
	os.Remove(filepath.Join(b.root, "var/lib/systemd/deb-systemd-helper-masked", unit))
	calls = b.run("lehr-agent.postrm", "purge")
	mustHave(t, "postrm purge", calls, "deb-systemd-helper purge "+unit, "deb-systemd-helper unmask "+unit)
	if b.exists("var/lib/lehr-agent") {
		t.Error("postrm purge kept /var/lib/lehr-agent")
	}
	mustNotHave(t, "postrm purge", calls, "deluser")
}

// TestLehrMaintainerScripts: the same for control and the distributor,
// each started only once configured.
func TestLehrMaintainerScripts(t *testing.T) {
	b := newScriptBed(t)
	b.write("etc/lehr/distributor.env", "#LEHR_ZONE=\n")

	calls := b.run("lehr.postinst", "configure", "")
	mustHave(t, "install, unconfigured", calls, "adduser --system --group", "install -d -o lehr -g lehr -m 0700 "+b.root+"/var/lib/lehr-control",
		"deb-systemd-helper enable lehr-control.service", "deb-systemd-helper enable lehr-distributor.service")
	mustNotHave(t, "install, unconfigured", calls, "deb-systemd-invoke")

	b.write("etc/lehr/tls/control.crt", "cert")
	calls = b.run("lehr.postinst", "configure", "")
	mustHave(t, "install, control configured", calls, "deb-systemd-invoke start lehr-control.service")
	mustNotHave(t, "install, control configured", calls, "deb-systemd-invoke start lehr-distributor.service")

	b.write("etc/lehr/distributor.env", "LEHR_ZONE=z\nLEHR_CONTROL=c:7400\n")
	b.write("etc/lehr/tls/distributor.crt", "cert")
	mustHave(t, "install, both configured", b.run("lehr.postinst", "configure", ""), "deb-systemd-invoke start lehr-distributor.service")

	calls = b.run("lehr.postinst", "configure", "0.1.0-1")
	mustHave(t, "upgrade", calls, "try-restart lehr-control.service", "try-restart lehr-distributor.service")
	mustNotHave(t, "upgrade", calls, "deb-systemd-invoke start")

	mustHave(t, "prerm remove", b.run("lehr.prerm", "remove"), "deb-systemd-invoke stop lehr-control.service lehr-distributor.service")
	b.write("var/lib/lehr-control/signing.key", "key")
	b.run("lehr.postrm", "remove")
	if !b.exists("var/lib/lehr-control/signing.key") {
		t.Error("postrm remove deleted control's data; want it kept until purge")
	}
	// Installed again after the remove (see TestAgentMaintainerScripts).
	b.mkdir("var/lib/systemd/deb-systemd-helper-masked")
	b.write("var/lib/systemd/deb-systemd-helper-masked/lehr-control.service", "")
	b.write("var/lib/systemd/deb-systemd-helper-masked/lehr-distributor.service", "")
	calls = b.run("lehr.postinst", "configure", "0.1.0-1")
	mustHave(t, "install after remove, configured", calls, "deb-systemd-invoke start lehr-control.service", "deb-systemd-invoke start lehr-distributor.service")
	mustNotHave(t, "install after remove, configured", calls, "try-restart")
	mustHave(t, "postrm purge", b.run("lehr.postrm", "purge"), "deb-systemd-helper purge lehr-control.service", "deb-systemd-helper purge lehr-distributor.service")
	if b.exists("var/lib/lehr-control") {
		t.Error("postrm purge kept /var/lib/lehr-control")
	}
}
