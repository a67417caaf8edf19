package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed (API error, unreadable file…)
	exitUsage = 2 // the command line is wrong
)

// env is what a command may touch of the outside world. Tests run commands
// in-process with buffers and a fake environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// ready, if set, is called by long-running commands once they serve,
	// with the control plane address ("lehr dev", "lehr control").
	ready func(controlAddr string)
	// checkOnly makes a command stop once it has checked its command line,
	// before it dials control, listens, or writes a file, and return
	// exitOK: tests check with it that every command line lehr prints is
	// one lehr accepts.
	checkOnly bool
}

func (e *env) env(key string) string {
	if e.getenv == nil {
		return ""
	}
	return e.getenv(key)
}

// command is one subcommand of lehr.
type command struct {
	name    string
	summary string // one line, for "lehr help"
	run     func(ctx context.Context, e *env, args []string) int
}

// commands returns the dispatch table in the order "lehr help" lists it.
func commands() []command {
	return []command{
		{"control", "run the control plane (gRPC API, embedded or external etcd)", runControl},
		{"distributor", "run a zonal distributor (QUIC fan-out to agents)", runDistributor},
		{"agent", "run the per-host agent (same as the lehr-agent binary)", runAgent},
		{"dev", "run the whole system locally with a guided demo (make run)", runDev},
		{"domain", "create, show, list and delete domains (tenants owning namespaces)", runDomain},
		{"push", "publish a namespace snapshot from a JSON or YAML file", runPush},
		{"patch", "set and delete keys against a base version", runPatch},
		{"get", "show a version of a namespace (latest by default)", runGet},
		{"history", "list the versions of a namespace, newest first", runHistory},
		{"diff", "show what changed between two versions", runDiff},
		{"rollback", "publish an older version's content as a new version", runRollback},
		{"delete", "delete a namespace and its history", runDelete},
		{"rollout", "show and set rollout policies (how a new version reaches the fleet)", runRollout},
		{"canary", "show canary evaluations; judge and generate canary data", runCanary},
		{"policy", "show and test policies; preview changes to them as experiments (AIP-236)", runPolicy},
		{"zones", "list, create, delete and show the status of zones", runZones},
		{"goals", "show the goal states of a zone", runGoals},
		{"watch", "follow a namespace on this host through the local agent", runWatch},
		{"store", "show how full control's store is, and what each domain stores", runStore},
		{"audit", "show the audit log: every change anyone asked control for", runAudit},
		{"certs", "make a development CA and component certificates", runCerts},
		{"completion", "print a shell completion script (bash, zsh or fish)", runCompletion},
		{"version", "show this lehr's build: release version, commit, Go version", runVersion},
		{"help", "show this list, or a command's help", runHelp},
	}
}

// subcommands are the subcommands of the commands that have some, by
// command path ("rollout policy"), in the order their help lists them.
// Help, completion and the tests walk them; each command's run dispatches
// them.
var subcommands = map[string][]string{
	"domain":            {"create", "get", "update", "list", "delete"},
	"certs":             {"init", "issue"},
	"control":           {"status", "backup", "restore"},
	"history":           {"compact"},
	"zones":             {"list", "create", "delete", "status"},
	"rollout":           {"status", "events", "list", "pause", "resume", "abort", "promote", "wait", "policy"},
	"rollout policy":    {"get", "set", "delete", "history"},
	"canary":            {"show", "list", "judge", "generate"},
	"policy":            {"get", "eval", "delete", "experiment"},
	"policy experiment": {"create", "update", "get", "list", "delete", "start", "stop", "commit", "counts"},
}

// subcommandNames returns the subcommands of the command at path ("rollout
// policy"), nil for none.
func subcommandNames(path string) []string { return subcommands[path] }

// run dispatches args to a subcommand and returns the exit code. Client
// flags (--control, --as, -o, --timeout, --tls-*) may come before the
// command as well as after it: "lehr --control unix:///… domain create
// demo" is "lehr domain create demo --control unix:///…".
func run(ctx context.Context, args []string, e *env) int {
	global, args, code, ok := leadingFlags(e, args)
	if !ok {
		return code
	}
	if len(args) == 0 {
		printCommandList(e.stderr)
		return exitUsage
	}
	name := args[0]
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, e, withGlobalFlags(args[1:], global))
		}
	}
	fmt.Fprintf(e.stderr, "lehr: unknown command %q\nRun 'lehr help' for the list of commands.\n", name)
	return exitUsage
}

// leadingFlags splits the client flags before the command off args, each
// as "--name=value". It handles --help there and reports any other flag:
// ok is false when run should return code at once.
func leadingFlags(e *env, args []string) (global, rest []string, code int, ok bool) {
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return global, args[1:], exitOK, true
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "h" || name == "help":
			printCommandList(e.stdout)
			return nil, nil, exitOK, false
		case name == "version" && !hasValue:
			// "lehr --version" is "lehr version", with the client flags
			// given before it (-o json).
			return global, append([]string{"version"}, args[1:]...), exitOK, true
		case !slices.Contains(clientFlagNames, name):
			fmt.Fprintf(e.stderr, "lehr: flag %s before the command: only the client flags (%s) may come first; put a command's own flags after it\n"+
				"Usage: lehr [CLIENT FLAGS] COMMAND [ARGS] [FLAGS]\nRun 'lehr help' for the list of commands.\n", a, fmtFlagNames(clientFlagNames))
			return nil, nil, exitUsage, false
		case !hasValue && len(args) < 2:
			fmt.Fprintf(e.stderr, "lehr: flag %s needs a value, then the command\nUsage: lehr [CLIENT FLAGS] COMMAND [ARGS] [FLAGS]\n", a)
			return nil, nil, exitUsage, false
		case !hasValue:
			value, args = args[1], args[1:]
		}
		global = append(global, flagName(name)+"="+value)
		args = args[1:]
	}
	return global, args, exitOK, true
}

// withGlobalFlags adds the client flags given before the command to its
// arguments: after them (before a "--"), so that the command's flag set
// parses them as its own; a flag the command line repeats after the
// command wins, as the one nearer to it.
func withGlobalFlags(args, global []string) []string {
	if len(global) == 0 {
		return args
	}
	end := slices.Index(args, "--")
	if end < 0 {
		end = len(args)
	}
	given := map[string]bool{}
	for _, a := range args[:end] {
		if len(a) > 1 && a[0] == '-' {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			given[name] = true
		}
	}
	out := slices.Clone(args[:end])
	for _, g := range global {
		name, _, _ := strings.Cut(strings.TrimLeft(g, "-"), "=")
		if !given[name] {
			out = append(out, g)
		}
	}
	return append(out, args[end:]...)
}

// flagName is name as lehr's help writes it: "-o", "--control".
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// fmtFlagNames lists flag names as lehr's help writes them.
func fmtFlagNames(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = flagName(n)
	}
	return strings.Join(out, ", ")
}

func runHelp(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printCommandList(e.stdout)
		return exitOK
	}
	if args[0] == "help" {
		fmt.Fprintln(e.stdout, "usage: lehr help [COMMAND]")
		return exitOK
	}
	return run(ctx, append(args, "--help"), e)
}

func printCommandList(w io.Writer) {
	fmt.Fprint(w, `lehr pushes runtime configuration from producers through a control plane to
every host of a fleet.

Usage: lehr [CLIENT FLAGS] COMMAND [ARGS] [FLAGS]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Start here:
  lehr dev                                  the whole system locally, with a demo
  lehr push demo/app --file app.json        publish from another terminal
  lehr get demo/app                         read it back

Client flags, before or after the command, for the commands that talk to
control: --control ADDR (env LEHR_CONTROL), --as AUTHOR (env LEHR_AS),
-o text|json, --timeout DURATION, --tls-ca FILE, --tls-cert FILE, --tls-key FILE.

Run 'lehr COMMAND --help' for a command's flags and examples, and
'lehr completion bash|zsh|fish' for shell completion.
`)
}
