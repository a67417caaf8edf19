package main

import (
	"context"
	"io"

	"lehr.dev/lehr/agent/agentcmd"
)

// runAgent is "lehr agent": the same program as the lean lehr-agent binary
// (package agentcmd), so the flags and behaviour are identical.
func runAgent(ctx context.Context, e *env, args []string) int {
	out := daemonOutput(e, args)
	if hasFlag(args, "version") {
		out = e.stdout // the build, as lehr version prints it
	}
	return agentcmd.Main(ctx, args, out)
}

// daemonOutput is where a daemon command shared with a lean binary writes:
// its help to stdout, like every other lehr command, and usage errors and
// logs to stderr.
func daemonOutput(e *env, args []string) io.Writer {
	if wantsHelp(args) {
		return e.stdout
	}
	return e.stderr
}

// wantsHelp reports whether args ask for help before any "--".
func wantsHelp(args []string) bool {
	return hasFlag(args, "h") || hasFlag(args, "help")
}

// hasFlag reports whether args give the boolean flag name (-name or
// --name) before any "--".
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-" + name, "--" + name:
			return true
		}
	}
	return false
}
