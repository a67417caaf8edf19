package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
)

// devSample is the namespace "lehr dev" publishes.
const devSample = `{
  "greeting": "hello from lehr",
  "limits/rps": 100,
  "limits/burst": 20,
  "features": {"dark_mode": false, "beta_search": true},
  "owners": ["team-app"]
}
`

func runDev(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr dev", doc{
		usage:   "lehr dev [flags]",
		summary: "run a local control plane with a guided demo (make run)",
		about: `Starts a control plane inside this process, on a temporary data directory with
an embedded etcd, and walks through a round trip: it creates the domain
"demo", pushes the namespace "demo/app", shows it, patches one key, and shows
the diff and the history. Then it keeps running so you can push your own
changes from another terminal, until Ctrl-C; the temporary data is removed on
exit (pass --data-dir to keep it).

It listens on 127.0.0.1:7400 (metrics on 127.0.0.1:7401), the address every
client command uses by default; if a port is busy it picks a free one and
says which.`,
		examples: []string{
			"lehr dev",
			"lehr dev --listen 127.0.0.1:7500     # then: lehr get demo/app --control 127.0.0.1:7500",
			"lehr dev --data-dir ./dev-data        # keep the data between runs",
		},
	})
	listen := fs.String("listen", "", "gRPC `address` (default 127.0.0.1:7400, or a free port if it is busy)")
	metricsListen := fs.String("metrics-listen", "", "metrics HTTP `address` (default 127.0.0.1:7401, or a free port if it is busy)")
	dataDir := fs.String("data-dir", "", "keep the data in this `directory` instead of a temporary one")
	lf := addLogFlags(fs)
	lf.level = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	say := func(format string, args ...any) { fmt.Fprintf(e.stdout, "==> "+format+"\n", args...) }

	dir, temp := *dataDir, *dataDir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "lehr-dev-"); err != nil {
			fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
			return exitError
		}
		defer func() {
			os.RemoveAll(dir)
			say("removed %s", dir)
		}()
	}
	opts := control.Options{
		DataDir:       dir,
		Listen:        pickAddr(*listen, control.DefaultListen, "gRPC", say),
		MetricsListen: pickAddr(*metricsListen, control.DefaultMetricsListen, "metrics", say),
		Logger:        logger,
		// A throwaway directory need not survive a machine crash.
		UnsafeNoFsync: temp,
	}
	c, err := control.New(opts)
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		return exitError
	}
	say("starting control with embedded etcd in %s", dir)

	// Run control in the background; the demo talks to it over gRPC like
	// any client would.
	runCtx, stopControl := context.WithCancel(ctx)
	defer stopControl()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()
	select {
	case <-c.Ready():
	case err := <-runErr:
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		return exitError
	}
	addr := c.Addr().String()
	metricsAt := "off"
	if ma := c.MetricsAddr(); ma != nil {
		metricsAt = "http://" + ma.String() + "/metrics"
	}
	say("control serving on %s (metrics %s)", addr, metricsAt)

	demoErr := devDemo(ctx, e, addr, dir, say)
	if demoErr == nil {
		controlFlag := ""
		if addr != control.DefaultListen {
			controlFlag = " --control " + addr
		}
		say("ready. From another terminal, try:")
		fmt.Fprintf(e.stdout, `
    lehr get demo/app%[1]s
    echo '{"greeting": "hi", "limits/rps": 300}' > my.json
    lehr push demo/app%[1]s --file my.json --message "my change"
    lehr history demo/app%[1]s

  (lehr is ./bin/lehr after 'make build'.) Press Ctrl-C to stop.

`, controlFlag)
		if e.ready != nil {
			e.ready(addr)
		}
		select {
		case <-ctx.Done():
		case err := <-runErr:
			runErr <- err
		}
	}
	say("shutting down")
	stopControl()
	code = exitOK
	if err := <-runErr; err != nil {
		fmt.Fprintf(e.stderr, "lehr dev: control: %v\n", err)
		code = exitError
	}
	if demoErr != nil {
		fmt.Fprintf(e.stderr, "lehr dev: demo: %v\n", demoErr)
		code = exitError
	}
	if code == exitOK {
		say("stopped cleanly")
	}
	return code
}

// pickAddr returns the address to listen on: the one given, else def if it
// is free, else a free port on the same host (saying so).
func pickAddr(given, def, what string, say func(string, ...any)) string {
	if given != "" {
		return given
	}
	l, err := net.Listen("tcp", def)
	if err == nil {
		l.Close()
		return def
	}
	host, _, _ := net.SplitHostPort(def)
	say("%s port %s is busy; using a free port instead", what, def)
	return net.JoinHostPort(host, "0")
}

// devDemo walks through the round trip, printing each command and its
// output as a user would see them.
func devDemo(ctx context.Context, e *env, addr, dir string, say func(string, ...any)) error {
	client := []string{"--control", addr, "--as", "lehr-dev"}
	step := func(what string, args ...string) error {
		fmt.Fprintf(e.stdout, "\n$ lehr %s\n", joinArgs(args))
		if code := run(ctx, append(slices.Clone(args), client...), e); code != exitOK {
			return fmt.Errorf("%s failed (exit %d)", what, code)
		}
		return nil
	}
	c, err := producer.New(producer.Options{Address: addr, Author: "lehr-dev"})
	if err != nil {
		return err
	}
	defer c.Close()

	say("creating domain demo")
	if _, err := c.GetDomain(ctx, "demo"); errors.Is(err, producer.ErrNotFound) {
		if err := step("create domain", "domain", "create", "demo", "--description", "created by lehr dev"); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else {
		fmt.Fprintln(e.stdout, "domain demo exists already")
	}

	sample := filepath.Join(dir, "demo-app.json")
	if err := os.WriteFile(sample, []byte(devSample), 0o644); err != nil {
		return err
	}
	say("publishing demo/app from %s:\n%s", sample, strings.TrimSuffix(devSample, "\n"))
	if err := step("push", "push", "demo/app", "--file", sample, "--message", "first cut from lehr dev"); err != nil {
		return err
	}
	ns, err := c.GetNamespace(ctx, "demo/app")
	if err != nil {
		return err
	}
	base := ns.GetLatestVersion()

	say("reading it back")
	if err := step("get", "get", "demo/app"); err != nil {
		return err
	}
	say("patching one key against version %d", base)
	if err := step("patch", "patch", "demo/app", "--base", strconv.FormatUint(base, 10),
		"--set-json", "limits/rps=250", "--message", "more headroom"); err != nil {
		return err
	}
	say("what changed, and the history")
	if err := step("diff", "diff", "demo/app", strconv.FormatUint(base, 10), strconv.FormatUint(base+1, 10)); err != nil {
		return err
	}
	if err := step("history", "history", "demo/app", "--limit", "5"); err != nil {
		return err
	}
	if zones, err := c.ListZones(ctx); err == nil && len(zones) == 0 {
		fmt.Fprintln(e.stdout, "\n(no zones yet: distributors register theirs when they connect)")
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// joinArgs quotes arguments for display.
func joinArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'{}$*?") {
			a = strconv.Quote(a)
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}
