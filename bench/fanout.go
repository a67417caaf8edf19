package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/testenv/devcluster"
)

func fanoutScenario() Scenario {
	return Scenario{
		Name:  "fanout",
		Title: "publish → applied at N agents on one distributor, its cost, vs etcd watch and NATS KV watch, whole machine: servers and subscribers share both cores, peers embedded (issue 4 §2, §3, §7; the fair race is fairrace)",
		Run:   runFanout,
	}
}

type fanoutParams struct {
	ns                  []int
	warmup, reps, perRp int
	// idle is how long the process's CPU is sampled with every agent
	// connected and nothing sent, before the measured updates.
	idle time.Duration
}

// fanoutValue is the size of the changed value in every system.
const fanoutValue = 1 << 10

// fanoutSizes are the sizes of a fan-out race for profile: the fanout
// scenario's and the fair race's, so that their rows compare.
func fanoutSizes(profile Profile) fanoutParams {
	return pick(profile,
		fanoutParams{ns: []int{5}, warmup: 1, reps: 1, perRp: 2, idle: 200 * time.Millisecond},
		fanoutParams{ns: []int{100, 1000}, warmup: 2, reps: 3, perRp: 5, idle: 3 * time.Second},
		fanoutParams{ns: []int{100, 1000, 10000}, warmup: 2, reps: 5, perRp: 5, idle: 5 * time.Second},
	)
}

func runFanout(ctx context.Context, e *Env) (*Result, error) {
	p := fanoutSizes(e.Profile)
	if e.FanoutAgents > 0 {
		p.ns = []int{e.FanoutAgents}
	}
	runs := func(system string) bool { return len(e.FanoutSystems) == 0 || slices.Contains(e.FanoutSystems, system) }
	res := &Result{
		Setup: fmt.Sprintf("one-key change (a %s value) in a 10-key namespace, %d warm-up updates then %d×%d measured, one at a time (the next starts when every subscriber has it or 60 s passed). "+
			"Lehr: control + embedded etcd (fsync on) + one distributor in this process; N simulated agents (distributor/agenttest: real QUIC + mutual TLS + wire protocol, content in memory, no Badger, no files) in a child process, each its own connection. "+
			"etcd: embedded etcd (fsync on), N client/v3 clients each with a prefix watch. NATS: embedded nats-server, JetStream file store with sync_always, N connections each with a KV watch (updates only; an ordered consumer each, per-stream consumer limit raised to 50,000). "+
			"Peers run TLS 1.3 with client certificates required and verified (each row's transport says; -peer-tls=false runs them plaintext). "+
			"Latency is from the write call to the subscriber seeing the change; p50/p90/p99 are over subscribers per update, 'last' is the slowest subscriber; figures are medians over updates.", sizeLabel(fanoutValue), p.warmup, p.reps, p.perRp),
		Notes: []string{
			"these are whole-machine figures: the servers and the subscribers share both cores, and the peers run embedded in the bench process; the fairrace scenario gives each system's server processes one core and its subscribers the other.",
			"distributor CPU and RSS are of the bench process, which holds control + embedded etcd + the distributor (the agents are in the child): control's share is one watch event per update, with the change in it; RSS/heap per agent is (after − before connecting N agents) / N, which is noise-dominated (can be negative) at N=100: read it at N >= 1000.",
			"etcd and NATS subscribers have a connection each up to N=2000; at N=10000 five subscribers share each connection (2,000 connections), because both ends of every peer connection are in the bench process and 20,000 sockets exceed its file descriptor limit.",
			"simulated agents report an update when their waiting goroutine observes it applied (in the child process, same clock).",
			"'system cpu/delivery' is the CPU of every process taking part, both ends of every connection, over the measured updates, per delivery: for Lehr the bench process (control, its etcd, the distributor) and the agents' child; for a peer the bench process (its server and all its subscribers). 'busy' is the same CPU over the measured time, in cores: near the machine's core count, the fan-out is bound by CPU, and the system needing less per delivery is the faster one.",
		},
	}
	maxN := p.ns[len(p.ns)-1]
	if len(e.FanoutSystems) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("systems run: %s only (-fanout-systems).", strings.Join(e.FanoutSystems, ", ")))
	}
	for _, n := range p.ns {
		var lehrRow Row
		plot := CDFPlot{
			Name:  fmt.Sprintf("N%d", n),
			Title: fmt.Sprintf("fanout, N=%d: write → subscriber has the change (every subscriber, every measured update)", n),
		}
		if runs("lehr") {
			row, extra, lehrLat, err := fanoutLehr(ctx, e, p, n, n == maxN, res)
			if err != nil {
				return res, fmt.Errorf("lehr N=%d: %w", n, err)
			}
			lehrRow = row
			res.Rows = append(res.Rows, lehrRow, extra)
			plot.Series = append(plot.Series, Series{Label: "lehr (" + TransportLehr + ")", Samples: lehrLat})
		}
		var peerRows []Row
		for _, mk := range []func() (peer, error){
			func() (peer, error) {
				if !runs("etcd") {
					return nil, nil
				}
				return startEtcdPeer(ctx, filepath.Join(e.Dir, fmt.Sprintf("etcd-%d", n)), e.Log)
			},
			func() (peer, error) {
				if !runs("nats") {
					return nil, nil
				}
				return startNATSPeer(ctx, filepath.Join(e.Dir, fmt.Sprintf("nats-%d", n)))
			},
		} {
			pr, err := mk()
			if err == nil && pr == nil {
				continue // not run (-fanout-systems)
			}
			if err != nil {
				return res, err
			}
			row, lat, err := fanoutPeer(ctx, pr, p, n)
			pr.close()
			if err != nil {
				res.CDFs = append(res.CDFs, plot)
				return res, fmt.Errorf("%s N=%d: %w", pr.name(), n, err)
			}
			row.Transport = pr.transport()
			res.Rows = append(res.Rows, row)
			peerRows = append(peerRows, row)
			plot.Series = append(plot.Series, Series{Label: pr.name() + " (" + pr.transport() + ")", Samples: lat})
		}
		res.CDFs = append(res.CDFs, plot)
		if !runs("lehr") {
			continue
		}
		for _, pr := range peerRows {
			res.Rows = append(res.Rows, ratioRow(lehrRow, pr, []string{"p50", "p99", "last", "system cpu/delivery"}))
		}
		addFanoutTargets(res, n, lehrRow, peerRows)
	}
	return res, nil
}

// ratioRow divides a's metrics by b's.
func ratioRow(a, b Row, names []string) Row {
	r := Row{System: a.System + "/" + b.System, Case: b.Case}
	for _, n := range names {
		x, ok1 := a.Get(n)
		y, ok2 := b.Get(n)
		if ok1 && ok2 && y != 0 {
			r.Add(n, x/y, "×")
		}
	}
	return r
}

func addFanoutTargets(res *Result, n int, lehr Row, peers []Row) {
	p99, _ := lehr.Get("p99")
	last, _ := lehr.Get("last")
	missed, _ := lehr.Get("missed")
	dup, _ := lehr.Get("dup")
	switch n {
	case 1000:
		res.Targets = append(res.Targets,
			Target{Goal: "N=1000: p99 <= 250 ms", Got: fmt.Sprintf("p99 = %.1f ms", p99), Met: p99 <= 250},
			Target{Goal: "N=1000: last agent <= 500 ms", Got: fmt.Sprintf("last = %.1f ms", last), Met: last <= 500})
	case 10000:
		res.Targets = append(res.Targets,
			Target{Goal: "N=10000: p99 <= 3 s", Got: fmt.Sprintf("p99 = %.0f ms", p99), Met: p99 <= 3000},
			Target{Goal: "N=10000: 100% delivered", Got: fmt.Sprintf("missed = %.0f", missed), Met: missed == 0})
	}
	res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("N=%d: no missed or duplicated update", n),
		Got: fmt.Sprintf("missed = %.0f, duplicated = %.0f", missed, dup), Met: missed == 0 && dup == 0})
	for _, pr := range peers {
		pp99, _ := pr.Get("p99")
		res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("N=%d: p99 no slower than %s watch (ratio <= 1.0)", n, pr.System),
			Got: fmt.Sprintf("lehr/%s p99 = %.2f", pr.System, p99/pp99), Met: p99 <= pp99})
	}
}

// fanoutLehr measures Lehr at n agents; it returns the latency row, a
// cost row and every measured latency.
func fanoutLehr(ctx context.Context, e *Env, p fanoutParams, n int, profile bool, res *Result) (Row, Row, []time.Duration, error) {
	cost := Row{System: "lehr cost", Case: fmt.Sprintf("N=%d", n)}
	cl, err := devcluster.Start(ctx, devcluster.Options{
		DomainQuotas:  benchQuotas(),
		Dir:           filepath.Join(e.Dir, fmt.Sprintf("fan-%d", n)),
		Zones:         []string{benchZone},
		Domains:       []string{benchDomain},
		AgentsPerZone: -1,
		Logger:        e.Log,
	})
	if err != nil {
		return Row{}, cost, nil, err
	}
	defer cl.Close()
	dist := cl.Distributors(benchZone)[0]
	prod := cl.Producer()
	ns := fmt.Sprintf("%s/fan-%d", benchDomain, n)
	vals := newValueSource(fanoutValue)
	var props []producer.Property
	for i := range 10 {
		props = append(props, producer.Property{Key: fmt.Sprintf("key%02d", i), Value: vals.next()})
	}
	v, err := prod.Publish(ctx, ns, props)
	if err != nil {
		return Row{}, cost, nil, err
	}
	self := os.Getpid()
	heap0 := heapInuse()
	before, _ := readProc(self)

	col := newCollector(n)
	sw, conn, err := startSwarm(ctx, swarmConfig{
		Addr: dist.Addr(), CADir: filepath.Join(cl.Dir(), "pki", "ca"), N: n, Prefix: fmt.Sprintf("sim%d", n),
		Zone: benchZone, Subs: []string{ns}, Parallel: 32, Keep: true, SilenceTimeout: e.AgentSilenceTimeout,
		// As the catalog and the fair race: on a loaded machine three
		// refused first attempts failed 276 of 10,000 agents, and the run.
		DialAttempts: 20,
	}, func(ev swarmEvent) {
		if ev.NS == ns && !ev.Refused {
			col.record(ev.I, ev.Version, ev.T)
		}
	})
	if err != nil {
		return Row{}, cost, nil, err
	}
	defer sw.quit()
	if conn.Failed > 0 {
		return Row{}, cost, nil, fmt.Errorf("%d of %d agents failed to connect: %s", conn.Failed, n, conn.Err)
	}
	if ok, err := col.wait(ctx, v.GetSeq(), 120*time.Second); !ok || err != nil {
		return Row{}, cost, nil, fmt.Errorf("initial version not at every agent (err %v)", err)
	}
	heap1 := heapInuse()
	after, _ := readProc(self)
	if profile && e.OutDir != "" {
		// The heap as of the collection heapInuse just ran — the moment
		// "heap/agent" and "rss/agent" are taken — not after the updates
		// (the profile below), whose bursts leave other buffers behind.
		if hp, err := writeHeapProfileNoGC(e.Dir, "connected-heap"); err == nil {
			hdr := fmt.Sprintf("In-use heap of the bench process once N=%d agents connected and got the first version (where heap/agent and rss/agent are measured), profile %s.", n, e.Profile)
			if _, err := topSummary(hp, e.OutDir, fmt.Sprintf("fanout-%s-N%d-connected-heap-top10", e.Profile, n), hdr, "-sample_index=inuse_space"); err != nil {
				res.Notes = append(res.Notes, "connected heap profile summary unavailable: "+err.Error())
			}
		}
	}
	cost.Add("connect", float64(conn.ElapsedNS)/1e9, "s")
	cost.Add("heap/agent", float64(heap1-heap0)/1024/float64(n), "KiB")
	cost.Add("rss/agent", float64(after.rss-before.rss)/1024/float64(n), "KiB")
	cost.Add("rss", float64(after.rss)/(1<<20), "MiB")
	// Logged as soon as known (-v): on a loaded machine the updates after
	// it can take many minutes.
	e.Log.Info("fanout: every agent connected", "n", n, "connect", time.Duration(conn.ElapsedNS).Round(time.Millisecond),
		"heap/agent KiB", float64(heap1-heap0)/1024/float64(n), "rss/agent KiB", float64(after.rss-before.rss)/1024/float64(n))

	base := v.GetSeq()
	var stats roundStats
	update := func(i int) (uint64, time.Time, error) {
		t0 := time.Now()
		nv, err := prod.Patch(ctx, ns, base, producer.Patch{Set: []producer.Property{{Key: "key00", Value: vals.next()}}})
		if err != nil {
			return 0, t0, err
		}
		base = nv.GetSeq()
		return base, t0, nil
	}
	for i := range p.warmup {
		seq, _, err := update(i)
		if err != nil {
			return Row{}, cost, nil, err
		}
		col.wait(ctx, seq, 60*time.Second)
	}
	// The CPU the process spends with every agent connected and nothing
	// to send — the agents' keepalives and their acknowledgements — is
	// not the updates' cost: sampled over a window first, it is taken off
	// for "cpu/update net".
	// When the busiest case is profiled, so is this window: what idle
	// connections cost, apart from what updates cost.
	var idleProf *cpuProfile
	if profile && e.OutDir != "" {
		if idleProf, err = startCPUProfile(e.Dir, "idle-cpu"); err != nil {
			return Row{}, cost, nil, err
		}
	}
	idle0, _ := readProc(self)
	agentsIdle0, _ := readProc(sw.pid)
	idleStart := time.Now()
	time.Sleep(p.idle) // a sampling window, not a wait for an event
	idle1, _ := readProc(self)
	agentsIdle1, _ := readProc(sw.pid)
	idleCores := (idle1.cpu - idle0.cpu).Seconds() / time.Since(idleStart).Seconds()
	agentsIdleCores := (agentsIdle1.cpu - agentsIdle0.cpu).Seconds() / time.Since(idleStart).Seconds()
	if idleProf != nil {
		path := idleProf.stop()
		hdr := fmt.Sprintf("CPU profile of the bench process (control + embedded etcd + distributor; agents in a child) with N=%d agents connected and idle for %v (%.3f cores), profile %s.", n, p.idle, idleCores, e.Profile)
		if _, err := topSummary(path, e.OutDir, fmt.Sprintf("fanout-%s-N%d-idle-cpu-top10", e.Profile, n), hdr); err != nil {
			res.Notes = append(res.Notes, "idle CPU profile summary unavailable: "+err.Error())
		}
	}
	st0 := dist.Stats()
	var prof *cpuProfile
	if profile && e.OutDir != "" {
		if prof, err = startCPUProfile(e.Dir, "cpu"); err != nil {
			return Row{}, cost, nil, err
		}
	}
	cpu0, _ := readProc(self)
	agents0, _ := readProc(sw.pid)
	drops0, dropsErr := udpReceiveDrops()
	start := time.Now()
	for i := range p.reps * p.perRp {
		seq, t0, err := update(i)
		if err != nil {
			if prof != nil {
				prof.stop()
			}
			return Row{}, cost, nil, err
		}
		if _, err := col.wait(ctx, seq, 60*time.Second); err != nil {
			return Row{}, cost, nil, err
		}
		stats.add(col.result(seq, t0))
	}
	elapsed := time.Since(start)
	cpu1, _ := readProc(self)
	agents1, _ := readProc(sw.pid)
	drops1, _ := udpReceiveDrops()
	st1 := dist.Stats()
	rounds := float64(p.reps * p.perRp)
	cost.Add("cpu/update", (cpu1.cpu-cpu0.cpu).Seconds()/rounds, "s")
	cost.Add("cpu util", (cpu1.cpu-cpu0.cpu).Seconds()/elapsed.Seconds(), "cores")
	cost.Add("idle cores", idleCores, "cores")
	cost.Add("cpu/update net", ((cpu1.cpu-cpu0.cpu).Seconds()-idleCores*elapsed.Seconds())/rounds, "s")
	cost.Add("patch B/agent", float64(st1.PatchBytes-st0.PatchBytes)/rounds/float64(n), "B")
	cost.Add("snapshots", float64(st1.SnapshotPushes-st0.SnapshotPushes), "")
	// The simulated agents redial a lost connection as the real agent
	// does; a loss shows as a late or missed delivery above, and here.
	sst, err := sw.command(ctx, "stats", "stats")
	if err != nil {
		return Row{}, cost, nil, err
	}
	cost.Add("lost", float64(sst.Lost), "")
	if sst.Lost > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("N=%d: %d agent connections were lost after their Welcome and redialed (by error: %v).", n, sst.Lost, sst.LostBy))
	}
	if prof != nil {
		path := prof.stop()
		hdr := fmt.Sprintf("CPU profile of the bench process (control + embedded etcd + distributor; agents in a child) during %d updates to N=%d agents, profile %s.", int(rounds), n, e.Profile)
		if _, err := topSummary(path, e.OutDir, fmt.Sprintf("fanout-%s-N%d-cpu-top10", e.Profile, n), hdr); err != nil {
			res.Notes = append(res.Notes, "CPU profile summary unavailable: "+err.Error())
		}
		if hp, err := writeHeapProfile(e.Dir, "heap"); err == nil {
			hdr := fmt.Sprintf("In-use heap of the bench process with N=%d agents connected, profile %s.", n, e.Profile)
			if _, err := topSummary(hp, e.OutDir, fmt.Sprintf("fanout-%s-N%d-heap-top10", e.Profile, n), hdr, "-sample_index=inuse_space"); err != nil {
				res.Notes = append(res.Notes, "heap profile summary unavailable: "+err.Error())
			}
		}
	}
	if n >= 1000 {
		kib, _ := cost.Get("rss/agent")
		res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("N=%d: distributor <= 64 KiB per connected agent (RSS)", n),
			Got: fmt.Sprintf("%.1f KiB", kib), Met: kib <= 64})
		if n >= 10000 {
			// Issue 34's own bound, beside the bench's.
			res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("N=%d: distributor <= 48 KiB per connected agent (RSS; issue 34)", n),
				Got: fmt.Sprintf("%.1f KiB", kib), Met: kib <= 48})
		}
	}
	cost.Add("agents cpu/update", (agents1.cpu-agents0.cpu).Seconds()/rounds, "s")
	cost.Add("agents idle cores", agentsIdleCores, "cores")
	if dropsErr == nil {
		// Datagrams the kernel dropped at a full receive buffer (the
		// distributor's one socket, or an agent's) during the updates:
		// each is a QUIC packet lost and sent again.
		cost.Add("udp drops", float64(drops1-drops0), "")
	}
	row := stats.row("lehr", fmt.Sprintf("N=%d", n))
	addSystemCPU(&row, cpu1.cpu-cpu0.cpu+agents1.cpu-agents0.cpu, elapsed, rounds*float64(n))
	return row, cost, stats.all, nil
}

// addSystemCPU adds to a latency row the CPU every process of the system
// spent over the measured updates: per delivery, and in cores over their
// elapsed time.
func addSystemCPU(r *Row, cpu, elapsed time.Duration, deliveries float64) {
	r.Add("system cpu/delivery", float64(cpu.Microseconds())/deliveries, "µs")
	r.Add("busy", cpu.Seconds()/elapsed.Seconds(), "cores")
}

// fanoutPeer measures a peer at n subscribers; it returns the latency row
// and every measured latency.
func fanoutPeer(ctx context.Context, pr peer, p fanoutParams, n int) (Row, []time.Duration, error) {
	prefix := fmt.Sprintf("/bench/fan-%d/", n)
	vals := newValueSource(fanoutValue)
	for i := range 10 {
		if err := pr.put(ctx, fmt.Sprintf("%skey%02d", prefix, i), vals.next()); err != nil {
			return Row{}, nil, err
		}
	}
	col := newCollector(n)
	if err := pr.subscribe(ctx, n, pr.addr(), prefix, func(i int, key string, seq uint64, at time.Time) {
		col.record(i, seq, at.UnixNano())
	}); err != nil {
		return Row{}, nil, err
	}
	var stats roundStats
	update := func() (uint64, time.Time, error) {
		val := vals.next()
		t0 := time.Now()
		err := pr.put(ctx, prefix+"key00", val)
		return seqOf(val), t0, err
	}
	for range p.warmup {
		seq, _, err := update()
		if err != nil {
			return Row{}, nil, err
		}
		col.wait(ctx, seq, 60*time.Second)
	}
	// The server and every subscriber are in this process: its CPU is
	// the whole system's.
	cpu0, _ := readProc(os.Getpid())
	start := time.Now()
	for range p.reps * p.perRp {
		seq, t0, err := update()
		if err != nil {
			return Row{}, nil, err
		}
		if _, err := col.wait(ctx, seq, 60*time.Second); err != nil {
			return Row{}, nil, err
		}
		stats.add(col.result(seq, t0))
	}
	elapsed := time.Since(start)
	cpu1, _ := readProc(os.Getpid())
	row := stats.row(pr.name(), fmt.Sprintf("N=%d", n))
	addSystemCPU(&row, cpu1.cpu-cpu0.cpu, elapsed, float64(p.reps*p.perRp*n))
	return row, stats.all, nil
}
