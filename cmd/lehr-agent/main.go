// Command lehr-agent is the lean production build of the Lehr per-host
// agent: the same program as "lehr agent" (package agent/agentcmd), linking
// neither etcd nor the control plane nor the distributor. Run it with
// --help for flags and examples.
package main

import (
	"context"
	"os"

	"lehr.dev/lehr/agent/agentcmd"
	"lehr.dev/lehr/internal/metricshttp"
)

func main() {
	// # HELP and # TYPE on /metrics: a process-wide switch of the metrics
	// library, so it is thrown here, once.
	metricshttp.ExposeMetadata()
	os.Exit(agentcmd.Main(context.Background(), os.Args[1:], os.Stderr))
}
