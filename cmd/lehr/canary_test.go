package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lehr canary generate writes a fleet that lehr canary judge reads; the
// exit status carries the verdict and -o json a script can read.
func TestCanaryJudgeCommand(t *testing.T) {
	dir := t.TempDir()
	gen := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, append([]string{"canary", "generate"}, args...)...)
		if code != exitOK {
			t.Fatalf("generate %v: exit %d: %s", args, code, stderr)
		}
		f := filepath.Join(dir, strings.Join(args, "_")+".json")
		if err := os.WriteFile(f, []byte(stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	good, bad := gen("good", "--seed", "4"), gen("error-ratio-x5", "--canaries", "2")
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{[]string{"--input", good}, exitOK, "PASS (1 canary, 20 control host(s)): all 6 check(s) passed", ""},
		{[]string{"--input", bad, "--bake", "30"}, exitCanaryFail, `FAIL  error ratio: request_errors/requests went from`, ""},
		{[]string{"--input", good, "--bake", "60"}, exitCanaryNone, "NONE", ""},
		{[]string{"--input", filepath.Join(dir, "missing.json")}, exitError, "", "no such file"},
		{[]string{"--input", good, "--alpha", "0.7"}, exitError, "", "alpha: 0.7; want more than 0 and at most 0.5"},
		{[]string{}, exitUsage, "", "judge needs --input FILE"},
	}
	for _, tc := range tests {
		code, stdout, stderr := runCLI(t, nil, append([]string{"canary", "judge"}, tc.args...)...)
		if code != tc.wantCode || !strings.Contains(stdout, tc.wantStdout) || !strings.Contains(stderr, tc.wantStderr) {
			t.Errorf("lehr canary judge %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, stdout, stderr, tc.wantCode, tc.wantStdout, tc.wantStderr)
		}
	}
	code, stdout, _ := runCLI(t, nil, "canary", "judge", "--input", bad, "-o", "json")
	var res struct {
		Verdict string
		Checks  []struct {
			Name    string
			Verdict string
			P       *float64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != exitCanaryFail || res.Verdict != "FAIL" || len(res.Checks) == 0 || res.Checks[0].P == nil {
		t.Errorf("-o json: exit %d, %+v, %v from %s", code, res, err, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "canary", "generate", "sunny"); code != exitUsage || !strings.Contains(stderr, "want one of good, error-ratio-x5") {
		t.Errorf("generate sunny: exit %d, %s", code, stderr)
	}
}
