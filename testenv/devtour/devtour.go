// Package devtour is "lehr dev" (make run): the whole system started in
// one process (testenv/devcluster), a demo service on every host
// (testenv/demoservice) printing every callback it gets, and a guided
// tour of the lehr commands — a first push, a good change rolled out stage
// by stage, a bad change caught by canary analysis and rolled back, a
// policy change previewed on live traffic and committed, then the diff,
// the history and a zone's status — each command printed and its output
// shown as a user would see them, each change waited for until it has
// landed on every host. Then the system keeps running for the user until
// the context ends.
//
// The tour runs real lehr commands, through Options.Lehr: showing the
// commands a user would type is its point. It owns everything else: the
// data directory, the cluster, the demo services, their decision log and
// every goroutine they start, all stopped before Run returns.
//
// Imported by cmd/lehr (lehr dev).
package devtour

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/testenv/devcluster"
)

// Limits of Options.Zones and Options.HostsPerZone.
const (
	MaxZones        = 26 // zone-a to zone-z
	MaxHostsPerZone = 20
)

// Options configure Run. Out and Lehr are required; every other zero
// value is what "make run" runs.
type Options struct {
	// Dir holds control's etcd, the agents' data, the tour's files and the
	// demo services' decision log, and is kept. Empty means a temporary
	// directory, written without fsync and removed when Run returns.
	Dir string
	// Zones is how many zones run, named zone-a, zone-b, …: 1 to
	// MaxZones. Zero means 2.
	Zones int
	// HostsPerZone is how many agents every zone runs, each with a demo
	// service: 1 to MaxHostsPerZone. Zero means 4 (canary analysis wants
	// at least 6 control hosts, docs/canary.md).
	HostsPerZone int
	// ControlListen is control's gRPC address. Empty means
	// control.DefaultListen, or a free port on its host if that one is
	// busy (the tour says so).
	ControlListen string
	// ControlMetricsListen is control's metrics HTTP address. Empty means
	// control.DefaultMetricsListen, or a free port if that one is busy.
	ControlMetricsListen string
	// ControlHTTPListen is the address of control's HTTP/JSON API. Empty
	// means DefaultHTTPListen (127.0.0.1:7402, where docs/operations.md's
	// curl examples look), or a free port if that one is busy; "off"
	// serves none.
	ControlHTTPListen string
	// Logger receives every daemon's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Out receives what the user reads: the tour's narration ("==> …"),
	// every command and its output, and the demo services' callbacks. The
	// services print from their own goroutines; Run serialises every
	// write to Out, Lehr's included.
	Out io.Writer
	// Lehr runs one lehr command in-process — args as a user types them
	// after "lehr" — writing its standard output to stdout, and returns
	// its exit code (0 success, 1 failure). The tour has printed the
	// command line ("$ lehr …") before it calls Lehr. Where the command's
	// standard error goes is Lehr's choice.
	Lehr func(ctx context.Context, stdout io.Writer, args ...string) int
	// Ready, if set, is called once, with control's address, when the tour
	// is over and the system keeps running for the user.
	Ready func(controlAddr string)
	// Prometheus, if set, is the path of a Prometheus server to start
	// (FindPrometheus finds one): it scrapes every demo service each
	// second, labelled host and zone, and is control's metrics source
	// (lehr control --metrics-url), so canary checks written as queries
	// run against it. Its data is under Dir/prometheus.
	Prometheus string
	// MetricsURL, if set, is control's metrics source instead: a
	// Prometheus-compatible API the user runs. Not with Prometheus.
	MetricsURL string
}

// Run runs "lehr dev": it starts the system, walks the tour, and keeps the
// system running until ctx ends, then stops everything it started and
// returns. It returns nil when ctx ended it (also while starting or in the
// middle of the tour), and an error when the system did not start, a step
// of the tour failed (then Run stops at once), or the system did not stop
// cleanly.
func Run(ctx context.Context, opts Options) error {
	if opts.Out == nil || opts.Lehr == nil {
		return errors.New("devtour: Options.Out and Options.Lehr are required")
	}
	if opts.Zones == 0 {
		opts.Zones = 2
	}
	if opts.HostsPerZone == 0 {
		opts.HostsPerZone = 4
	}
	if opts.Zones < 1 || opts.Zones > MaxZones {
		return fmt.Errorf("devtour: Options.Zones is %d: want 1 to %d", opts.Zones, MaxZones)
	}
	if opts.HostsPerZone < 1 || opts.HostsPerZone > MaxHostsPerZone {
		return fmt.Errorf("devtour: Options.HostsPerZone is %d: want 1 to %d", opts.HostsPerZone, MaxHostsPerZone)
	}
	t := &tour{out: &lockedWriter{w: opts.Out}, lehr: opts.Lehr, zones: zoneNames(opts.Zones)}

	dir, temp := opts.Dir, opts.Dir == ""
	if temp {
		var err error
		if dir, err = os.MkdirTemp("", "lehr-dev-"); err != nil {
			return err
		}
		defer func() {
			os.RemoveAll(dir)
			t.say("removed %s", dir)
		}()
	}
	t.dir = dir
	metricsURL := opts.MetricsURL
	if opts.Prometheus != "" {
		if opts.MetricsURL != "" {
			return errors.New("devtour: Options.Prometheus and Options.MetricsURL both set: control has one metrics source")
		}
		prom, err := startPrometheus(ctx, opts.Prometheus, filepath.Join(dir, "prometheus"))
		if err != nil {
			if ctx.Err() != nil {
				t.say("interrupted while starting")
				return nil
			}
			return err
		}
		defer prom.stop()
		t.prom, metricsURL = prom, prom.url
		t.say("started %s on %s: it will scrape every demo service each second (labels host and zone), and is control's --metrics-url", opts.Prometheus, prom.url)
	} else if metricsURL != "" {
		t.say("control's metrics source (--metrics-url) is %s", metricsURL)
	}
	t.say("starting control with embedded etcd in %s", dir)
	t.say("starting zones %s: a distributor (QUIC, mutual TLS) and %d %s each", strings.Join(t.zones, ", "), opts.HostsPerZone, plural(opts.HostsPerZone, "agent", "agents"))
	started := time.Now()
	cl, err := startCluster(ctx, devcluster.Options{
		Dir:                 dir,
		Zones:               t.zones,
		DistributorsPerZone: 1,
		AgentsPerZone:       opts.HostsPerZone,
		Rollouts:            true,
		RolloutInterval:     200 * time.Millisecond,
		Logger:              opts.Logger,
		MetricsURL:          metricsURL,
		// The interval of analyses that only query: two of Prometheus's
		// 1 s scrapes per window, and the fast bakes' seconds.
		MetricsStep: 2 * time.Second,
		// A throwaway directory need not survive a machine crash.
		NoSync: temp,
	}, listenChoice(opts.ControlListen, defaultListen, "gRPC"), listenChoice(opts.ControlMetricsListen, defaultMetricsListen, "metrics"),
		listenChoice(opts.ControlHTTPListen, defaultHTTPListen, "HTTP/JSON"), t.say)
	if err != nil {
		if ctx.Err() != nil {
			t.say("interrupted while starting")
			return nil
		}
		return err
	}
	t.cl = cl
	t.sayStarted(time.Since(started))

	decisionsPath := filepath.Join(dir, "decisions.log")
	decisions, err := os.OpenFile(decisionsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		cl.Close()
		return err
	}
	defer decisions.Close()
	t.say("the demo services' policy-preview decision logs go to %s", decisionsPath)

	demoCtx, stopDemo := context.WithCancel(ctx)
	services, demoErr := t.startServices(demoCtx, decisions)
	if demoErr == nil && t.prom != nil {
		demoErr = t.prom.writeTargets(services)
	}
	if demoErr == nil {
		t.services = services
		demoErr = t.walk(demoCtx)
	}
	if demoErr == nil {
		t.sayReady(ctx)
		if opts.Ready != nil {
			opts.Ready(cl.ControlAddr())
		}
		<-ctx.Done()
	}
	t.say("shutting down")
	stopDemo()
	for _, s := range services {
		s.close()
	}
	var errs []error
	if err := cl.Close(); err != nil {
		errs = append(errs, err)
	}
	if demoErr != nil && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("demo: %w", demoErr))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	t.say("stopped cleanly")
	return nil
}

// tour is one run of the tour: what every step reads and prints to.
type tour struct {
	out      io.Writer // a *lockedWriter
	lehr     func(ctx context.Context, stdout io.Writer, args ...string) int
	zones    []string
	dir      string
	cl       *devcluster.Cluster // set once started
	prom     *prometheus         // the Prometheus it started, if any
	services []*hostService      // set once every demo service has started
}

// say narrates: one line, "==> " first.
func (t *tour) say(format string, args ...any) {
	fmt.Fprintf(t.out, "==> "+format+"\n", args...)
}

// sayStarted tells where everything started listens.
func (t *tour) sayStarted(took time.Duration) {
	metricsAt := "off"
	if ma := t.cl.ControlMetricsAddr(); ma != "" {
		metricsAt = "http://" + ma + "/metrics"
	}
	httpAt := "off"
	if ha := t.cl.ControlHTTPAddr(); ha != "" {
		httpAt = "http://" + ha
	}
	t.say("control serving on %s (metrics %s, HTTP/JSON %s)", t.cl.ControlAddr(), metricsAt, httpAt)
	if u := ConsoleURL(t.cl.ControlHTTPAddr()); u != "" {
		t.say("operator console: %s   (open it in a browser: docs/operations.md, \"Console\")", u)
	}
	for _, z := range t.zones {
		for _, d := range t.cl.Distributors(z) {
			t.say("%s: distributor %s on udp %s", z, d.ID, d.Addr())
		}
		for _, a := range t.cl.Agents(z) {
			t.say("%s: agent %s, socket %s", z, a.HostID, a.Socket())
		}
	}
	t.say("all started in %s", took.Round(time.Millisecond))
}

// controlFlag is " --control ADDR" when control is not at the address lehr
// commands reach by default, so that every command the tour prints
// reaches it as printed; "" when it is.
func (t *tour) controlFlag() string {
	if addr := t.cl.ControlAddr(); addr != control.DefaultListen {
		return " --control " + addr
	}
	return ""
}

// sayReady tells the user what to try while the system keeps running.
func (t *tour) sayReady(ctx context.Context) {
	addr := t.cl.ControlAddr()
	controlFlag := t.controlFlag()
	latest := uint64(0)
	if v, err := t.cl.Producer().GetNamespace(ctx, appNamespace); err == nil {
		latest = v.GetLatestVersion()
	}
	sock := ""
	if as := t.cl.Agents(t.zones[0]); len(as) > 0 {
		sock = as[0].Socket()
	}
	t.say("ready. The consumers above keep printing every change. From another terminal, try:")
	fmt.Fprintf(t.out, `
    lehr watch %[2]s --socket %[3]s
    lehr patch %[2]s%[1]s --base %[4]d --set greeting=hi --message "my change"
    echo '{"greeting": "hi", "limits/rps": 300}' > my.json
    lehr push %[2]s%[1]s --file my.json --message "my own snapshot"
    lehr zones status zone-a%[1]s
    lehr rollout status %[2]s%[1]s
    lehr rollout events %[2]s%[1]s
    lehr history %[2]s%[1]s
    lehr policy experiment list %[5]s%[1]s     (docs/preview.md: preview a policy change)
%[6]s
  (lehr is ./bin/lehr after 'make build'.) Press Ctrl-C to stop.

`, controlFlag, appNamespace, sock, latest, policyNamespace, curlHint(t.cl.ControlHTTPAddr()))
	if controlFlag != "" {
		fmt.Fprintf(t.out, `  Control is on %[1]s, not on %[2]s where lehr commands look by default:
  the commands above say so with --control. Or, in that terminal,

    export LEHR_CONTROL=%[1]s

  and every lehr command, README.md's too, reaches this control.

`, addr, control.DefaultListen)
	}
	if t.prom != nil {
		fmt.Fprintf(t.out, `  Prometheus on %[1]s scrapes every demo service (http_requests_total{code},
  labels host and zone) and is control's --metrics-url: a canary check may
  query it instead of what the agents scrape (docs/canary.md, "Sources:
  agent-scraped and time-series"), e.g. in a rollout policy's analysis:

    {name: errors, kind: proportion, query: {
      numerator:   'sum by (host) (increase(http_requests_total{code="500",$population}[$interval]))',
      denominator: 'sum by (host) (increase(http_requests_total{$population}[$interval]))'}}

`, t.prom.url)
	}
}

// ConsoleURL is the operator console's address on control's HTTP/JSON
// listener addr (control/console), "" when control serves none.
func ConsoleURL(addr string) string {
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/console/"
}

// curlHint is the hint's line reading the demo namespace over HTTP/JSON
// at addr (docs/operations.md, "HTTP/JSON"), "" when control serves none.
func curlHint(addr string) string {
	if addr == "" {
		return ""
	}
	return fmt.Sprintf("    curl -sS --fail-with-body http://%s/v1/namespaces/%s:get     (HTTP/JSON: docs/operations.md)\n", addr, appNamespace) +
		fmt.Sprintf("    open %s in a browser     (the operator console: the fleet, %s's rollouts, the audit log)\n", ConsoleURL(addr), appNamespace)
}

// zoneNames names n zones: zone-a, zone-b, …
func zoneNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("zone-%c", 'a'+i))
	}
	return out
}

// DefaultHTTPListen is where lehr dev serves control's HTTP/JSON API
// unless told otherwise (control serves none by default).
const DefaultHTTPListen = "127.0.0.1:7402"

// The addresses control listens on by default (tests change them).
var (
	defaultListen        = control.DefaultListen
	defaultMetricsListen = control.DefaultMetricsListen
	defaultHTTPListen    = DefaultHTTPListen
)

// listenAddr is an address for control to listen on: one given, which it
// must get, or a default, which falls back to a free port when busy.
type listenAddr struct {
	addr     string
	fallback bool   // a default: a free port will do when it is busy
	what     string // "gRPC", "metrics", "HTTP/JSON"
}

func listenChoice(given, def, what string) *listenAddr {
	if given != "" {
		return &listenAddr{addr: given, what: what}
	}
	return &listenAddr{addr: def, fallback: true, what: what}
}

// startCluster starts the cluster with control listening on grpc,
// metrics and httpAPI ("off": none). Control binds them itself, at its
// start — no check that a port is free and a bind later, between which
// another process could take it (issue 31) — and when a default one is
// busy the cluster starts again with a free port of the same host in its
// place, saying so.
func startCluster(ctx context.Context, o devcluster.Options, grpc, metrics, httpAPI *listenAddr, say func(string, ...any)) (*devcluster.Cluster, error) {
	for {
		o.ControlListen, o.ControlMetricsListen, o.ControlHTTPListen = grpc.addr, metrics.addr, httpAPI.addr
		if o.ControlHTTPListen == "off" {
			o.ControlHTTPListen = ""
		}
		cl, err := devcluster.Start(ctx, o)
		if err == nil {
			return cl, nil
		}
		busy, ok := busyAddr(err)
		var l *listenAddr
		switch {
		case ok && busy == grpc.addr && grpc.fallback:
			l = grpc
		case ok && busy == metrics.addr && metrics.fallback:
			l = metrics
		case ok && busy == httpAPI.addr && httpAPI.fallback:
			l = httpAPI
		default:
			return nil, err
		}
		host, _, _ := net.SplitHostPort(l.addr)
		say("%s port %s is busy; using a free port instead", l.what, l.addr)
		l.addr, l.fallback = net.JoinHostPort(host, "0"), false
	}
}

// busyAddr returns the address a listen failed on because it was in use.
func busyAddr(err error) (string, bool) {
	var op *net.OpError
	if errors.Is(err, syscall.EADDRINUSE) && errors.As(err, &op) && op.Op == "listen" && op.Addr != nil {
		return op.Addr.String(), true
	}
	return "", false
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
