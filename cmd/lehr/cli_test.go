package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// runCLI runs lehr in-process and returns its exit code and output.
func runCLI(t *testing.T, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{
		stdin:  strings.NewReader(""),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string { return environ[k] },
	}
	code = run(context.Background(), args, e)
	return code, out.String(), errb.String()
}

func TestDispatchExitCodes(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string // substring
		wantStderr string // substring
	}{
		{args: nil, wantCode: exitUsage, wantStderr: "Commands:"},
		{args: []string{"help"}, wantCode: exitOK, wantStdout: "push          publish a namespace snapshot"},
		{args: []string{"--help"}, wantCode: exitOK, wantStdout: "Commands:"},
		{args: []string{"frobnicate"}, wantCode: exitUsage, wantStderr: `unknown command "frobnicate"` + "\nRun 'lehr help'"},
		{args: []string{"help", "push"}, wantCode: exitOK, wantStdout: "lehr push — publish"},
		{args: []string{"get", "--bogus"}, wantCode: exitUsage, wantStderr: "lehr get: flag provided but not defined: -bogus\nUsage: lehr get NS"},
		{args: []string{"get"}, wantCode: exitUsage, wantStderr: "lehr get: missing namespace NS"},
		{args: []string{"get", "a/b", "c/d"}, wantCode: exitUsage, wantStderr: `unexpected argument "c/d"`},
		{args: []string{"get", "a/b", "--raw"}, wantCode: exitUsage, wantStderr: "--raw needs exactly one --key"},
		{args: []string{"get", "a/b", "-o", "yaml"}, wantCode: exitUsage, wantStderr: `-o "yaml": want text or json`},
		{args: []string{"get", "a/b", "--tls-cert", "c.pem"}, wantCode: exitUsage, wantStderr: "--tls-cert and --tls-key go together"},
		{args: []string{"push", "a/b"}, wantCode: exitUsage, wantStderr: "missing --file FILE"},
		{args: []string{"push", "a/b", "--file", "x.json", "--kind", "rules"}, wantCode: exitUsage, wantStderr: `--kind "rules": want config or policy`},
		{args: []string{"patch", "a/b", "--set", "k=v"}, wantCode: exitUsage, wantStderr: "missing --base N"},
		{args: []string{"patch", "a/b", "--base", "1", "--set", "k"}, wantCode: exitUsage, wantStderr: `--set "k": want KEY=VALUE`},
		{args: []string{"patch", "a/b", "--base", "x"}, wantCode: exitUsage, wantStderr: `invalid value "x" for flag -base`},
		{args: []string{"diff", "a/b", "1"}, wantCode: exitUsage, wantStderr: "missing namespace NS and versions A B"},
		{args: []string{"diff", "a/b", "1", "two"}, wantCode: exitUsage, wantStderr: `version B "two": want a version number`},
		{args: []string{"rollback", "a/b"}, wantCode: exitUsage, wantStderr: "missing --to N"},
		{args: []string{"history", "a/b", "--limit", "-1"}, wantCode: exitUsage, wantStderr: "--limit -1"},
		{args: []string{"zones"}, wantCode: exitUsage, wantStderr: "missing subcommand: list, create, delete or status"},
		{args: []string{"zones", "status"}, wantCode: exitUsage, wantStderr: "lehr zones status: missing zone NAME\nUsage: lehr zones status NAME [flags]"},
		{args: []string{"watch"}, wantCode: exitUsage, wantStderr: "lehr watch: missing namespace NS"},
		{args: []string{"watch", "no-slash"}, wantCode: exitUsage, wantStderr: `namespace "no-slash"`},
		{args: []string{"watch", "demo/app", "-o", "yaml"}, wantCode: exitUsage, wantStderr: `-o "yaml": want text or json`},
		{args: []string{"distributor", "--zone", "z"}, wantCode: exitUsage, wantStderr: "lehr distributor: --control is required"},
		{args: []string{"control", "--listen", "0.0.0.0:7400"}, wantCode: exitUsage, wantStderr: "refusing to serve plaintext gRPC on 0.0.0.0:7400, which is not a loopback address: pass --tls-cert and --tls-key (create them with \"lehr certs\")"},
		{args: []string{"control", "--http-listen", "0.0.0.0:7402"}, wantCode: exitUsage, wantStderr: "refusing to serve plaintext HTTP/JSON (--http-listen) on 0.0.0.0:7402, which is not a loopback address"},
		{args: []string{"control", "--tls-cert", "x.pem"}, wantCode: exitUsage, wantStderr: "pass both --tls-cert and --tls-key, or neither"},
		{args: []string{"control", "--client-ca", "ca.pem"}, wantCode: exitUsage, wantStderr: "--client-ca requires --tls-cert and --tls-key"},
		{args: []string{"distributor", "--bogus"}, wantCode: exitUsage, wantStderr: "flag provided but not defined: -bogus"},
		{args: []string{"agent", "--zone", "z"}, wantCode: exitUsage, wantStderr: "--distributors is required"},
		{args: []string{"help", "distributor"}, wantCode: exitOK, wantStdout: "lehr distributor — the Lehr zonal distributor"},
		{args: []string{"certs", "--help"}, wantCode: exitOK, wantStdout: "distributor   --role distributor --zone Z"},
		{args: []string{"zones", "remove"}, wantCode: exitUsage, wantStderr: `unknown subcommand "remove"`},
		{args: []string{"zones", "delete"}, wantCode: exitUsage, wantStderr: "lehr zones delete: missing zone NAME"},
		{args: []string{"domain"}, wantCode: exitUsage, wantStdout: "", wantStderr: "create NAME"},
		{args: []string{"domain", "rename"}, wantCode: exitUsage, wantStderr: `unknown subcommand "rename"`},
		{args: []string{"domain", "--help"}, wantCode: exitOK, wantStdout: "Subcommands:"},
		{args: []string{"domain", "create"}, wantCode: exitUsage, wantStderr: "missing domain NAME"},
		{args: []string{"domain", "delete"}, wantCode: exitUsage, wantStderr: "lehr domain delete: missing domain NAME"},
		{args: []string{"domain", "delete", "a", "b"}, wantCode: exitUsage, wantStderr: `unexpected argument "b"`},
		{args: []string{"delete"}, wantCode: exitUsage, wantStderr: "lehr delete: missing namespace NS"},
		{args: []string{"delete", "a/b", "--forse"}, wantCode: exitUsage, wantStderr: "flag provided but not defined: -forse"},
		{args: []string{"help", "delete"}, wantCode: exitOK, wantStdout: "lehr delete — delete a namespace and its history"},
		{args: []string{"control", "--log-level", "loud"}, wantCode: exitUsage, wantStderr: `--log-level "loud"`},
		{args: []string{"control", "--keep-last", "0"}, wantCode: exitUsage, wantStderr: "--keep-last 0: want 1 or more"},
		{args: []string{"control", "--keep-for", "0s"}, wantCode: exitUsage, wantStderr: "--keep-for 0s: want a positive duration"},
		{args: []string{"control", "--store-timeout", "-1s"}, wantCode: exitUsage, wantStderr: "--store-timeout -1s: want a positive duration"},
		{args: []string{"control", "extra"}, wantCode: exitUsage, wantStderr: `unexpected argument "extra"`},
		{args: []string{"control", "--data-dir", "x", "status"}, wantCode: exitUsage, wantStderr: "status is a subcommand: put it first, 'lehr control status [flags]'"},
		{args: []string{"control", "status", "extra"}, wantCode: exitUsage, wantStderr: "lehr control status: unexpected argument \"extra\""},
		{args: []string{"control", "--data-dir", "x", "restore"}, wantCode: exitUsage, wantStderr: "restore is a subcommand: put it first, 'lehr control restore --data-dir DIR FILE'"},
		{args: []string{"control", "backup"}, wantCode: exitUsage, wantStderr: "lehr control backup: missing FILE"},
		{args: []string{"control", "restore", "--data-dir", "x"}, wantCode: exitUsage, wantStderr: "lehr control restore: missing FILE, the backup"},
		{args: []string{"control", "restore", "--record-only", "b.db"}, wantCode: exitUsage, wantStderr: "--record-only and --etcd-endpoints go together"},
		{args: []string{"control", "restore", "-o", "yaml", "b.db"}, wantCode: exitUsage, wantStderr: `-o "yaml": want text or json`},
		{args: []string{"control", "status", "--control", ","}, wantCode: exitUsage, wantStderr: "--control: want a control address"},
		{args: []string{"control", "status", "-o", "yaml"}, wantCode: exitUsage, wantStderr: `-o "yaml": want text or json`},
		{args: []string{"control", "status", "--listen", "x"}, wantCode: exitUsage, wantStderr: "lehr control status: flag provided but not defined: -listen"},
		{args: []string{"help", "control"}, wantCode: exitOK, wantStdout: "Usage: lehr control [flags] | lehr control status|backup|restore [flags]"},
		{args: []string{"dev", "--log-format", "xml"}, wantCode: exitUsage, wantStderr: `--log-format "xml"`},
		// Client flags before the command (issue 31).
		{args: []string{"-h"}, wantCode: exitOK, wantStdout: "Usage: lehr [CLIENT FLAGS] COMMAND [ARGS] [FLAGS]"},
		{args: []string{"--control", "127.0.0.1:1", "-o", "yaml", "get", "a/b"}, wantCode: exitUsage, wantStderr: `lehr get: -o "yaml": want text or json`},
		{args: []string{"--control=127.0.0.1:1", "--tls-cert", "c.pem", "domain", "create", "demo"}, wantCode: exitUsage, wantStderr: "lehr domain create: --tls-cert and --tls-key go together"},
		{args: []string{"--as", "x", "zones", "status"}, wantCode: exitUsage, wantStderr: "lehr zones status: missing zone NAME"},
		{args: []string{"--bogus", "get", "a/b"}, wantCode: exitUsage, wantStderr: "lehr: flag --bogus before the command: only the client flags (--control, --as, -o, --timeout, --tls-ca, --tls-cert, --tls-key) may come first"},
		{args: []string{"--zone", "z", "agent"}, wantCode: exitUsage, wantStderr: "lehr: flag --zone before the command"},
		{args: []string{"-o"}, wantCode: exitUsage, wantStderr: "lehr: flag -o needs a value, then the command"},
		// Subcommands: their own help, usage and flags (issue 31).
		{args: []string{"rollout", "wait", "--help"}, wantCode: exitOK, wantStdout: "lehr rollout wait — print progress until the rollout ends\n\nUsage: lehr rollout wait NS"},
		{args: []string{"help", "rollout", "policy", "set"}, wantCode: exitOK, wantStdout: "lehr rollout policy set — set a scope's policy"},
		{args: []string{"rollout", "wait"}, wantCode: exitUsage, wantStderr: "lehr rollout wait: missing namespace NS\nUsage: lehr rollout wait NS [--version V] [--timeout D] [flags]\nRun 'lehr rollout wait --help'"},
		{args: []string{"rollout", "wait", "a/b", "--active"}, wantCode: exitUsage, wantStderr: "lehr rollout wait: --active is not a flag of lehr rollout wait"},
		{args: []string{"rollout", "policy", "get", "a", "-f", "x.yaml"}, wantCode: exitUsage, wantStderr: "lehr rollout policy get: -f is not a flag of lehr rollout policy get"},
		{args: []string{"canary", "judge", "--seed", "3"}, wantCode: exitUsage, wantStderr: "--seed is not a flag of lehr canary judge"},
		{args: []string{"policy", "experiment", "commit", "a/b", "x"}, wantCode: exitUsage, wantStderr: "lehr policy experiment commit: needs --etag E"},
		{args: []string{"domain", "create", "--help"}, wantCode: exitOK, wantStdout: "lehr domain create — create a domain\n"},
		{args: []string{"--control", "x"}, wantCode: exitUsage, wantStderr: "Commands:"},
		// Versions (issue 33).
		{args: []string{"version"}, wantCode: exitOK, wantStdout: "\n  commit     "},
		{args: []string{"--version"}, wantCode: exitOK, wantStdout: "\n  go         go"},
		{args: []string{"version", "extra"}, wantCode: exitUsage, wantStderr: "lehr version: unexpected argument \"extra\" (want no arguments)\nUsage: lehr version [-o json]"},
		{args: []string{"version", "-o", "yaml"}, wantCode: exitUsage, wantStderr: `lehr version: -o "yaml": want text or json`},
		{args: []string{"--control", "x", "version"}, wantCode: exitUsage, wantStderr: "lehr version: flag provided but not defined: -control"},
		{args: []string{"--control", "x", "certs", "init", "--dir", "d"}, wantCode: exitUsage, wantStderr: "lehr certs init: flag provided but not defined: -control"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.wantStderr)
			}
		})
	}
}

// Every command's and every subcommand's help is its own, and teaches:
// summary, a paragraph, flags and examples; a command with subcommands
// lists them, each with a help of its own (issue 31: "lehr rollout wait
// --help" printed all of "lehr rollout --help").
func TestEveryCommandHasHelp(t *testing.T) {
	for _, n := range helpPaths() {
		switch n[0] {
		case "help":
			continue
		case "agent", "distributor":
			continue // shared with lean binaries; checked by TestDaemonHelp
		}
		path := strings.Join(n, " ")
		t.Run(path, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, append(n, "--help")...)
			if code != exitOK || stderr != "" {
				t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			if !strings.HasPrefix(stdout, "lehr "+path+" — ") {
				t.Errorf("help does not start with %q:\n%s", "lehr "+path+" — ", stdout)
			}
			if !strings.Contains(stdout, "\nUsage: lehr "+path) {
				t.Errorf("help lacks the usage of lehr %s:\n%s", path, stdout)
			}
			if subs := subcommandNames(path); len(subs) > 0 {
				for _, s := range subs {
					if !regexp.MustCompile(`\n  ` + s + `\b`).MatchString(stdout) {
						t.Errorf("help does not list subcommand %s:\n%s", s, stdout)
					}
				}
				return
			}
			wants := []string{"lags:\n  -", "\nExamples:\n  "}
			if path == "completion" {
				wants = wants[1:] // it has no flags
			}
			for _, want := range wants {
				if !strings.Contains(stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, stdout)
				}
			}
			if _, ex, _ := strings.Cut(stdout, "\nExamples:\n"); strings.Count(ex, "\n  ") < 1 {
				t.Errorf("help has fewer than 2 examples:\n%s", stdout)
			}
		})
	}
}

// The daemons' help comes from their command packages, shared with the
// lean binaries: it goes to stdout, with usage, examples and every flag.
func TestDaemonHelp(t *testing.T) {
	for _, tt := range []struct {
		cmd   string
		flags []string
	}{
		{"distributor", []string{"zone", "control", "listen", "metrics-listen", "tls-cert", "tls-key", "tls-ca", "control-tls-cert", "control-tls-key", "control-tls-ca", "control-plaintext", "cache-bytes", "report-interval", "log-level", "log-format"}},
		{"agent", []string{"zone", "distributors", "data-dir", "socket", "tls-cert", "tls-key", "tls-ca", "metrics-listen", "log-format"}},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.cmd, "--help")
			if code != exitOK || stderr != "" {
				t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			for _, want := range []string{"Usage:\n", "Examples:\n"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, stdout)
				}
			}
			for _, f := range tt.flags {
				if !strings.Contains(stdout, "\n  --"+f+" ") && !strings.Contains(stdout, "\n  --"+f+"\n") {
					t.Errorf("help does not list --%s:\n%s", f, stdout)
				}
			}
		})
	}
}

// Client flags before the command go to the command's flags, after its
// own arguments and before a "--"; one the command line repeats after the
// command gives way to that one.
func TestWithGlobalFlags(t *testing.T) {
	tests := []struct {
		args, global, want []string
	}{
		{args: []string{"create", "demo"}, global: []string{"--control=unix:///s"}, want: []string{"create", "demo", "--control=unix:///s"}},
		{args: []string{"demo/app", "--", "-x"}, global: []string{"-o=json"}, want: []string{"demo/app", "-o=json", "--", "-x"}},
		{args: []string{"demo/app", "-o", "text"}, global: []string{"-o=json", "--as=a"}, want: []string{"demo/app", "-o", "text", "--as=a"}},
		{args: []string{"demo/app", "--control=b"}, global: []string{"--control=a"}, want: []string{"demo/app", "--control=b"}},
		{args: nil, global: nil, want: nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, withGlobalFlags(tt.args, tt.global)); diff != "" {
			t.Errorf("withGlobalFlags(%q, %q) mismatch (-want +got):\n%s", tt.args, tt.global, diff)
		}
	}
}

func TestParseIntersperses(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantMsg  string
		wantBool bool
	}{
		{args: []string{"ns", "--message", "m", "--raw"}, wantPos: []string{"ns"}, wantMsg: "m", wantBool: true},
		{args: []string{"--message", "m", "ns", "a", "--raw", "b"}, wantPos: []string{"ns", "a", "b"}, wantMsg: "m", wantBool: true},
		{args: []string{"ns", "--", "--raw", "-x"}, wantPos: []string{"ns", "--raw", "-x"}},
		{args: []string{"-", "--message=a b"}, wantPos: []string{"-"}, wantMsg: "a b"},
	}
	for _, tt := range tests {
		fs := newFlags("lehr test", doc{})
		msg := fs.String("message", "", "")
		b := fs.Bool("raw", false, "")
		e := &env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
		pos, code, ok := parse(e, fs, tt.args)
		if !ok {
			t.Errorf("parse(%q) failed with code %d", tt.args, code)
			continue
		}
		if diff := cmp.Diff(tt.wantPos, pos); diff != "" {
			t.Errorf("parse(%q) positional mismatch (-want +got):\n%s", tt.args, diff)
		}
		if *msg != tt.wantMsg || *b != tt.wantBool {
			t.Errorf("parse(%q): message %q raw %v, want %q %v", tt.args, *msg, *b, tt.wantMsg, tt.wantBool)
		}
	}
}

func TestClientFlagsFromEnvironment(t *testing.T) {
	fs := newFlags("lehr test", doc{})
	e := &env{getenv: func(k string) string {
		return map[string]string{"LEHR_CONTROL": "127.0.0.1:9999", "LEHR_AS": "carol"}[k]
	}}
	cf := addClientFlags(fs, e)
	if cf.control != "127.0.0.1:9999" || cf.as != "carol" {
		t.Errorf("defaults from env: control %q as %q, want 127.0.0.1:9999 and carol", cf.control, cf.as)
	}
	if err := fs.Parse([]string{"--control", "127.0.0.1:1", "--as", "dave"}); err != nil {
		t.Fatal(err)
	}
	if cf.control != "127.0.0.1:1" || cf.as != "dave" {
		t.Errorf("flags override env: control %q as %q", cf.control, cf.as)
	}
}

func TestPlaintextRefusedOffLoopback(t *testing.T) {
	code, _, stderr := runCLI(t, nil, "get", "demo/app", "--control", "10.9.8.7:7400")
	if code != exitError {
		t.Errorf("exit code = %d, want %d", code, exitError)
	}
	for _, want := range []string{"refusing plaintext to 10.9.8.7:7400", "field: address", "--tls-ca"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", stderr, want)
		}
	}
}

// The help of every command and subcommand, as users read it: lehr help,
// then "lehr COMMAND [SUBCOMMAND…] --help" for each.
func TestHelpGolden(t *testing.T) {
	var b strings.Builder
	code, stdout, _ := runCLI(t, nil, "help")
	if code != exitOK {
		t.Fatalf("lehr help: exit %d", code)
	}
	fmt.Fprintf(&b, "$ lehr help\n%s\n", stdout)
	for _, path := range helpPaths() {
		if path[0] == "help" {
			continue
		}
		args := append(path, "--help")
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != exitOK || stderr != "" {
			t.Fatalf("lehr %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		fmt.Fprintf(&b, "$ lehr %s\n%s\n", strings.Join(args, " "), stdout)
	}
	golden(t, "help", []byte(b.String()))
}
