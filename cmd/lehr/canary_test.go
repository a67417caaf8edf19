package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
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

// An evaluation's id resolves to its console page: its uri is control's
// --console-url and the page's path, and lehr canary show takes it in
// place of the id.
func TestCanaryEvaluationURI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{ConsoleURL: "https://lehr.example.com:8443/ops/"})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	if code, _, errOut := c.run(`{"rps": 100}`, "push", "pay/limits", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s", code, errOut)
	}
	ctx := t.Context()
	ev, err := srv.Client.Evaluate(ctx, &lehrpb.EvaluateRequest{Name: "manual", Namespace: "pay/limits", Version: 1,
		Trials: []*lehrpb.CanaryTrial{{Zone: "zone-a", CanaryHosts: []string{"h1"}}}, ChangeTime: timestamppb.Now(), Bake: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	const want = "https://lehr.example.com:8443/ops/console/canary/pay/limits@1/manual"
	if ev.GetUri() != want {
		t.Errorf("Evaluate's uri = %q, want %q", ev.GetUri(), want)
	}
	out := c.ok("canary", "show", want)
	mustContain(t, "lehr canary show URI", out, "evaluation pay/limits@1/manual", "console "+want)
	var got struct{ ID, URI string }
	if err := json.Unmarshal([]byte(c.ok("canary", "list", "pay/limits", "-o", "json")), &struct {
		Evaluations []*struct{ ID, URI string } `json:"evaluations"`
	}{Evaluations: []*struct{ ID, URI string }{&got}}); err != nil || got.URI != want {
		t.Errorf("lehr canary list -o json: %+v, %v; want uri %q", got, err, want)
	}
	if code, _, stderr := c.run("", "canary", "show", "https://lehr.example.com/console/canary/"); code != exitUsage || !strings.Contains(stderr, "names no evaluation") {
		t.Errorf("lehr canary show of a URI naming nothing: exit %d, %s; want usage saying it names no evaluation", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "control", "--console-url", "lehr.example.com", "--data-dir", t.TempDir()); code == exitOK || !strings.Contains(stderr, "want http(s)://HOST[:PORT]") {
		t.Errorf("lehr control --console-url lehr.example.com: exit %d, %s; want it refused saying what is wanted", code, stderr)
	}
}
