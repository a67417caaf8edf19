// Command lehr-agent is the lean production build of the Lehr per-host
// agent: the same program as "lehr agent" (package agent/agentcmd), linking
// neither etcd nor the control plane nor the distributor. Run it with
// --help for flags and examples.
package main

import (
	"context"
	"os"

	"lehr.dev/lehr/agent/agentcmd"
)

func main() {
	os.Exit(agentcmd.Main(context.Background(), os.Args[1:], os.Stderr))
}
