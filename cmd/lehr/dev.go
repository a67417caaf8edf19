package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/internal/termtext"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/demoservice"
	"lehr.dev/lehr/testenv/devcluster"
)

// devSample is the namespace "lehr dev" publishes.
const devSample = `{
  "greeting": "hello from lehr",
  "limits/rps": 100,
  "limits/burst": 20,
  "features": {"dark_mode": false, "beta_search": true},
  "owners": ["team-app"],
  "demo.error_ratio": 0.01,
  "demo.latency_ms": 20
}
`

// devNamespace is the namespace of the demo.
const devNamespace = "demo/app"

// devPolicy is the demo's policy namespace: who may call the demo
// services. Every demo service decides with it for its callers, and the
// tour previews a stricter version (docs/preview.md).
const devPolicy = "demo/access"

// devPolicyRules are devPolicy's first version; devExperimentRules the
// experiment the tour previews and commits.
const (
	devPolicyRules = `all:
  effect: allow
  condition: "true"
  description: every caller may, unless another rule denies
blocked:
  effect: deny
  condition: principal.user == "mallory"
  sensitive: [principal.token]
`
	devExperimentRules = devPolicyRules + `contractors:
  effect: deny
  condition: principal.user.startsWith("c-")
  description: contractors lose access
`
)

// devCallers are the users the demo services see, in turn.
var devCallers = []string{"ana", "ben", "c-eve", "mallory", "dan", "c-fay", "gus", "hal"}

// devDecisionInterval is how often each demo service decides for a caller.
const devDecisionInterval = 50 * time.Millisecond

// devZoneNames names n zones: zone-a, zone-b, …
func devZoneNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("zone-%c", 'a'+i))
	}
	return out
}

// devLandTimeout bounds the wait for a version to reach every zone.
const devLandTimeout = 60 * time.Second

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
(it would fail most requests).

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
every client command uses by default; if a port is busy it picks a free one
and says which.`,
		examples: []string{
			"lehr dev",
			"lehr dev --listen 127.0.0.1:7500     # then: lehr get demo/app --control 127.0.0.1:7500",
			"lehr dev --data-dir ./dev-data        # keep the data between runs",
			"lehr dev --log-level info             # see what the daemons do",
		},
	})
	listen := fs.String("listen", "", "control's gRPC `address` (default 127.0.0.1:7400, or a free port if it is busy)")
	metricsListen := fs.String("metrics-listen", "", "control's metrics HTTP `address` (default 127.0.0.1:7401, or a free port if it is busy)")
	dataDir := fs.String("data-dir", "", "keep the data in this `directory` instead of a temporary one")
	nZones := fs.Int("zones", 2, "number of `zones` (1 to 26)")
	hostsPerZone := fs.Int("hosts-per-zone", 4, "agents per zone, each with a demo service (1 to 20)")
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
	if *nZones < 1 || *nZones > 26 {
		return usageError(e, fs, "--zones %d: want 1 to 26", *nZones)
	}
	if *hostsPerZone < 1 || *hostsPerZone > 20 {
		return usageError(e, fs, "--hosts-per-zone %d: want 1 to 20", *hostsPerZone)
	}
	zones := devZoneNames(*nZones)
	logger, err := lf.Logger(e.stderr)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	// Consumers print from their own goroutines: serialise all output.
	out := &lockedWriter{w: e.stdout}
	de := *e
	de.stdout = out
	say := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }

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
	say("starting control with embedded etcd in %s", dir)
	say("starting zones %s: a distributor (QUIC, mutual TLS) and %d %s each", strings.Join(zones, ", "), *hostsPerZone, plural(*hostsPerZone, "agent", "agents"))
	started := time.Now()
	cl, err := devcluster.Start(ctx, devcluster.Options{
		Dir:                  dir,
		Zones:                zones,
		DistributorsPerZone:  1,
		AgentsPerZone:        *hostsPerZone,
		Rollouts:             true,
		RolloutInterval:      200 * time.Millisecond,
		Logger:               logger,
		ControlListen:        pickAddr(*listen, control.DefaultListen, "gRPC", say),
		ControlMetricsListen: pickAddr(*metricsListen, control.DefaultMetricsListen, "metrics", say),
		// A throwaway directory need not survive a machine crash.
		NoSync: temp,
	})
	if err != nil {
		if ctx.Err() != nil {
			say("interrupted while starting")
			return exitOK
		}
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		return exitError
	}
	addr := cl.ControlAddr()
	metricsAt := "off"
	if ma := cl.ControlMetricsAddr(); ma != "" {
		metricsAt = "http://" + ma + "/metrics"
	}
	say("control serving on %s (metrics %s)", addr, metricsAt)
	for _, z := range zones {
		for _, d := range cl.Distributors(z) {
			say("%s: distributor %s on udp %s", z, d.ID, d.Addr())
		}
		for _, a := range cl.Agents(z) {
			say("%s: agent %s, socket %s", z, a.HostID, a.Socket())
		}
	}
	say("all started in %s", time.Since(started).Round(time.Millisecond))

	demoCtx, stopDemo := context.WithCancel(ctx)
	decisionsPath := filepath.Join(dir, "decisions.log")
	decisions, err := os.OpenFile(decisionsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		stopDemo()
		return exitError
	}
	defer decisions.Close()
	say("the demo services' policy-preview decision logs go to %s", decisionsPath)
	cons, err := startDevConsumers(demoCtx, cl, zones, out, decisions, say)
	var demoErr error
	if err != nil {
		demoErr = err
	} else {
		demoErr = devDemo(demoCtx, &de, cl, cons, zones, dir, say)
	}
	if demoErr == nil {
		controlFlag := ""
		if addr != control.DefaultListen {
			controlFlag = " --control " + addr
		}
		latest := uint64(0)
		if v, err := cl.Producer().GetNamespace(ctx, devNamespace); err == nil {
			latest = v.GetLatestVersion()
		}
		sock := ""
		if as := cl.Agents(zones[0]); len(as) > 0 {
			sock = as[0].Socket()
		}
		say("ready. The consumers above keep printing every change. From another terminal, try:")
		fmt.Fprintf(out, `
    lehr watch %[2]s --socket %[3]s
    lehr patch %[2]s%[1]s --base %[4]d --set greeting=hi --message "my change"
    echo '{"greeting": "hi", "limits/rps": 300}' > my.json
    lehr push %[2]s%[1]s --file my.json --message "my own snapshot"
    lehr zones status zone-a%[1]s
    lehr rollout status %[2]s%[1]s
    lehr rollout events %[2]s%[1]s
    lehr history %[2]s%[1]s
    lehr policy experiment list %[5]s%[1]s     (docs/preview.md: preview a policy change)

  (lehr is ./bin/lehr after 'make build'.) Press Ctrl-C to stop.

`, controlFlag, devNamespace, sock, latest, devPolicy)
		if e.ready != nil {
			e.ready(addr)
		}
		<-ctx.Done()
	}
	say("shutting down")
	stopDemo()
	for _, c := range cons {
		c.close()
	}
	code = exitOK
	if err := cl.Close(); err != nil {
		fmt.Fprintf(e.stderr, "lehr dev: %v\n", err)
		code = exitError
	}
	if demoErr != nil && ctx.Err() == nil {
		fmt.Fprintf(e.stderr, "lehr dev: demo: %v\n", demoErr)
		code = exitError
	}
	if code == exitOK {
		say("stopped cleanly")
	}
	return code
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

// devConsumer is the demo service of one host: it prints its callbacks,
// remembers the last version they delivered, and serves synthetic traffic
// shaped by the configuration it holds.
type devConsumer struct {
	zone    string
	host    string
	client  *consumer.Client
	sub     *consumer.Subscription
	access  *consumer.Subscription // devPolicy
	svc     *demoservice.Service
	metrics string // the service's /metrics URL
	stop    context.CancelFunc
	wg      sync.WaitGroup // the service's traffic and metrics goroutines

	mu      sync.Mutex
	seen    uint64
	changed chan struct{} // closed and replaced when seen moves
}

// startDevConsumers starts a demo service on every host, subscribed to the
// demo namespace through the host's agent, printing every callback to out.
func startDevConsumers(ctx context.Context, cl *devcluster.Cluster, zones []string, out, decisions io.Writer, say func(string, ...any)) ([]*devConsumer, error) {
	var cons []*devConsumer
	seed := uint64(0)
	for _, z := range zones {
		for i, a := range cl.Agents(z) {
			seed++
			dc, err := startDevConsumer(ctx, cl, z, i, a.HostID, seed, out, decisions)
			if err != nil {
				return cons, err
			}
			cons = append(cons, dc)
			say("%s: demo service subscribed to %s through agent %s, metrics on %s", z, devNamespace, a.HostID, dc.metrics)
		}
	}
	return cons, nil
}

// startDevConsumer starts the demo service of host (the i-th agent of
// zone z): its traffic, its metrics endpoint on a loopback port, and its
// subscription.
func startDevConsumer(ctx context.Context, cl *devcluster.Cluster, z string, i int, host string, seed uint64, out, decisions io.Writer) (*devConsumer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo service on %s: metrics listener: %w", host, err)
	}
	svc := demoservice.New(demoservice.Options{Seed: seed})
	sctx, stop := context.WithCancel(ctx)
	dc := &devConsumer{zone: z, host: host, svc: svc, stop: stop, changed: make(chan struct{}),
		metrics: "http://" + ln.Addr().String() + "/metrics"}
	dc.wg.Go(func() { svc.Run(sctx) })
	dc.wg.Go(func() {
		if err := svc.Serve(sctx, ln); err != nil {
			fmt.Fprintf(out, "    [%s service on %s] %v\n", z, host, err)
		}
	})
	c, err := cl.Consumer(z, i, func(o *consumer.Options) {
		o.MetricsURL, o.DecisionLog, o.PreviewReportInterval = dc.metrics, decisions, time.Second
	})
	if err != nil {
		dc.close()
		return nil, err
	}
	dc.client = c
	sub, err := c.Subscribe(ctx, devNamespace)
	if err != nil {
		dc.close()
		return nil, fmt.Errorf("subscribe to %s in %s: %w", devNamespace, z, err)
	}
	dc.sub = sub
	if dc.access, err = c.Subscribe(ctx, devPolicy); err != nil {
		dc.close()
		return nil, fmt.Errorf("subscribe to %s in %s: %w", devPolicy, z, err)
	}
	dc.wg.Go(func() { decideCallers(sctx, dc.access, int(seed)) })
	sub.OnChange(func(ch consumer.Change) error {
		fmt.Fprint(out, formatCallback(z, host, ch))
		dc.mu.Lock()
		dc.seen = ch.New.Version()
		close(dc.changed)
		dc.changed = make(chan struct{})
		dc.mu.Unlock()
		return svc.Take(ch.New)
	})
	return dc, nil
}

// decideCallers is the demo service's access check: every
// devDecisionInterval it decides, with devPolicy, for the next caller of
// devCallers (starting at offset), as a service would for each request.
// The decisions themselves are not used: the demo serves everyone; what
// matters is that the policy and its experiments are evaluated on traffic.
func decideCallers(ctx context.Context, sub *consumer.Subscription, offset int) {
	t := time.NewTicker(devDecisionInterval)
	defer t.Stop()
	for i := offset; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		user := devCallers[i%len(devCallers)]
		// No version yet is ErrNoPolicy: nothing to decide with.
		sub.Evaluate(ctx, policy.Input{
			Principal: map[string]any{"user": user, "token": "tok-" + user},
			Request:   map[string]any{"path": "/app"},
			Now:       time.Now(),
		})
	}
}

// formatCallback is what a demo consumer prints for one callback.
func formatCallback(zone, host string, ch consumer.Change) string {
	var b strings.Builder
	changes := viewChanges(ch.Old, ch.New)
	rb := ""
	if ch.Rollback() {
		rb = fmt.Sprintf(", a rollback to version %d's content", ch.New.RollbackOf())
	}
	fmt.Fprintf(&b, "    [%s service on %s] callback: %s version %d (was %d)%s, %d changed %s\n", zone, host,
		clean(ch.New.Namespace()), ch.New.Version(), ch.Old.Version(), rb, len(changes), plural(len(changes), "key", "keys"))
	if _, err := demoservice.Parse(ch.New); err != nil {
		fmt.Fprintf(&b, "        ! %s\n", clean(err.Error()))
	}
	for i, c := range changes {
		if i == 8 {
			fmt.Fprintf(&b, "        … and %d more\n", len(changes)-i)
			break
		}
		switch c.Kind {
		case "added":
			fmt.Fprintf(&b, "        + %s = %s\n", clean(c.Key), termtext.Short(c.New))
		case "removed":
			fmt.Fprintf(&b, "        - %s\n", clean(c.Key))
		default:
			fmt.Fprintf(&b, "        ~ %s: %s → %s\n", clean(c.Key), termtext.Short(c.Old), termtext.Short(c.New))
		}
	}
	return b.String()
}

// wait blocks until the consumer's callbacks have delivered version v or
// later.
func (c *devConsumer) wait(ctx context.Context, v uint64) error {
	for {
		c.mu.Lock()
		seen, ch := c.seen, c.changed
		c.mu.Unlock()
		if seen >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s service on %s at version %d, waiting for %d: %w", c.zone, c.host, seen, v, ctx.Err())
		}
	}
}

func (c *devConsumer) close() {
	if c.sub != nil {
		c.sub.Close()
	}
	if c.client != nil {
		c.client.Close()
	}
	c.stop()
	c.wg.Wait()
}

// waitLanded waits until every host's demo service has version v, and
// says so.
func waitLanded(ctx context.Context, cons []*devConsumer, v uint64, since time.Time, say func(string, ...any)) error {
	say("waiting for %s version %d to reach the demo service on every host…", devNamespace, v)
	ctx, cancel := context.WithTimeout(ctx, devLandTimeout)
	defer cancel()
	for _, c := range cons {
		if err := c.wait(ctx, v); err != nil {
			return fmt.Errorf("%s version %d did not land everywhere within %v: %w (rerun with --log-level info to see why)",
				devNamespace, v, devLandTimeout, err)
		}
	}
	say("%s version %d landed on every host %s after it was published", devNamespace, v, time.Since(since).Round(time.Millisecond))
	return nil
}

// devDemo walks through the round trip, printing each command and its
// output as a user would see them, and waiting for each change to land.
func devDemo(ctx context.Context, e *env, cl *devcluster.Cluster, cons []*devConsumer, zones []string, dir string, say func(string, ...any)) error {
	addr := cl.ControlAddr()
	client := []string{"--control", addr, "--as", "lehr-dev"}
	step := func(what string, args ...string) error {
		fmt.Fprintf(e.stdout, "\n$ lehr %s\n", joinArgs(args))
		if code := run(ctx, append(slices.Clone(args), client...), e); code != exitOK {
			return fmt.Errorf("%s failed (exit %d)", what, code)
		}
		return nil
	}
	c := cl.Producer()

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
	say("publishing %s from %s:\n%s", devNamespace, sample, strings.TrimSuffix(devSample, "\n"))
	published := time.Now()
	if err := step("push", "push", devNamespace, "--file", sample, "--message", "first cut from lehr dev"); err != nil {
		return err
	}
	ns, err := c.GetNamespace(ctx, devNamespace)
	if err != nil {
		return err
	}
	base := ns.GetLatestVersion()
	if err := waitLanded(ctx, cons, base, published, say); err != nil {
		return err
	}

	if err := waitHistory(ctx, cl, zones, say); err != nil {
		return err
	}
	say("reading it back from control")
	if err := step("get", "get", devNamespace); err != nil {
		return err
	}
	say("a good change: patching one key against version %d; it rolls out stage by stage", base)
	published = time.Now()
	if err := step("patch", "patch", devNamespace, "--base", strconv.FormatUint(base, 10),
		"--set-json", "limits/rps=250", "--message", "more headroom"); err != nil {
		return err
	}
	if err := step("rollout wait", "rollout", "wait", devNamespace); err != nil {
		return err
	}
	if err := waitLanded(ctx, cons, base+1, published, say); err != nil {
		return err
	}
	if err := step("rollout events", "rollout", "events", devNamespace); err != nil {
		return err
	}
	say("the canary analysis that let it through: the canary hosts against the others, check by check")
	if err := step("canary show", "canary", "show", fmt.Sprintf("%s@%d/stage-1", devNamespace, base+1)); err != nil {
		return err
	}

	say("a bad change: demo.error_ratio 0.2 — the services accept it, then fail a fifth of their requests; the canary analysis catches it")
	bad := base + 2
	published = time.Now()
	fmt.Fprintf(e.stdout, "\n$ lehr patch %s --base %d --set-json demo.error_ratio=0.2\n", devNamespace, base+1)
	if code := run(ctx, []string{"patch", devNamespace, "--base", strconv.FormatUint(base+1, 10), "--set-json", "demo.error_ratio=0.2",
		"--message", "try a higher error ratio", "--control", cl.ControlAddr(), "--as", "lehr-dev"}, e); code != exitOK {
		return fmt.Errorf("patch failed (exit %d)", code)
	}
	fmt.Fprintf(e.stdout, "\n$ lehr rollout wait %s\n", devNamespace)
	if code := run(ctx, []string{"rollout", "wait", devNamespace, "--control", cl.ControlAddr()}, e); code != exitError {
		return fmt.Errorf("the bad change's rollout did not fail (exit %d)", code)
	}
	r, err := c.GetRollout(ctx, devNamespace, bad)
	if err != nil {
		return err
	}
	if err := waitLanded(ctx, cons, r.GetRollbackVersion(), published, say); err != nil {
		return err
	}
	var saw []string
	for _, zh := range r.GetCanaryHosts() {
		saw = append(saw, zh.GetHosts()...)
	}
	say("version %d reached only the canary hosts (%s) and was rolled back: every host now runs version %d, version %d's content",
		bad, strings.Join(saw, ", "), r.GetRollbackVersion(), base+1)
	if err := step("rollout events", "rollout", "events", devNamespace); err != nil {
		return err
	}
	if err := step("canary show", "canary", "show", fmt.Sprintf("%s@%d/stage-1", devNamespace, bad)); err != nil {
		return err
	}
	if err := devPreview(ctx, e, cl, dir, step, say); err != nil {
		return err
	}
	say("what changed, and the history")
	if err := step("diff", "diff", devNamespace, strconv.FormatUint(base, 10), strconv.FormatUint(base+1, 10)); err != nil {
		return err
	}
	if err := step("history", "history", devNamespace, "--limit", "5"); err != nil {
		return err
	}
	say("what %s's distributor reports (agents per version, every second)", zones[0])
	waitReported(ctx, c, zones[0], r.GetRollbackVersion())
	if err := step("zone status", "zones", "status", zones[0]); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// devPreview is the policy-preview part of the tour (docs/preview.md):
// the demo services decide who may call them with devPolicy; a stricter
// version is previewed on their traffic as an experiment, its counts
// shown, and committed.
func devPreview(ctx context.Context, e *env, cl *devcluster.Cluster, dir string, step func(string, ...string) error, say func(string, ...any)) error {
	c := cl.Producer()
	live := filepath.Join(dir, "demo-access.yaml")
	exp := filepath.Join(dir, "demo-access-experiment.yaml")
	if err := os.WriteFile(live, []byte(devPolicyRules), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(exp, []byte(devExperimentRules), 0o644); err != nil {
		return err
	}
	say("policy preview: every demo service decides with %s who may call it (%d decisions a second per host)", devPolicy, int(time.Second/devDecisionInterval))
	if ns, err := c.GetNamespace(ctx, devPolicy); err == nil {
		fmt.Fprintf(e.stdout, "%s exists already at version %d\n", devPolicy, ns.GetLatestVersion())
	} else if err := step("push policy", "push", devPolicy, "--kind", "policy", "--file", live, "--message", "who may call the demo"); err != nil {
		return err
	}
	say("a stricter version, previewed first: contractors (c-*) would lose access")
	const id = "no-contractors"
	if _, err := c.Experiment(ctx, devPolicy, id); err == nil {
		if _, err := c.DeleteExperiment(ctx, devPolicy, id, ""); err != nil {
			return err
		}
	}
	if err := step("experiment create", "policy", "experiment", "create", devPolicy, id, "--file", exp); err != nil {
		return err
	}
	if err := step("experiment start", "policy", "experiment", "start", devPolicy, id); err != nil {
		return err
	}
	say("the hosts evaluate it beside the live rules and count; waiting for %d decisions…", devPreviewDecisions)
	x, err := c.Experiment(ctx, devPolicy, id)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, devLandTimeout)
	defer cancel()
	for {
		counts, err := c.ExperimentCounts(wctx, devPolicy, id)
		if err != nil {
			return err
		}
		var n uint64
		for _, t := range counts.GetTotals() {
			d, _ := preview.Decisions(t)
			n += d
		}
		if n >= devPreviewDecisions {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the hosts counted %d decisions of %s in %s: %w", n, id, devLandTimeout, wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := step("experiment counts", "policy", "experiment", "counts", devPolicy, id); err != nil {
		return err
	}
	say("a quarter of the callers would be denied, as intended: commit it with the etag reviewed (%s); it rolls out like any change", x.GetEtag())
	if err := step("experiment commit", "policy", "experiment", "commit", devPolicy, id, "--etag", x.GetEtag(),
		"--min-evaluations", strconv.Itoa(devPreviewDecisions), "--max-disagreement", "0.3", "--message", "no contractors"); err != nil {
		return err
	}
	return step("rollout wait", "rollout", "wait", devPolicy)
}

// devPreviewDecisions is how many decisions the tour waits for before it
// shows an experiment's counts.
const devPreviewDecisions = 200

// devHistory is how many intervals of requests every agent keeps of its
// demo service before the first change: the "before" of canary analysis.
const devHistory = 5

// waitHistory waits until every agent keeps devHistory intervals of its
// demo service's requests.
func waitHistory(ctx context.Context, cl *devcluster.Cluster, zones []string, say func(string, ...any)) error {
	say("letting every agent keep %d seconds of its demo service's metrics: canary analysis compares each host with itself before a change", devHistory)
	ctx, cancel := context.WithTimeout(ctx, devLandTimeout)
	defer cancel()
	for _, z := range zones {
		for _, a := range cl.Agents(z) {
			for {
				resp, err := a.Local().Signals(ctx, &lehrpb.AgentSignalsRequest{Namespace: devNamespace})
				if err == nil && countPositive(resp.GetSignals(), "requests") >= devHistory {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("agent %s kept fewer than %d intervals of requests within %v: %w", a.HostID, devHistory, devLandTimeout, ctx.Err())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// countPositive counts the intervals of a series above zero.
func countPositive(s *lehrpb.NamespaceSignals, name string) int {
	n := 0
	for _, sr := range s.GetSeries() {
		if sr.GetName() == name {
			for _, v := range sr.GetValues() {
				if v > 0 {
					n++
				}
			}
		}
	}
	return n
}

// waitReported waits, for a few seconds at most, until zone's distributors
// report an agent at version v of the demo namespace, so the status shown
// matches what just landed. Not getting there is not an error: the status
// is shown as it is.
func waitReported(ctx context.Context, c *producer.Client, zone string, v uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := c.RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zone})
		if err != nil {
			return
		}
		for _, vc := range st.GetVersions() {
			if vc.GetNamespace() == devNamespace && vc.GetVersion() == v && vc.GetAgents() > 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
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
