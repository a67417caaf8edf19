// Command lehr-agent is the lean production build of the Lehr per-host
// agent: the same program as "lehr agent" (package agent/agentcmd), linking
// neither etcd nor the control plane nor the distributor. Run it with
// --help for flags and examples.
package main

import (
	"context"
	"io"
	"os"
	"slices"

	"lehr.dev/lehr/agent/agentcmd"
	"lehr.dev/lehr/internal/metricshttp"
)

func main() {
	// # HELP and # TYPE on /metrics: a process-wide switch of the metrics
	// library, so it is thrown here, once.
	metricshttp.ExposeMetadata()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the agent; its help and its build (--version) go to stdout, as
// every lehr command's do, and usage errors and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := stderr
	if i := slices.IndexFunc(args, func(a string) bool {
		return a == "-h" || a == "-help" || a == "--help" || a == "-version" || a == "--version" || a == "--"
	}); i >= 0 && args[i] != "--" {
		out = stdout
	}
	return agentcmd.Main(ctx, args, out)
}
