// Package prombin finds the Prometheus server the tests that need a real
// one start: $LEHR_PROMETHEUS, the module's bin/prometheus (scripts/deps.sh
// extracts it there from Debian's prometheus package), or prometheus on
// $PATH.
//
// Only tests use it: control/evaluation's of canary checks written as
// queries, testenv/devcluster's of the monitoring check.
package prombin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Path returns Prometheus's path. Without one the test fails under CI
// (CI=true), which has it from scripts/deps.sh, and is skipped elsewhere.
func Path(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("LEHR_PROMETHEUS"); p != "" {
		return p
	}
	// bin/ beside the module's go.mod, from a test's package directory.
	if dir, err := os.Getwd(); err == nil {
		for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p := filepath.Join(dir, "bin", "prometheus"); isFile(p) {
					return p
				}
				break
			}
		}
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	msg := "no prometheus in bin/ or on $PATH (nor $LEHR_PROMETHEUS): run scripts/deps.sh, which extracts it from Debian's prometheus package"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
