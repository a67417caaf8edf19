package main

import (
	"os/exec"
	"strings"
	"testing"
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
