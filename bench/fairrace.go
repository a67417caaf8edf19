package bench

// The fair race (issue 34): the fan-out of the fanout scenario, with each
// system's server in processes of its own, pinned to one core, and its
// subscribers in another process pinned to the other core, so that the
// server's CPU per delivery is measured apart from its clients' and no
// side can borrow the other's core. What a fleet's operator wants to know
// is how many hosts one server core keeps up to date, and how fast.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/cpupin"
)

func fairRaceScenario() Scenario {
	return Scenario{
		Name:  "fairrace",
		Title: "the fair race: publish → seen at N subscribers, each system's server alone on one core, its subscribers in a process on the other (issue 34 §1)",
		Run:   runFairRace,
	}
}

// race is one run of the fair race.
type race struct {
	e *Env
	p fanoutParams
	// serverCPU runs the system's server processes; clientCPU its
	// subscribers' process and the bench process (the writer, the
	// collector).
	serverCPU, clientCPU cpupin.Set
	lehrBin, etcdBin     string
	natsBin              string
}

// warmupTimeout bounds the fair race's warm-up: until an update reaches
// every subscriber.
const warmupTimeout = 5 * time.Minute

// raceSide is one system at one N, its servers started (on serverCPU)
// and its namespace written; its subscribers not yet.
type raceSide struct {
	system string
	// servers are the server processes: lehr's control (its embedded
	// etcd within) and distributor; etcd's or nats-server's process.
	servers procGroup
	// dist is Lehr's distributor alone; 0 for a peer.
	dist int
	// pprof is the host:port serving the distributor's /debug/pprof/;
	// empty for a peer.
	pprof string
	// initial, if not 0, is the sequence every subscriber receives on
	// connecting (a Lehr agent gets the namespace's current version).
	initial uint64
	// sub configures the subscribers' process (N and CPUs are set by
	// measure).
	sub swarmConfig
	// match says whether an event of the subscribers counts.
	match func(swarmEvent) bool
	// update makes one change and returns its sequence and when the write
	// was called.
	update func(ctx context.Context) (uint64, time.Time, error)
}

func runFairRace(ctx context.Context, e *Env) (*Result, error) {
	p := fanoutSizes(e.Profile)
	res := &Result{
		Setup: fmt.Sprintf("the fanout scenario's change — one key (a %s value) of a 10-key namespace, at least %d warm-up updates (until one reaches every subscriber) then %d×%d measured, one at a time — with every system split in two: "+
			"its server in processes of its own, pinned to one CPU (taskset), its N subscribers in one process pinned to the other CPU, with the bench process (writer and collector). "+
			"Lehr: control (embedded etcd, fsync on, --rollouts=false as the fanout's cluster) and one distributor, both processes of the lehr binary; simulated agents (distributor/agenttest: real QUIC, mutual TLS, the wire protocol, decode, verify and apply in memory) in a child of the bench. "+
			"etcd: a real etcd server process (go build %s, the etcd of go.mod: 3.7), one member, fsync on; N client/v3 prefix watches. "+
			"NATS: a real nats-server process (go build %s, the nats-server of go.mod), JetStream file store with sync_interval always, consumer limit %d; N KV watches (updates only). "+
			"Peers run TLS 1.3 with client certificates required and verified unless -peer-tls=false, Lehr QUIC with mutual TLS 1.3. "+
			"Latency is from the write call to the subscriber seeing the change (both ends timed on one clock); p50/p90/p99 are over subscribers per update, 'last' is the slowest subscriber; figures are medians over updates.",
			sizeLabel(fanoutValue), p.warmup, p.reps, p.perRp, etcdMainPackage, natsMainPackage, natsMaxConsumers),
		Notes: []string{
			"the fanout scenario's rows are the whole-machine figures of the same change (servers and subscribers unpinned on both cores, the peers embedded in the bench process); these are the fair race's.",
			"'server cpu/delivery' is the CPU time (utime + stime of /proc/<pid>/stat, every thread, in 10 ms ticks: ±10 ms over the measured updates) of the server processes over the measured updates, per delivery: for Lehr control + distributor (control's share is one etcd write with fsync and one watch event per update; 'distributor cpu/delivery' is the distributor alone), for etcd and NATS their server process. 'server busy' is the same CPU over the measured time, in cores (1 is the whole core); 'server idle' is their CPU with every subscriber connected and nothing written (keepalives), sampled before.",
			"'subscribers cpu/delivery' is the subscribers' process's CPU per delivery: Lehr's simulated agents decode, verify (checksum) and apply every update; the peers' watchers only receive it. Both report every delivery to the bench process as a JSON line, at the same cost. 'subscribers busy' is their CPU over the measured time, in cores: near 1, the subscribers' core, not the server's, bounds the latency (on one core, N simulated agents take N times one agent's work per update, which a fleet spreads over N hosts).",
			"'all cpu/delivery' adds the bench process (writer, collector) to server and subscribers: the analogue of the fanout scenario's whole-machine 'system cpu/delivery', but pinned and with the servers out of process.",
			"'server rss/sub' is (the server processes' RSS with N subscribers connected, after the warm-up − before they connected) / N, noise-dominated at N=100; 'server rss' is their RSS then; 'distributor rss/sub' is Lehr's distributor's alone.",
			"every server and subscriber process is a Go program started on one CPU, so its runtime runs with GOMAXPROCS=1 (runtime.NumCPU follows the affinity mask), alike for every system.",
		},
	}
	allowed, err := cpupin.Allowed(os.Getpid())
	if err != nil {
		return res, err
	}
	if len(allowed) < 2 {
		return res, fmt.Errorf("the fair race needs 2 CPUs, this process may use %s", allowed)
	}
	r := &race{e: e, p: p, serverCPU: allowed[:1], clientCPU: allowed[1:2]}
	res.Notes = append(res.Notes, fmt.Sprintf("servers pinned to CPU %s, subscribers and the bench process to CPU %s (of %s allowed).", r.serverCPU, r.clientCPU, allowed))
	// Built before this process is pinned, so the builds use every core.
	if r.lehrBin, err = buildLehr(ctx, e.Dir); err != nil {
		return res, err
	}
	if r.etcdBin, err = buildMain(ctx, e.Dir, "etcd", etcdMainPackage); err != nil {
		return res, err
	}
	if r.natsBin, err = buildMain(ctx, e.Dir, "nats-server", natsMainPackage); err != nil {
		return res, err
	}
	restore, err := cpupin.Process(os.Getpid(), r.clientCPU)
	if err != nil {
		return res, err
	}
	defer restore()

	systems := []string{"lehr", "etcd", "nats"}
	if len(e.FairRaceSystems) > 0 {
		for _, sys := range e.FairRaceSystems {
			if !slices.Contains(systems, sys) {
				return res, fmt.Errorf("fair race: unknown system %q (want lehr, etcd or nats)", sys)
			}
		}
		systems = e.FairRaceSystems
		res.Partial = len(systems) < 3
		res.Notes = append(res.Notes, fmt.Sprintf("only %s ran (-fairrace-systems).", strings.Join(systems, ", ")))
	}
	for _, n := range p.ns {
		plot := CDFPlot{
			Name:  fmt.Sprintf("N%d", n),
			Title: fmt.Sprintf("fairrace, N=%d: write → subscriber has the change, server on its own core (every subscriber, every measured update)", n),
		}
		var lehrRow Row
		var peerRows []Row
		for _, sys := range systems {
			row, lat, err := r.run(ctx, sys, n)
			if err != nil {
				res.CDFs = append(res.CDFs, plot)
				return res, fmt.Errorf("%s N=%d: %w", sys, n, err)
			}
			res.Rows = append(res.Rows, row)
			label := sys + " (" + TransportLehr + ")"
			if sys == "lehr" {
				lehrRow = row
			} else {
				peerRows = append(peerRows, row)
				label = sys + " (" + row.Transport + ")"
			}
			plot.Series = append(plot.Series, Series{Label: label, Samples: lat})
		}
		res.CDFs = append(res.CDFs, plot)
		if lehrRow.System == "" {
			continue
		}
		for _, pr := range peerRows {
			res.Rows = append(res.Rows, ratioRow(lehrRow, pr, []string{"p50", "p99", "last", "server cpu/delivery", "subscribers cpu/delivery", "server rss/sub"}))
		}
		res.Targets = append(res.Targets, fairRaceTargets(n, lehrRow, peerRows)...)
	}
	return res, nil
}

// fairRaceTargets are issue 34's: Lehr's p99 and server CPU per delivery
// at or below the best peer's.
func fairRaceTargets(n int, lehr Row, peers []Row) []Target {
	var ts []Target
	for _, m := range []struct{ name, unit string }{{"p99", "ms"}, {"server cpu/delivery", "µs"}} {
		got, _ := lehr.Get(m.name)
		best, bestSys := 0.0, ""
		for _, pr := range peers {
			if v, ok := pr.Get(m.name); ok && (bestSys == "" || v < best) {
				best, bestSys = v, pr.System
			}
		}
		if bestSys == "" {
			continue
		}
		ratio := "-"
		if best > 0 {
			ratio = fmt.Sprintf("%.2f×", got/best)
		}
		ts = append(ts, Target{
			Goal: fmt.Sprintf("N=%d, fair race: lehr %s <= the best peer's", n, m.name),
			Got:  fmt.Sprintf("lehr %s %s, %s %s %s (%s)", FormatValue(got), m.unit, bestSys, FormatValue(best), m.unit, ratio),
			Met:  got <= best,
		})
	}
	lehrMissed, _ := lehr.Get("missed")
	lehrDup, _ := lehr.Get("dup")
	ts = append(ts, Target{Goal: fmt.Sprintf("N=%d, fair race: no missed or duplicated update", n),
		Got: fmt.Sprintf("missed = %.0f, duplicated = %.0f", lehrMissed, lehrDup), Met: lehrMissed == 0 && lehrDup == 0})
	return ts
}

// run starts system sys at n subscribers, measures it and stops it.
func (r *race) run(ctx context.Context, sys string, n int) (Row, []time.Duration, error) {
	dir := filepath.Join(r.e.Dir, fmt.Sprintf("%s-%d", sys, n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Row{}, nil, err
	}
	var side raceSide
	var stop func()
	var transport string
	var err error
	switch sys {
	case "lehr":
		side, stop, err = r.startLehr(ctx, dir, n)
		transport = TransportLehr
	default:
		var pr peer
		switch sys {
		case "etcd":
			pr, err = startEtcdProc(ctx, dir, r.etcdBin, r.serverCPU)
		case "nats":
			pr, err = startNATSProc(ctx, dir, r.natsBin, r.serverCPU)
		}
		if err != nil {
			return Row{}, nil, err
		}
		stop = pr.close
		transport = pr.transport()
		side, err = r.peerSide(ctx, pr, n)
	}
	if err != nil {
		if stop != nil {
			stop()
		}
		return Row{}, nil, r.keepLogs(dir, sys, n, err)
	}
	row, lat, err := r.measure(ctx, side, n)
	stop()
	row.Transport = transport
	if err != nil {
		return row, lat, r.keepLogs(dir, sys, n, err)
	}
	return row, lat, nil
}

// keepLogs copies the server processes' logs of a failed run from dir
// (removed after the scenario) to the run's artefacts, and names them in
// the error it returns.
func (r *race) keepLogs(dir, sys string, n int, err error) error {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if r.e.OutDir == "" || len(logs) == 0 || os.MkdirAll(r.e.OutDir, 0o755) != nil {
		return err
	}
	var kept []string
	for _, l := range logs {
		b, rerr := os.ReadFile(l)
		if rerr != nil {
			continue
		}
		path := filepath.Join(r.e.OutDir, fmt.Sprintf("fairrace-%s-%s-N%d-%s", r.e.Profile, sys, n, filepath.Base(l)))
		if os.WriteFile(path, b, 0o644) == nil {
			kept = append(kept, path)
		}
	}
	if len(kept) == 0 {
		return err
	}
	return fmt.Errorf("%w (server logs kept: %s)", err, strings.Join(kept, ", "))
}

// startLehr starts control and a distributor on the server CPU, creates
// the zone, the domain and the namespace, and returns the side.
func (r *race) startLehr(ctx context.Context, dir string, n int) (raceSide, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (raceSide, func(), error) {
		stop()
		return raceSide{}, nil, err
	}
	ctlAddr, err := freeTCPAddr()
	if err != nil {
		return fail(err)
	}
	ctlMetrics, err := freeTCPAddr()
	if err != nil {
		return fail(err)
	}
	ctl, err := startPinned("control", r.lehrBin, filepath.Join(dir, "control.log"), ctlMetrics, r.serverCPU,
		[]string{"control", "--data-dir", filepath.Join(dir, "control"), "--listen", ctlAddr, "--metrics-listen", ctlMetrics,
			"--dev", "--rollouts=false", "--log-level", "warn"})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { ctl.stop(time.Minute) })
	if err := waitServing(ctx, ctl, ctlAddr, "", controlStartTimeout); err != nil {
		return fail(err)
	}
	prod, err := producer.New(producer.Options{Address: ctlAddr, Author: "lehr-bench", Logger: r.e.Log})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { prod.Close() })
	if _, err := prod.CreateZone(ctx, benchZone); err != nil {
		return fail(fmt.Errorf("create zone: %w", err))
	}
	if _, err := prod.CreateDomain(ctx, &lehrpb.Domain{Name: benchDomain, Quotas: benchQuotas()}); err != nil {
		return fail(fmt.Errorf("create domain: %w", err))
	}

	pkiDir := filepath.Join(dir, "pki")
	ca, err := pki.NewCA(pkiDir, "lehr-bench-fairrace-CA", 24*time.Hour)
	if err != nil {
		return fail(err)
	}
	const id = "fair-d0"
	ident := tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: benchZone, Name: id}
	cert, key, err := ca.IssueURIFiles(pkiDir, id, pki.Both, []string{"127.0.0.1"}, ident.URI(), 24*time.Hour)
	if err != nil {
		return fail(err)
	}
	distAddr, err := freeUDPAddr()
	if err != nil {
		return fail(err)
	}
	distMetrics, err := freeTCPAddr()
	if err != nil {
		return fail(err)
	}
	dist, err := startPinned("distributor", r.lehrBin, filepath.Join(dir, "distributor.log"), distMetrics, r.serverCPU,
		[]string{"distributor", "--zone", benchZone, "--id", id, "--control", ctlAddr, "--control-plaintext",
			"--listen", distAddr, "--tls-cert", cert, "--tls-key", key, "--tls-ca", filepath.Join(pkiDir, pki.CACertFile),
			"--metrics-listen", distMetrics, "--pprof", "--log-level", "warn"})
	if err != nil {
		return fail(err)
	}
	// Before prod.Close and control: a distributor outliving control
	// would only redial it.
	stops = append(stops, func() { dist.stop(time.Minute) })
	if err := waitMetrics(ctx, dist, "connected to control", startTimeout, func(m promSamples) bool {
		return m.sum("lehr_distributor_control_connected") == 1
	}); err != nil {
		return fail(err)
	}

	ns := fmt.Sprintf("%s/fair-%d", benchDomain, n)
	vals := newValueSource(fanoutValue)
	var props []producer.Property
	for i := range 10 {
		props = append(props, producer.Property{Key: fmt.Sprintf("key%02d", i), Value: vals.next()})
	}
	v, err := prod.Publish(ctx, ns, props)
	if err != nil {
		return fail(err)
	}
	base := v.GetSeq()
	return raceSide{
		system:  "lehr",
		servers: procGroup{ctl.pid(), dist.pid()},
		dist:    dist.pid(),
		pprof:   distMetrics,
		initial: v.GetSeq(),
		sub: swarmConfig{
			Addr: distAddr, CADir: pkiDir, Prefix: fmt.Sprintf("fair%d", n), Zone: benchZone, Subs: []string{ns},
			Parallel: 32, Keep: true, SilenceTimeout: r.e.AgentSilenceTimeout,
			// A distributor on one core refuses handshakes beyond its
			// admission bound sooner than on two: agents retry, as the
			// real agent does (the catalog's 7,500 needed as many).
			DialAttempts: 20, ConnectTimeout: 30 * time.Minute,
		},
		match: func(ev swarmEvent) bool { return ev.NS == ns && !ev.Refused },
		update: func(ctx context.Context) (uint64, time.Time, error) {
			t0 := time.Now()
			nv, err := prod.Patch(ctx, ns, base, producer.Patch{Set: []producer.Property{{Key: "key00", Value: vals.next()}}})
			if err != nil {
				return 0, t0, err
			}
			base = nv.GetSeq()
			return base, t0, nil
		},
	}, stop, nil
}

// peerSide writes the namespace's keys to a peer whose server process
// runs, and returns the side.
func (r *race) peerSide(ctx context.Context, pr peer, n int) (raceSide, error) {
	prefix := fmt.Sprintf("/bench/fair-%d/", n)
	vals := newValueSource(fanoutValue)
	for i := range 10 {
		if err := pr.put(ctx, fmt.Sprintf("%skey%02d", prefix, i), vals.next()); err != nil {
			return raceSide{}, err
		}
	}
	var proc *daemon
	switch p := pr.(type) {
	case *etcdPeer:
		proc = p.proc
	case *natsPeer:
		proc = p.proc
	}
	wc := watchConfigOf(pr, prefix, connsPerSubscriber(n))
	return raceSide{
		system:  pr.name(),
		servers: procGroup{proc.pid()},
		sub:     swarmConfig{Watch: &wc},
		match:   func(swarmEvent) bool { return true },
		update: func(ctx context.Context) (uint64, time.Time, error) {
			val := vals.next()
			t0 := time.Now()
			err := pr.put(ctx, prefix+"key00", val)
			return seqOf(val), t0, err
		},
	}, nil
}

// connsPerSubscriber is how many peer subscribers share a connection in
// the fair race: one each, as each host would have its own, when this
// process's file limit (which the server and subscriber processes, Go
// programs that raise their soft limit to it, share) holds N sockets and
// room; else as many as in the fanout scenario (watchersPerConn).
func connsPerSubscriber(n int) int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Max >= uint64(n)+1024 {
		return 1
	}
	return watchersPerConn(n)
}

// measure starts side's n subscribers on the client CPU, waits until they
// hold the initial state and the warm-up updates, samples the servers'
// idle CPU, makes the measured updates, and returns the row and every
// measured latency.
func (r *race) measure(ctx context.Context, side raceSide, n int) (Row, []time.Duration, error) {
	p := r.p
	self := procGroup{os.Getpid()}
	dist := procGroup{side.dist}
	before, err := side.servers.sample()
	if err != nil {
		return Row{}, nil, err
	}
	distBefore, _ := dist.sample()
	col := newCollector(n)
	cfg := side.sub
	cfg.N, cfg.CPUs = n, r.clientCPU
	sw, conn, err := startSwarm(ctx, cfg, func(ev swarmEvent) {
		if side.match(ev) {
			col.record(ev.I, ev.Version, ev.T)
		}
	})
	if err != nil {
		return Row{}, nil, err
	}
	defer sw.quit()
	if conn.Failed > 0 {
		return Row{}, nil, fmt.Errorf("%d of %d subscribers failed to connect: %s", conn.Failed, n, conn.Err)
	}
	subs := procGroup{sw.pid}
	if side.initial != 0 {
		if ok, err := col.wait(ctx, side.initial, 120*time.Second); !ok || err != nil {
			return Row{}, nil, fmt.Errorf("initial version not at every subscriber (err %v)", err)
		}
	}
	// At least p.warmup updates, and until one reaches every subscriber:
	// a watch registered late (etcd's register after the client
	// returned) misses, or gets late, a warm-up update, not a measured one.
	warmDeadline := time.Now().Add(warmupTimeout)
	for i := 1; ; i++ {
		seq, _, err := side.update(ctx)
		if err != nil {
			return Row{}, nil, err
		}
		all, err := col.wait(ctx, seq, 60*time.Second)
		if err != nil {
			return Row{}, nil, err
		}
		if all && i >= p.warmup {
			break
		}
		if time.Now().After(warmDeadline) {
			_, missed, _ := col.result(seq, time.Now())
			return Row{}, nil, fmt.Errorf("after %d warm-up updates in %v, %d of %d subscribers missed the last", i, warmupTimeout, missed, n)
		}
	}
	connected, err := side.servers.sample()
	if err != nil {
		return Row{}, nil, err
	}
	distConnected, _ := dist.sample()
	idle0, _ := side.servers.sample()
	idleStart := time.Now()
	if err := sleep(ctx, p.idle); err != nil { // a sampling window, not a wait for an event
		return Row{}, nil, err
	}
	idle1, _ := side.servers.sample()
	idleCores := (idle1.cpu - idle0.cpu).Seconds() / time.Since(idleStart).Seconds()

	var stats roundStats
	s0, _ := side.servers.sample()
	c0, _ := subs.sample()
	b0, _ := self.sample()
	d0, _ := dist.sample()
	start := time.Now()
	for range p.reps * p.perRp {
		seq, t0, err := side.update(ctx)
		if err != nil {
			return Row{}, nil, err
		}
		if _, err := col.wait(ctx, seq, 60*time.Second); err != nil {
			return Row{}, nil, err
		}
		stats.add(col.result(seq, t0))
	}
	elapsed := time.Since(start)
	s1, err1 := side.servers.sample()
	c1, err2 := subs.sample()
	b1, _ := self.sample()
	d1, _ := dist.sample()
	if err := firstErr(err1, err2); err != nil {
		return Row{}, nil, fmt.Errorf("sample CPU: %w", err)
	}
	st, err := sw.command(ctx, "stats", "stats")
	if err != nil {
		return Row{}, nil, err
	}
	deliveries := p.reps * p.perRp * n
	row := stats.row(side.system, fmt.Sprintf("N=%d", n))
	row.Add("server cpu/delivery", perDelivery(s0, s1, deliveries), "µs")
	if side.dist != 0 {
		row.Add("distributor cpu/delivery", perDelivery(d0, d1, deliveries), "µs")
	}
	row.Add("server busy", (s1.cpu-s0.cpu).Seconds()/elapsed.Seconds(), "cores")
	row.Add("server idle", idleCores, "cores")
	row.Add("subscribers cpu/delivery", perDelivery(c0, c1, deliveries), "µs")
	row.Add("subscribers busy", (c1.cpu-c0.cpu).Seconds()/elapsed.Seconds(), "cores")
	all0 := procSample{cpu: s0.cpu + c0.cpu + b0.cpu}
	all1 := procSample{cpu: s1.cpu + c1.cpu + b1.cpu}
	row.Add("all cpu/delivery", perDelivery(all0, all1, deliveries), "µs")
	row.Add("server rss/sub", float64(connected.rss-before.rss)/1024/float64(n), "KiB")
	row.Add("server rss", float64(connected.rss)/(1<<20), "MiB")
	if side.dist != 0 {
		row.Add("distributor rss/sub", float64(distConnected.rss-distBefore.rss)/1024/float64(n), "KiB")
	}
	row.Add("lost", float64(st.Lost), "")
	if side.pprof != "" && r.e.OutDir != "" {
		if err := r.profileDistributor(ctx, side, col, n, row); err != nil {
			return row, stats.all, fmt.Errorf("profile the distributor: %w", err)
		}
	}
	return row, stats.all, nil
}

// profileTime is how long the fair race profiles Lehr's distributor, after
// the measured updates, while it keeps making them.
func (r *race) profileTime() time.Duration {
	return pick(r.e.Profile, time.Second, 5*time.Second, 5*time.Second)
}

// profileDistributor takes a CPU profile of Lehr's distributor (from its
// /debug/pprof/profile) while making updates as the measured ones, one at
// a time, each awaited at every subscriber, after the measured updates so
// that profiling does not weigh on their figures; it keeps the profile and
// its top 10 in OutDir as fairrace-PROFILE-NN-distributor-cpu.
func (r *race) profileDistributor(ctx context.Context, side raceSide, col *collector, n int, row Row) error {
	name := fmt.Sprintf("fairrace-%s-N%d-distributor-cpu", r.e.Profile, n)
	path := filepath.Join(r.e.OutDir, name+".pprof")
	if err := os.MkdirAll(r.e.OutDir, 0o755); err != nil {
		return err
	}
	secs := int(r.profileTime() / time.Second)
	if secs < 1 {
		secs = 1
	}
	done := make(chan error, 1)
	go func() {
		done <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", side.pprof, secs), path)
	}()
	updates := 0
	var ferr error
loop:
	for {
		select {
		case ferr = <-done:
			break loop
		default:
		}
		seq, _, err := side.update(ctx)
		if err != nil {
			<-done
			return err
		}
		if _, err := col.wait(ctx, seq, 60*time.Second); err != nil {
			<-done
			return err
		}
		updates++
	}
	if ferr != nil {
		return ferr
	}
	dcpu, _ := row.Get("distributor cpu/delivery")
	hdr := fmt.Sprintf("CPU profile of Lehr's distributor (pinned to CPU %s, GOMAXPROCS=1) over %d s of the fair race at N=%d, profile %s: %d updates made one at a time, each awaited at every subscriber (%d deliveries), after the measured ones (distributor cpu/delivery measured %.0f µs).",
		r.serverCPU, secs, n, r.e.Profile, updates, updates*n, dcpu)
	total, parts, err := breakdown(path)
	if err != nil {
		return err
	}
	hdr += "\n\nWhere it went (bench/profile.go breakdown):\n\n" + formatBreakdown(total, parts, updates*n)
	_, err = topSummary(path, r.e.OutDir, name+"-top10", hdr)
	return err
}

// fetchTo writes the body of a GET of url to the file at path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// firstErr returns the first error that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
