package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// cli runs lehr commands in-process against one control address.
type cli struct {
	t    *testing.T
	addr string
	// identified: control knows who the caller is (its socket, a client
	// certificate), so it asserts no author; otherwise it runs as
	// "--as tester", for a control in dev mode.
	identified bool
}

// run runs lehr args with the client flags appended and stdin as input.
func (c cli) run(stdin string, args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append(args, "--control", c.addr)
	if !c.identified {
		args = append(args, "--as", "tester")
	}
	code = run(ctx, args, e)
	return code, out.String(), errb.String()
}

// ok runs lehr and fails the test unless it exits 0.
func (c cli) ok(args ...string) string {
	c.t.Helper()
	code, stdout, stderr := c.run("", args...)
	if code != exitOK {
		c.t.Fatalf("lehr %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// fails runs lehr, expects exit 1 and returns stderr.
func (c cli) fails(args ...string) string {
	c.t.Helper()
	code, stdout, stderr := c.run("", args...)
	if code != exitError {
		c.t.Fatalf("lehr %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, exitError, stdout, stderr)
	}
	return stderr
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func TestCLIRoundTrip(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	dir := t.TempDir()
	app := filepath.Join(dir, "app.json")
	if err := os.WriteFile(app, []byte(`{"greeting": "hello", "limits/rps": 100, "features": {"dark_mode": true}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	mustContain(t, "domain create", c.ok("domain", "create", "demo", "--description", "the demo", "--publisher", "tester"),
		"created domain demo", "publishers          tester")
	mustContain(t, "domain list", c.ok("domain", "list"), "demo", "the demo")
	mustContain(t, "push", c.ok("push", "demo/app", "--file", app, "--message", "first cut"),
		"published demo/app version 1 (snapshot)", "3 properties")
	mustContain(t, "get", c.ok("get", "demo/app"),
		"demo/app version 1\n", "author    tester\n", "message   first cut\n",
		"features  [application/json]\n    {\"dark_mode\":true}\n",
		"greeting  [text/plain]\n    hello\n",
		"limits/rps  [application/json]\n    100\n")
	mustContain(t, "patch", c.ok("patch", "demo/app", "--base", "1", "--set-json", "limits/rps=250", "--delete", "greeting", "--message", "more headroom"),
		"patched demo/app version 2 (patch of 1)")
	mustContain(t, "diff", c.ok("diff", "demo/app", "1", "2"),
		"version 1 → 2, 2 changed keys", "- greeting  [text/plain]\n    hello\n",
		"~ limits/rps  [application/json]\n  old:\n    100\n  new:\n    250\n")
	mustContain(t, "rollback", c.ok("rollback", "demo/app", "--to", "1", "--message", "back out"),
		"rolled back demo/app version 3 (rollback to 1)")
	hist := c.ok("history", "demo/app")
	if !regexp.MustCompile(`(?m)^3 .* tester +rollback to 1 .* back out$`).MatchString(hist) ||
		!regexp.MustCompile(`(?m)^2 .* tester +patch of 1 .* more headroom$`).MatchString(hist) ||
		!regexp.MustCompile(`(?m)^1 .* tester +snapshot .* first cut$`).MatchString(hist) {
		t.Errorf("history lacks versions 3, 2, 1 with author, source and message:\n%s", hist)
	}
	if got := c.ok("get", "demo/app", "--key", "limits/rps", "--raw"); got != "100" {
		t.Errorf("get --raw = %q, want %q (version 3 has version 1's content)", got, "100")
	}
	if got := c.ok("get", "demo/app", "--version", "2", "--key", "limits/rps", "--raw"); got != "250" {
		t.Errorf("get --version 2 --raw = %q, want %q", got, "250")
	}

	// Standard input, YAML.
	code, stdout, stderr := c.run("motd: maintenance at 18:00\nlimits:\n  rps: 5\n", "push", "demo/banner", "--file", "-")
	if code != exitOK {
		t.Fatalf("push --file - : exit %d\n%s%s", code, stdout, stderr)
	}
	mustContain(t, "get banner", c.ok("get", "demo/banner"), "motd  [text/plain]\n    maintenance at 18:00\n", "limits  [application/json]\n    {\"rps\":5}\n")

	// -o json is one JSON object per command (docs/cli.md).
	var gr lehrpb.GetResponse
	if err := parseJSON(c.ok("get", "demo/app", "-o", "json"), &gr); err != nil {
		t.Fatalf("get -o json does not parse: %v", err)
	}
	if gr.GetVersion().GetSeq() != 3 || len(gr.GetProperties()) != 3 || gr.GetVersion().GetRollbackOf() != 1 {
		t.Errorf("get -o json = %v, want version 3 (rollback to 1) with 3 properties", &gr)
	}
	var hr lehrpb.HistoryResponse
	if err := parseJSON(c.ok("history", "demo/app", "-o", "json", "--limit", "2"), &hr); err != nil {
		t.Fatalf("history -o json does not parse: %v", err)
	}
	if len(hr.GetVersions()) != 2 || hr.GetVersions()[0].GetSeq() != 3 {
		t.Errorf("history -o json --limit 2 = %v, want versions 3 and 2", &hr)
	}
	var dr lehrpb.DiffResponse
	if err := parseJSON(c.ok("diff", "demo/app", "2", "3", "-o", "json"), &dr); err != nil {
		t.Fatalf("diff -o json does not parse: %v", err)
	}
	if len(dr.GetChanges()) != 2 || dr.GetChanges()[0].GetKind() != lehrpb.PropertyChange_KIND_ADDED {
		t.Errorf("diff -o json = %v, want greeting added and limits/rps modified", &dr)
	}
	var pr lehrpb.PatchResponse
	if err := parseJSON(c.ok("patch", "demo/app", "--base", "3", "--set", "greeting=hi", "-o", "json"), &pr); err != nil {
		t.Fatalf("patch -o json does not parse: %v", err)
	}
	if pr.GetVersion().GetSeq() != 4 {
		t.Errorf("patch -o json = %v, want version 4", &pr)
	}

	// Zones and goals.
	mustContain(t, "zones create", c.ok("zones", "create", "zone-a"), "created zone zone-a")
	mustContain(t, "zones list", c.ok("zones", "list"), "zone-a")
	mustContain(t, "goals", c.ok("goals", "zone-a"), "demo/app     4", "demo/banner  1")
}

func TestCLIRejections(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "demo")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c.ok("push", "demo/app", "--file", write("v1.json", `{"a": 1}`))
	c.ok("patch", "demo/app", "--base", "1", "--set", "a=2")

	// A stale base names the latest version and how to retry.
	mustContain(t, "stale patch", c.fails("patch", "demo/app", "--base", "1", "--set", "a=3"),
		"error: STALE_VERSION (FailedPrecondition)", "field: base_version",
		"latest version is 2; re-read with `lehr get demo/app` and retry with --base 2")
	mustContain(t, "stale push", c.fails("push", "demo/app", "--file", write("v2.json", `{"a": 4}`), "--expect-version", "1"),
		"latest version is 2", "--expect-version 2")

	// Bad keys and values name the field, and the key behind an index.
	mustContain(t, "bad key", c.fails("push", "demo/app", "--file", write("bad.json", `{"ok": 1, "../etc/passwd": "x"}`)),
		"error: INVALID_NAME (InvalidArgument)", `field: properties[0].key (key "../etc/passwd")`)
	big := `{"big": "` + strings.Repeat("x", 600<<10) + `"}`
	mustContain(t, "big value", c.fails("push", "demo/app", "--file", write("big.json", big)),
		"VALUE_TOO_LARGE", `field: properties[0].value (key "big")`, "limit: 524288 bytes")
	mustContain(t, "json content", c.fails("patch", "demo/app", "--base", "2", "--set-file", "cfg=@"+write("cfg.json", `{"a": `)),
		"INVALID_CONTENT", `field: set[0].value (key "cfg")`)
	mustContain(t, "unknown domain", c.fails("push", "nosuch/app", "--file", write("v3.json", `{"a": 1}`)),
		"NotFound", "lehr domain create")
	mustContain(t, "unknown version", c.fails("get", "demo/app", "--version", "9"), "NotFound", "field:")
	mustContain(t, "delete missing key", c.fails("patch", "demo/app", "--base", "2", "--delete", "nope"),
		"MISSING_KEY", `field: delete[0] (key "nope")`)
	mustContain(t, "empty patch", c.fails("patch", "demo/app", "--base", "2"), "EMPTY_PATCH")
	mustContain(t, "bad file", c.fails("push", "demo/app", "--file", write("list.yaml", "- a\n")),
		"list.yaml: top level is a list")

	// Nothing above was stored.
	if got := c.ok("get", "demo/app", "--key", "a", "--raw"); got != "2" {
		t.Errorf("after rejections a = %q, want %q", got, "2")
	}
	var hr lehrpb.HistoryResponse
	if err := parseJSON(c.ok("history", "demo/app", "-o", "json"), &hr); err != nil {
		t.Fatalf("history -o json does not parse: %v", err)
	}
	if len(hr.GetVersions()) != 2 || hr.GetVersions()[0].GetSeq() != 2 {
		t.Errorf("after rejections history = %v, want versions 2 and 1 only", &hr)
	}
	if h := c.ok("history", "demo/app"); strings.Count(h, "\n") != 3 {
		t.Errorf("history has %d lines, want a header and 2 versions:\n%s", strings.Count(h, "\n"), h)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDev(t *testing.T) {
	var stdout, stderr syncBuffer
	ready := make(chan string, 1)
	e := &env{
		stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		getenv: func(string) string { return "" },
		ready:  func(addr string) { ready <- addr },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, e)
	}()
	var addr string
	select {
	case addr = <-ready:
	case code := <-done:
		t.Fatalf("lehr dev exited %d before it was ready\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	case <-time.After(180 * time.Second):
		t.Fatalf("lehr dev not ready after 3 minutes\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	out := stdout.String()
	mustContain(t, "lehr dev output", out,
		"==> control serving on "+addr,
		"==> zone-a: distributor zone-a-dist-0 on udp 127.0.0.1:",
		"==> zone-b: agent zone-b-host-0, socket ",
		"==> zone-a: demo service subscribed to demo/app through agent zone-a-host-0",
		"==> zone-b: demo service subscribed to demo/app through agent zone-b-host-3",
		"$ lehr domain create demo",
		"$ lehr push demo/app --file ",
		"published demo/app version 1",
		"==> demo/app version 1 landed on every host",
		"$ lehr get demo/app --control "+addr+"\ndemo/app version 1",
		"$ lehr patch demo/app --base 1 --set-json limits/rps=250",
		"patched demo/app version 2",
		"$ lehr rollout wait demo/app",
		"succeeded: every zone holds version 2",
		"==> demo/app version 2 landed on every host",
		"$ lehr canary show demo/app@2/stage-1",
		"verdict PASS at look 4 of 4",
		"$ lehr patch demo/app --base 2 --set-json demo.error_ratio=0.2",
		"failed: canary analysis demo/app@3/stage-1: FAIL at look ",
		"$ lehr canary show demo/app@3/stage-1",
		"FAIL  error ratio: request_errors/requests went from ",
		"rolled back  -    version 4 republishes version 2's content in every zone",
		"==> demo/app version 4 landed on every host",
		"$ lehr push demo/access --kind policy --file ",
		"$ lehr policy experiment create demo/access no-contractors --file ",
		"$ lehr policy experiment start demo/access no-contractors",
		`ACTIVE since`,
		"$ lehr policy experiment counts demo/access no-contractors",
		"(all)   v1",
		"==> the good change in the console: its rollout http://",
		"/console/rollouts/demo/app/2, its canary evaluation with a plot per check http://",
		"==> the bad change in the console: its rollout http://",
		"/console/canary/demo/app@3/stage-1",
		"==> the same counts, with the gate of the commit below, in the console: http://",
		"/console/experiments/demo/access?min_evaluations=",
		"committed experiment no-contractors: demo/access is now at version 2",
		"~ limits/rps  [application/json]\n  old:\n    100\n  new:\n    250\n",
		"$ lehr history demo/app",
		"$ lehr zones status zone-a",
		"zone zone-a: 1 distributor reporting, 4 agents connected",
		"==> ready. The consumers above keep printing every change",
		"lehr push demo/app --control "+addr+" --file my.json",
		"lehr patch demo/app --control "+addr+" --base 4 --set greeting=hi",
		"export LEHR_CONTROL="+addr)

	// Every console page it points to loads, and the bad change's
	// evaluation says why it failed (issue 32: a newcomer follows the
	// demo in the browser).
	pages := 0
	for _, u := range regexp.MustCompile(`http://[0-9.:]+/console/[^ ,\n]*`).FindAllString(out, -1) {
		pages++
		resp, err := http.Get(u)
		if err != nil {
			t.Errorf("GET %s: %v", u, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", u, resp.Status)
		}
		if strings.Contains(u, "/canary/demo/app@3/") && !strings.Contains(string(body), "FAIL") {
			t.Errorf("the bad change's evaluation page %s does not say FAIL:\n%.2000s", u, body)
		}
	}
	if pages < 6 {
		t.Errorf("lehr dev printed %d console URLs; want the console's, two per change and the experiments'", pages)
	}

	// Every command it printed reaches this control as printed (issue 31:
	// they talked to whatever listened on 127.0.0.1:7400): lehr accepts
	// it, and it names the address (but the agent's watch).
	printed := 0
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, "$ "))
		if !strings.HasPrefix(l, "lehr ") {
			continue
		}
		printed++
		l, _, _ = strings.Cut(l, "  (")
		if !strings.Contains(l, "--control "+addr) && !strings.HasPrefix(l, "lehr watch ") {
			t.Errorf("lehr dev printed %q, which does not name its control at %s", l, addr)
		}
		if msg := checkCommandLine(t, l); msg != "" {
			t.Errorf("lehr dev printed %q, which lehr does not accept: %s", l, msg)
		}
	}
	if printed < 20 {
		t.Errorf("lehr dev printed %d lehr commands; want the tour's and the hints'", printed)
	}
	// Its HTTP/JSON hint works as printed.
	curls := 0
	for _, l := range strings.Split(out, "\n") {
		l, _, _ = strings.Cut(strings.TrimSpace(l), "  (")
		if !strings.HasPrefix(l, "curl ") {
			continue
		}
		curls++
		got, err := exec.Command("bash", "-c", l).Output()
		var answer struct{ Version struct{ Namespace string } }
		if err != nil || json.Unmarshal(got, &answer) != nil || answer.Version.Namespace != "demo/app" {
			t.Errorf("lehr dev printed %q, which answered %s (%v); want demo/app's latest version", l, got, err)
		}
	}
	if curls != 1 {
		t.Errorf("lehr dev printed %d curl commands; want its HTTP/JSON hint", curls)
	}

	// Every host's service called back for the publish (every key new)
	// and for the patch (exactly the changed key), before it said so; the
	// bad version reached the canary hosts only, and every host ends on
	// the rollback.
	r := regexp.MustCompile(`version 3 reached only the canary hosts \((\S+), (\S+)\)`).FindStringSubmatch(out)
	if r == nil {
		t.Fatalf("no canary hosts named for the bad version:\n%s", out)
	}
	for _, h := range []string{"zone-a-host-0", "zone-a-host-1", "zone-a-host-2", "zone-a-host-3", "zone-b-host-0", "zone-b-host-1", "zone-b-host-2", "zone-b-host-3"} {
		prefix := "    [" + h[:6] + " service on " + h + "] callback: demo/app "
		mustContain(t, h+" callbacks", out,
			prefix+"version 1 (was 0), 7 changed keys\n        + demo.error_ratio = 0.01\n        + demo.latency_ms = 20\n        + features = {\"dark_mode\":false,\"beta_search\":true}\n        + greeting = hello from lehr\n",
			prefix+"version 2 (was 1), 1 changed key\n        ~ limits/rps: 100 → 250\n")
		landed := strings.Index(out, "==> demo/app version 2 landed")
		if cb := strings.Index(out, prefix+"version 2"); cb < 0 || cb > landed {
			t.Errorf("%s callback for version 2 at offset %d, after the landed line at %d", h, cb, landed)
		}
		// Only the canary hosts ever take the bad version 3.
		canary := h == r[1] || h == r[2]
		if strings.Contains(out, prefix+"version 3") && !canary {
			t.Errorf("%s got the bad version 3, but the canaries are %s and %s", h, r[1], r[2])
		}
		if !strings.Contains(out, prefix+"version 4 (was ") || !strings.Contains(out, "a rollback to version 2's content") {
			t.Errorf("%s has no rollback callback for version 4", h)
		}
	}
	m := regexp.MustCompile(`lehr watch demo/app --socket (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no lehr watch hint in output:\n%s", out)
	}
	if _, err := os.Stat(m[1]); err != nil {
		t.Errorf("the socket of the watch hint: %v", err)
	}

	// Another "terminal" pushes a change while dev runs; the consumers
	// keep printing.
	c := cli{t: t, addr: addr}
	c.ok("patch", "demo/app", "--base", "4", "--set", "greeting=from the test")
	if got := c.ok("get", "demo/app", "--key", "greeting", "--raw"); got != "from the test" {
		t.Errorf("greeting = %q after a patch against lehr dev", got)
	}
	for _, z := range []string{"zone-a", "zone-b"} {
		want := "    [" + z + " service on " + z + "-host-0] callback: demo/app version 5 (was 4), 1 changed key\n        ~ greeting: hello from lehr → from the test\n"
		wait.For(t, z+" callback for version 5 (rolled out)", func() bool { return strings.Contains(stdout.String(), want) })
	}

	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("lehr dev exit code after Ctrl-C = %d, want 0\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("lehr dev did not stop within a minute of cancellation")
	}
	out = stdout.String()
	mustContain(t, "lehr dev shutdown", out, "==> shutting down", "==> stopped cleanly", "==> removed ")
	tmp := regexp.MustCompile(`starting control with embedded etcd in (\S+)`).FindStringSubmatch(out)
	if tmp == nil {
		t.Fatalf("no data directory in output:\n%s", out)
	}
	if _, err := os.Stat(tmp[1]); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s still exists after exit (stat: %v)", tmp[1], err)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("agent socket %s still exists after exit (stat: %v)", m[1], err)
	}
}

// notifySocket listens like systemd does for a Type=notify service; the
// channel carries each notification.
func notifySocket(t *testing.T) (path string, notes <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return path, ch
}

func nextNote(t *testing.T, notes <-chan string) string {
	t.Helper()
	select {
	case m := <-notes:
		return m
	case <-time.After(60 * time.Second):
		t.Fatal("no systemd notification within a minute")
		return ""
	}
}

func TestControlCommandServesUntilCanceled(t *testing.T) {
	var stderr syncBuffer
	ready := make(chan string, 1)
	sock, notes := notifySocket(t)
	e := &env{
		stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr,
		getenv: func(k string) string { return map[string]string{"NOTIFY_SOCKET": sock}[k] },
		ready:  func(addr string) { ready <- addr },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "control.sock")
	go func() {
		done <- run(ctx, []string{"control", "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--log-level", "warn",
			"--socket", sockPath}, e)
	}()
	var addr string
	select {
	case addr = <-ready:
	case code := <-done:
		t.Fatalf("lehr control exited %d before serving:\n%s", code, stderr.String())
	case <-time.After(120 * time.Second):
		t.Fatalf("lehr control not serving after 2 minutes:\n%s", stderr.String())
	}
	if got, want := nextNote(t, notes), "READY=1\nSTATUS=serving on "+addr; got != want {
		t.Errorf("systemd notification = %q, want %q", got, want)
	}
	// Without --dev, plaintext loopback callers only read: control
	// cannot tell who they are. On the socket each caller is its local
	// account, unix:<account>, and --as another is refused.
	c := cli{t: t, addr: addr}
	refusal := c.fails("domain", "create", "demo")
	mustContain(t, "a change over plaintext TCP", refusal, "may only read", "unix", "--dev")
	c.ok("domain", "list")
	// The fix the refusal suggests works as printed (issue 31): the
	// client flags before the command.
	fix := suggested(t, refusal, "--control unix://")
	if want := []string{"--control", "unix://" + sockPath, "COMMAND", "…"}; !slices.Equal(fix[0], want) {
		t.Fatalf("the refusal suggests 'lehr %s', want 'lehr %s'", strings.Join(fix[0], " "), strings.Join(want, " "))
	}
	if code, _, errOut := runCLI(t, nil, append(fix[0][:2], "domain", "create", "demo")...); code != exitOK {
		t.Fatalf("lehr %s domain create demo: exit %d\n%s", strings.Join(fix[0][:2], " "), code, errOut)
	}
	local := cli{t: t, addr: "unix://" + sockPath, identified: true}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	mine := "unix:" + me.Username
	mustContain(t, "--as mallory on the socket", local.fails("domain", "create", "demo", "--as", "mallory"), `you are "`+mine+`"`, "Drop --as")
	mustContain(t, "the domain's creator and admin", local.ok("domain", "get", "demo"), "by "+mine, "admins              "+mine)
	code, out, errOut := runCLI(t, nil, "--control", "unix://"+sockPath, "-o", "json", "domain", "get", "demo")
	var d lehrpb.Domain
	if err := parseJSON(out, &d); code != exitOK || err != nil || d.GetName() != "demo" {
		t.Errorf("lehr --control unix://… -o json domain get demo: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	mustContain(t, "stderr", stderr.String(), "lehr control: serving on "+addr)
	cancel()
	if got := nextNote(t, notes); got != "STOPPING=1" {
		t.Errorf("systemd notification after interrupt = %q, want STOPPING=1", got)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("lehr control exit code = %d, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("lehr control did not stop within a minute")
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		t.Errorf("no etcd data under --data-dir: %v", err)
	}
}

func TestGoalsWatch(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "demo")
	c.ok("zones", "create", "zone-a")
	dir := t.TempDir()
	app := filepath.Join(dir, "app.json")
	if err := os.WriteFile(app, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("push", "demo/app", "--file", app)

	var stdout, stderr syncBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"goals", "zone-a", "--watch", "--control", srv.Addr}, e) }()
	wait.For(t, "the initial goal state", func() bool { return strings.Contains(stdout.String(), "watching for changes") })
	mustContain(t, "initial state", stdout.String(), "current  demo/app -> version 1")

	c.ok("patch", "demo/app", "--base", "1", "--set", "a=2", "--message", "bump")
	wait.For(t, "the goal change", func() bool { return strings.Contains(stdout.String(), "changed  demo/app -> version 2") })
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("goals --watch exit code after interrupt = %d, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("goals --watch did not stop after cancellation")
	}
}
