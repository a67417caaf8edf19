package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/testenv/devcluster"
)

// grpcurlSection is the part of docs/operations.md whose grpcurl lines
// TestGrpcurlLinesInDocsWork runs.
var grpcurlSection = regexp.MustCompile(`(?s)\n## Calling the API from any tool\n(.*?)\n## `)

// TestGrpcurlLinesInDocsWork runs every grpcurl command line of
// docs/operations.md's "Calling the API from any tool", as printed, with
// the real grpcurl (the tool pinned in go.mod) from the root of the
// checkout: against a control on plaintext loopback and an agent's socket
// (testenv/devcluster), and against a control with mutual TLS and a unix
// socket, certificates from "lehr certs". The docs' addresses, socket
// paths and certificate directory are replaced by the test's; each line
// must succeed and print what the table below expects of it, so a line
// that no longer works, or a new line nobody checked, fails here. The
// lines use server reflection, but for the one that reads the vendored
// .proto files with -import-path proto.
func TestGrpcurlLinesInDocsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds grpcurl and starts control, a distributor and an agent")
	}
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := grpcurlSection.FindSubmatch(doc)
	if sec == nil {
		t.Fatal(`docs/operations.md has no section "## Calling the API from any tool"`)
	}
	var lines []string
	for _, m := range fence.FindAllStringSubmatch(string(sec[1]), -1) {
		for _, l := range strings.Split(m[1], "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "grpcurl ") {
				lines = append(lines, l)
			}
		}
	}
	// What each line must print (a substring of its output).
	want := map[string]string{
		"grpcurl -plaintext 127.0.0.1:7400 list":                                                                                        "lehr.v1.Control\n",
		"grpcurl -plaintext 127.0.0.1:7400 describe lehr.v1.Control.ListDomains":                                                        "rpc ListDomains ( .lehr.v1.ListDomainsRequest ) returns ( .lehr.v1.ListDomainsResponse )",
		"grpcurl -plaintext -d '{}' 127.0.0.1:7400 lehr.v1.Control/ListDomains":                                                         `"name": "demo"`,
		"grpcurl -plaintext -import-path proto -proto lehr/v1/control.proto 127.0.0.1:7400 describe lehr.v1.Control":                    "rpc CreatePolicyExperiment ( .lehr.v1.CreatePolicyExperimentRequest ) returns ( .google.longrunning.Operation )",
		"grpcurl -cacert /etc/lehr/tls/ca.crt -cert /etc/lehr/tls/alice.crt -key /etc/lehr/tls/alice.key control.example.net:7400 list": "lehr.v1.Control\n",
		"grpcurl -plaintext -unix -d '{}' /run/lehr-control/control.sock lehr.v1.Control/ListZones":                                     `"name": "zone-a"`,
		"grpcurl -plaintext -unix /run/lehr/agent.sock list":                                                                            "lehr.v1.Agent\n",
		"grpcurl -plaintext -unix -d '{}' /run/lehr/agent.sock lehr.v1.Agent/Status":                                                    `"hostId": "zone-g-host-0"`,
	}
	if len(lines) != len(want) {
		t.Errorf("the section has %d grpcurl lines, the test expects %d: keep the table in step with the docs", len(lines), len(want))
	}

	grpcurl := grpcurlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Control on plaintext loopback, in dev mode, with an agent.
	cl, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Zones: []string{"zone-g"}, Domains: []string{"demo"}, Logger: controltest.Logger(t, slog.LevelWarn),
	})
	if err != nil {
		t.Fatalf("devcluster.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("devcluster Close: %v", err)
		}
	})
	ag, err := cl.Agent("zone-g", 0)
	if err != nil {
		t.Fatal(err)
	}

	// Control with mutual TLS and a unix socket, as deployed.
	short, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	certs, sock := filepath.Join(short, "tls"), filepath.Join(short, "control.sock")
	for _, args := range [][]string{
		{"certs", "init", "--dir", certs},
		{"certs", "issue", "--dir", certs, "--name", "control", "--role", "control", "--host", "127.0.0.1"},
		{"certs", "issue", "--dir", certs, "--name", "alice", "--role", "user"},
	} {
		if code, stdout, stderr := runCLI(t, nil, args...); code != exitOK {
			t.Fatalf("lehr %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	serverTLS, err := tlsconfig.Server(filepath.Join(certs, "control.crt"), filepath.Join(certs, "control.key"), filepath.Join(certs, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := control.New(control.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MetricsListen: "off", Socket: sock, NoSync: true,
		TLS: serverTLS, Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	t.Cleanup(func() { c.Close(); <-done })
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("control stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("control with mutual TLS not ready")
	}
	if code, stdout, stderr := runCLI(t, nil, "--control", "unix://"+sock, "zones", "create", "zone-a"); code != exitOK {
		t.Fatalf("lehr zones create over the socket: exit %d\n%s%s", code, stdout, stderr)
	}

	replace := strings.NewReplacer(
		"127.0.0.1:7400", cl.ControlAddr(),
		"control.example.net:7400", c.Addr().String(),
		"/etc/lehr/tls/", certs+"/",
		"/run/lehr-control/control.sock", sock,
		"/run/lehr/agent.sock", ag.Socket(),
	)
	for _, line := range lines {
		w, ok := want[line]
		if !ok {
			t.Errorf("%s\n  the test expects nothing of this line: add it to the table", line)
			continue
		}
		args := shellWords(replace.Replace(line))[1:]
		cmd := exec.CommandContext(ctx, grpcurl, args...)
		cmd.Dir = root // for -import-path proto
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s\n  ran as grpcurl %s\n  %v\n%s", line, strings.Join(args, " "), err, out)
			continue
		}
		if !strings.Contains(string(out), w) {
			t.Errorf("%s\n  printed:\n%s\n  want it to contain %q", line, out, w)
		}
	}
}

// grpcurlBinary builds grpcurl, the tool go.mod pins, (or finds it in the
// build cache) and returns its path.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "tool", "-n", "grpcurl").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go tool -n grpcurl: %v\n%s", err, msg)
	}
	return strings.TrimSpace(string(out))
}
