package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/testenv/devtour"
)

// runDev is "lehr dev": its flags, and the tour (testenv/devtour) run with
// lehr's own commands, in-process.
func runDev(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr dev", doc{
		usage:   "lehr dev [flags]",
		summary: "run the whole system locally with a guided demo (make run)",
		about: `Starts the whole system in this process, on loopback: control on an embedded
etcd running the rollout strategist, and --zones zones (zone-a, zone-b, …),
each with a distributor (QUIC, mutual TLS with a development CA made for the
run) and --hosts-per-zone agents (Badger cache, namespace files, a unix
socket for consumers). On every host a demo service subscribes to demo/app,
prints every callback it gets, serves 100 synthetic requests a second whose
error ratio and latency follow demo.error_ratio and demo.latency_ms (counted
on its own /metrics, which its agent scrapes every second for canary
analysis), and refuses a configuration whose demo.error_ratio is above 0.5
(it would fail most requests). With a Prometheus server at hand
(bin/prometheus, which scripts/deps.sh extracts, or prometheus on $PATH;
--prometheus), it also starts one scraping every demo service each second,
labelled host and zone, as control's --metrics-url, so canary checks written
as queries run against it (docs/canary.md, "Sources: agent-scraped and
time-series"); --metrics-url names one of your own instead.

Then it walks through the lehr commands: it creates the domain "demo",
pushes demo/app (a first version goes everywhere at once) and waits until
every host has it; patches one key and follows the rollout — one canary
host per zone, judged by canary analysis against the other hosts, then the
first zone, then the rest, with bakes of seconds (rollout.Fast); then makes
a bad change the services accept but fail a fifth of their requests under,
shows the canary analysis catch it and the change rolled back before any
other host saw it; and shows the diff, the history and a zone's status. Then it keeps running, consumers printing every change, so
you can push your own changes and watch them from another terminal, until
Ctrl-C stops everything. The temporary data is removed on exit (pass
--data-dir to keep it).

Control listens on 127.0.0.1:7400 (metrics on 127.0.0.1:7401), the address
every client command uses by default, and serves its API as HTTP/JSON on
127.0.0.1:7402 (docs/operations.md's curl examples), with the operator
console at http://127.0.0.1:7402/console/ for a browser. It binds them as it
starts; if one is busy it takes a free port instead and says so, and every
command it prints then names the address with --control (and it shows the
export LEHR_CONTROL=… that makes README's commands reach it too).`,
		examples: []string{
			"lehr dev",
			"lehr dev --listen 127.0.0.1:7500     # then: lehr get demo/app --control 127.0.0.1:7500",
			"lehr dev --data-dir ./dev-data        # keep the data between runs",
			"lehr dev --log-level info             # see what the daemons do",
			"lehr dev --prometheus off             # no Prometheus, even if one is installed",
		},
	})
	listen := fs.String("listen", "", "control's gRPC `address` (default 127.0.0.1:7400, or a free port if it is busy)")
	metricsListen := fs.String("metrics-listen", "", "control's metrics HTTP `address` (default 127.0.0.1:7401, or a free port if it is busy)")
	httpListen := fs.String("http-listen", "", "control's HTTP/JSON API `address` (default "+devtour.DefaultHTTPListen+", or a free port if it is busy; \"off\" serves none)")
	dataDir := fs.String("data-dir", "", "keep the data in this `directory` instead of a temporary one")
	nZones := fs.Int("zones", 2, "number of `zones` (1 to 26)")
	hostsPerZone := fs.Int("hosts-per-zone", 4, "agents per zone, each with a demo service (1 to 20)")
	prom := fs.String("prometheus", "auto", "Prometheus server `binary` to start, scraping every demo service (labels host and zone), as control's --metrics-url for canary checks written as queries: \"auto\" starts bin/prometheus or prometheus on $PATH if there is one (scripts/deps.sh extracts it), \"off\" none")
	metricsURL := fs.String("metrics-url", "", "control's metrics source instead of a Prometheus it starts: the base `URL` of a Prometheus-compatible API you run (implies --prometheus off)")
	lf := addLogFlags(fs)
	lf.Level = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	if *nZones < 1 || *nZones > devtour.MaxZones {
		return usageError(e, fs, "--zones %d: want 1 to %d", *nZones, devtour.MaxZones)
	}
	if *hostsPerZone < 1 || *hostsPerZone > devtour.MaxHostsPerZone {
		return usageError(e, fs, "--hosts-per-zone %d: want 1 to %d", *hostsPerZone, devtour.MaxHostsPerZone)
	}
	logger, err := lf.Logger(e.stderr)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	promSet := false
	fs.Visit(func(f *flag.Flag) { promSet = promSet || f.Name == "prometheus" })
	promBin := ""
	switch {
	case *metricsURL != "" && promSet && *prom != "off":
		return usageError(e, fs, "--metrics-url and --prometheus %s: control has one metrics source; give one", *prom)
	case *metricsURL != "":
		if _, err := metricsource.New(metricsource.Options{URL: *metricsURL}); err != nil {
			return usageError(e, fs, "--metrics-url: %v", strings.TrimPrefix(err.Error(), "metrics source: "))
		}
	case *prom == "auto":
		promBin = devtour.FindPrometheus()
	case *prom != "off":
		if _, err := os.Stat(*prom); err != nil {
			return usageError(e, fs, "--prometheus: %v", err)
		}
		promBin = *prom
	}
	if e.checkOnly {
		return exitOK
	}
	err = devtour.Run(ctx, devtour.Options{
		Dir:                  *dataDir,
		Zones:                *nZones,
		HostsPerZone:         *hostsPerZone,
		ControlListen:        *listen,
		ControlMetricsListen: *metricsListen,
		ControlHTTPListen:    *httpListen,
		Logger:               logger,
		Out:                  e.stdout,
		Lehr: func(ctx context.Context, stdout io.Writer, args ...string) int {
			ce := *e
			ce.stdout, ce.ready = stdout, nil
			return run(ctx, args, &ce)
		},
		Ready:      e.ready,
		Prometheus: promBin,
		MetricsURL: *metricsURL,
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		return exitError
	}
	return exitOK
}
