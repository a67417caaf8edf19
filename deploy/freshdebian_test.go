package deploy

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestFreshDebian installs the packages on a fresh Debian and checks what
// docs/operations.md, "Install", promises, with scripts/fresh-debian.sh
// (make fresh-debian): make package, a minimal Debian 12 from debootstrap
// booted with systemd-nspawn, dpkg -i, the units enabled and not started
// unconfigured, --version naming the commit, control, a distributor and
// the agent configured and started with systemctl and a namespace carried
// to the agent, systemd-analyze security, a reboot, an upgrade in place,
// remove, install again, purge. Each of the script's FAIL lines fails the
// test. Only with LEHR_FRESH_DEBIAN=1, as root (not in make test: the first
// run downloads about 50 MB, and a run takes minutes):
//
//	LEHR_FRESH_DEBIAN=1 go test ./deploy -run TestFreshDebian -timeout 30m -v
func TestFreshDebian(t *testing.T) {
	if os.Getenv("LEHR_FRESH_DEBIAN") == "" {
		t.Skip("set LEHR_FRESH_DEBIAN=1 to install the packages on a fresh Debian (scripts/fresh-debian.sh; as root, minutes)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("LEHR_FRESH_DEBIAN=1 needs root: debootstrap and systemd-nspawn")
	}
	cmd := exec.Command("../scripts/fresh-debian.sh")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one ordered stream
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if strings.HasPrefix(line, "FAIL ") {
			failed++
			t.Errorf("fresh Debian: %s", strings.TrimPrefix(line, "FAIL "))
		}
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil && failed == 0 {
		t.Fatalf("scripts/fresh-debian.sh: %v, without a FAIL line (see its output above)", err)
	}
}
