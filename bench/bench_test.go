package bench

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/control/controltest"
)

// TestSmoke runs every scenario at the Smoke profile's minimal sizes, so the
// harness cannot rot: each must finish without error and produce rows with
// metrics. It checks no figure: timings are not assertions here.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real control planes, distributors and agents")
	}
	for _, s := range Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			run, err := RunScenarios(ctx, Options{
				Profile:  Smoke,
				Filter:   regexp.MustCompile("^" + regexp.QuoteMeta(s.Name) + "$"),
				WorkDir:  t.TempDir(),
				OutDir:   t.TempDir(),
				Logger:   controltest.Logger(t, 4), // warnings and errors
				Progress: &out,
				Command:  "go test ./bench -run TestSmoke",
			})
			if err != nil {
				t.Fatalf("RunScenarios: %v", err)
			}
			if len(run.Results) != 1 {
				t.Fatalf("got %d results, want 1", len(run.Results))
			}
			r := run.Results[0]
			if r.Error != "" {
				t.Fatalf("scenario %s failed: %s\n%s", s.Name, r.Error, out.String())
			}
			if len(r.Rows) == 0 {
				t.Fatalf("scenario %s produced no rows\n%s", s.Name, out.String())
			}
			for _, row := range r.Rows {
				if len(row.Metrics) == 0 {
					t.Errorf("row %s/%s has no metrics", row.System, row.Case)
				}
			}
			if !strings.Contains(out.String(), "== "+s.Name) {
				t.Errorf("table output lacks the scenario header:\n%s", out.String())
			}
			t.Logf("\n%s", out.String())
		})
	}
}

// TestMain lets the test binary act as the swarm child process that the
// fan-out and storm scenarios start.
func TestMain(m *testing.M) {
	if os.Getenv(SwarmEnv) == "1" {
		SwarmMain()
	}
	os.Exit(m.Run())
}
