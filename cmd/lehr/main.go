// Command lehr is the one Lehr binary for producers and operators: it runs
// the control plane ("lehr control"), a local demo ("lehr dev"), and the
// client commands that publish, read, compare and roll back configuration.
// Run "lehr help" for the list of commands and "lehr COMMAND --help" for
// each one's flags and examples.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"lehr.dev/lehr/internal/metricshttp"
)

func main() {
	// # HELP and # TYPE on every daemon's /metrics ("lehr control",
	// "lehr distributor", "lehr agent", "lehr dev"): a process-wide switch
	// of the metrics library, so it is thrown here, once.
	metricshttp.ExposeMetadata()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
	})
	stop()
	os.Exit(code)
}
