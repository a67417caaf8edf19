package control_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
)

// docExample is one command of a console block of the docs and the
// answer the docs show for it.
type docExample struct {
	line    int
	command string
	answer  string
}

// docExamples reads the console blocks of the section of docs/operations.md
// headed heading: each "$ " line (with its "\" continuations) is a
// command, the lines up to the next one its answer.
func docExamples(t *testing.T, heading string) []docExample {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docExample
	in, block := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "#"):
			in = strings.TrimLeft(l, "# ") == heading
			continue
		case !in:
			continue
		case l == "```console":
			block = true
			continue
		case strings.HasPrefix(l, "```"):
			block = false
			continue
		case !block:
			continue
		}
		last := len(out) - 1
		switch {
		case strings.HasPrefix(l, "$ "):
			out = append(out, docExample{line: n, command: strings.TrimPrefix(l, "$ ")})
		case last < 0:
			t.Fatalf("docs/operations.md:%d: an answer before any command: %s", n, l)
		case strings.HasSuffix(out[last].command, "\\") && out[last].answer == "":
			out[last].command = strings.TrimSuffix(out[last].command, "\\") + " " + strings.TrimSpace(l)
		default:
			out[last].answer += l + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The curl examples of docs/operations.md, "HTTP/JSON", work as shown:
// each runs, with the shell, against a control as lehr dev runs it (dev
// mode, HTTP/JSON on) — or, for those addressed to
// https://control.example.net:7402, one with mutual TLS and alice's
// certificate beside it — and exits 0 with an answer holding every field
// the docs show (the docs leave out the fields that change from run to
// run), or, for an error, exits 22 (curl --fail-with-body) with that
// google.rpc.Status, or — a "curl: (N) …" line — fails to connect.
func TestHTTPDocExamples(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl is not installed (scripts/deps.sh installs it): %v", err)
	}
	examples := docExamples(t, "HTTP/JSON")
	dev := controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0"})
	devURL := "http://" + dev.Control.HTTPAddr().String()

	// The mutual-TLS control, with ca.crt and alice's certificate in dir.
	dir := t.TempDir()
	ca, err := pki.NewCA(dir, "lehr-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueFiles(dir, "control", pki.Server, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueURIFiles(dir, "alice", pki.Client, nil, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "alice"}.URI(), time.Hour); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := tlsconfig.Server(cert, key, filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	alice, err := tlsconfig.Client(filepath.Join(dir, "alice.crt"), filepath.Join(dir, "alice.key"), filepath.Join(dir, "ca.crt"), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	mtls := controltest.StartControl(t, control.Options{HTTPListen: "127.0.0.1:0", TLS: serverTLS}, grpc.WithTransportCredentials(credentials.NewTLS(alice)))
	const docHost = "https://control.example.net:7402"
	mtlsURL := "https://" + mtls.Control.HTTPAddr().String()

	var curls, errs, operations, overTLS int
	for _, ex := range examples {
		if strings.HasPrefix(ex.command, "export LEHR_HTTP=") {
			if want := "export LEHR_HTTP=http://127.0.0.1:7402"; ex.command != want {
				t.Errorf("docs/operations.md:%d: %q; want %q, where lehr dev serves", ex.line, ex.command, want)
			}
			continue
		}
		if !strings.HasPrefix(ex.command, "curl ") {
			t.Errorf("docs/operations.md:%d: %q is not a curl command", ex.line, ex.command)
			continue
		}
		curls++
		command := strings.Replace(ex.command, "curl ", curl+" ", 1)
		if strings.Contains(command, docHost) {
			overTLS++
			command = strings.ReplaceAll(command, docHost, mtlsURL)
		}
		t.Run(fmt.Sprintf("line %d", ex.line), func(t *testing.T) {
			cmd := exec.Command("bash", "-c", command)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "LEHR_HTTP="+devURL)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(ex.answer, "curl: (") {
				// A connection refused: its exit status and message vary
				// with curl's build and timing (35, 55, 56 for a TLS 1.3
				// handshake refused for want of a certificate).
				if code == 0 || code == 22 || !strings.HasPrefix(stderr.String(), "curl: (") || stdout.Len() > 0 {
					t.Errorf("%s\nexit %d, stdout %s, stderr %s; want curl to fail to connect", ex.command, code, stdout.String(), stderr.String())
				}
				errs++
				return
			}
			var want, got any
			if err := json.Unmarshal([]byte(ex.answer), &want); err != nil {
				t.Fatalf("the docs' answer is not JSON: %v\n%s", err, ex.answer)
			}
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("%s\nexit %d, answered %s (stderr %s): not JSON: %v", ex.command, code, stdout.String(), stderr.String(), err)
			}
			wantCode := 0
			if m, ok := want.(map[string]any); ok {
				if _, isStatus := m["code"]; isStatus {
					wantCode = 22
					errs++
				}
				if m["done"] == true {
					operations++
				}
			}
			if code != wantCode {
				t.Errorf("%s\nexit %d (stderr %s); want %d", ex.command, code, stderr.String(), wantCode)
			}
			if diff := subset(want, got, ""); diff != "" {
				t.Errorf("%s\nanswered %s\nwhich differs from the docs' answer: %s", ex.command, stdout.String(), diff)
			}
		})
	}
	if curls < 10 || errs < 3 || operations < 1 || overTLS < 2 {
		t.Errorf("docs/operations.md, HTTP/JSON: %d curl examples, %d errors, %d operations, %d over mutual TLS; want at least 10, 3, 1 and 2",
			curls, errs, operations, overTLS)
	}
}

// subset says how got lacks something of want ("" if it does not): every
// field of an object in want must be in got's with a value subset of it,
// arrays must be as long with elements subsets of got's, and anything
// else equal.
func subset(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %v, not an object", path, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing", path, k)
			}
			if d := subset(wv, gv, path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: %v; want %d elements", path, got, len(w))
		}
		for i := range w {
			if d := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if want != got {
		return fmt.Sprintf("%s: %v; want %v", path, got, want)
	}
	return ""
}
