package main

import (
	"context"
	"fmt"
	"io"
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
		{"help", "show this list, or a command's help", runHelp},
	}
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		printCommandList(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		printCommandList(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "lehr: unknown command %q\nRun 'lehr help' for the list of commands.\n", name)
	return exitUsage
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
	return run(ctx, []string{args[0], "--help"}, e)
}

func printCommandList(w io.Writer) {
	fmt.Fprint(w, `lehr pushes runtime configuration from producers through a control plane to
every host of a fleet.

Usage: lehr COMMAND [ARGS] [FLAGS]

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

Run 'lehr COMMAND --help' for a command's flags and examples.
`)
}
