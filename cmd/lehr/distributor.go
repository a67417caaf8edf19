package main

import (
	"context"

	"lehr.dev/lehr/distributor/distributorcmd"
)

// runDistributor is "lehr distributor" (package distributorcmd, which a
// lean distributor binary would share).
func runDistributor(ctx context.Context, e *env, args []string) int {
	return distributorcmd.Main(ctx, args, daemonOutput(e, args))
}
