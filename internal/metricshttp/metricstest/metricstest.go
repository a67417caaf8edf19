// Package metricstest checks a /metrics exposition as Prometheus would,
// for the tests of Lehr's daemons: Lint in Go (the text format parser of
// github.com/prometheus/common/expfmt and client_golang's promlint, the
// linter behind "promtool check metrics"), and Promtool, the real
// promtool, which scripts/deps.sh installs into bin/ (from Debian's
// prometheus package) for scripts/test.sh.
//
// Only tests import it (never a daemon); it imports nothing of Lehr's.
package metricstest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Lint returns what is wrong with exposition, one problem a line: a parse
// error; a family without a TYPE line; a bucket labelled vmrange (a
// VictoriaMetrics histogram, which Prometheus's histogram_quantile cannot
// read) rather than le; and every problem promlint reports, as "promtool
// check metrics" would: a family without HELP text ("no help text"), a
// counter not named _total or a non-counter named so, a unit other than
// the base unit, and so on.
func Lint(exposition []byte) []string {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		return []string{"parse: " + err.Error()}
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		mf := fams[name]
		if mf.GetType() == dto.MetricType_UNTYPED {
			problems = append(problems, name+": no TYPE line (or untyped)")
		}
		for _, m := range mf.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "vmrange" }) {
				problems = append(problems, name+`: a vmrange bucket; a histogram has le buckets`)
				break
			}
		}
	}
	ps, err := promlint.New(bytes.NewReader(exposition)).Lint()
	if err != nil {
		return append(problems, "promlint: "+err.Error())
	}
	for _, p := range ps {
		problems = append(problems, p.Metric+": "+p.Text)
	}
	return problems
}

// PromtoolPath returns the promtool to run: $PROMTOOL if set, else
// promtool on $PATH, else bin/promtool of the module (where
// scripts/deps.sh puts it). It is an error if $PROMTOOL names no
// executable, or if none is found.
func PromtoolPath() (string, error) {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return exec.LookPath(p)
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return exec.LookPath(filepath.Join(dir, "bin", "promtool"))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no promtool: not on $PATH, $PROMTOOL unset, and no go.mod above the working directory")
		}
		dir = parent
	}
}

// Promtool runs "promtool check metrics" (promtool at path) on exposition
// and returns what it printed: nothing when it has nothing to report. The
// error is for a promtool that could not run, or that failed without a
// word.
func Promtool(path string, exposition []byte) (string, error) {
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && len(out) > 0) {
		return string(out), fmt.Errorf("%s check metrics: %w", path, err)
	}
	return string(out), nil
}

// Check fails t for every problem Lint finds in exposition (subtest
// "lint") and for anything promtool prints about it (subtest "promtool").
// Without a promtool the promtool subtest is skipped, except under CI (CI
// set), where scripts/test.sh installs one first: there it fails.
func Check(t *testing.T, exposition []byte) {
	t.Helper()
	t.Run("lint", func(t *testing.T) {
		if problems := Lint(exposition); len(problems) > 0 {
			t.Errorf("%d problems:\n%s\nexposition:\n%s", len(problems), strings.Join(problems, "\n"), exposition)
		}
	})
	t.Run("promtool", func(t *testing.T) {
		path, err := PromtoolPath()
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("promtool: %v (scripts/deps.sh installs it)", err)
			}
			t.Skipf("promtool: %v; scripts/deps.sh installs it", err)
		}
		out, err := Promtool(path, exposition)
		if err != nil {
			t.Fatal(err)
		}
		if out != "" {
			t.Errorf("promtool check metrics printed:\n%s\nexposition:\n%s", out, exposition)
		}
	})
}
