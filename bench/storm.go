package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/testenv/devcluster"
)

// stormTimeout bounds the wait for convergence, from the redial.
const stormTimeout = 3 * time.Minute

func stormScenario() Scenario {
	return Scenario{
		Name:  "storm",
		Title: "reconnect storm after a distributor restart with intact caches, vs etcd and NATS reconnects (issue 4 §5, §7)",
		Run:   runStorm,
	}
}

func runStorm(ctx context.Context, e *Env) (*Result, error) {
	ns := pick(e.Profile, []int{5}, []int{100, 1000}, []int{1000, 10000})
	if e.StormAgents > 0 {
		ns = []int{e.StormAgents}
	}
	res := &Result{
		Setup: "Lehr: control + embedded etcd (fsync on) + one distributor in this process, N simulated agents in a child process (each on its own socket, which counts its bytes), all holding the goal version of a 10-key namespace (1 KiB values). " +
			"The distributor is stopped and restarted on the same address; then every agent loses its connection at once and behaves like a real agent (agent/upstream): it redials after a random time within the redial spread its distributor advised (connected agents / fanout.DefaultRedialRate), announcing its intact cache; a failed or refused attempt is retried after a fully jittered exponential backoff (100 ms to 10 s), a lost connection is redialed. 'converge' is from the redial to the restarted distributor counting all N agents at the goal version; 'retries' counts failed attempts, 'refused' the Initial packets the distributor refused with CONNECTION_REFUSED because its handshake admission bound (fanout.Options.MaxHandshakes) was reached (or from an address it had just refused), 'abandoned' connections admitted whose handshake never completed, each holding a place at that bound until its handshake timed out, 'lost' connections lost after their Welcome; 'cpu/agent' and 'agents cpu/agent' are the CPU the bench process (distributor, control, etcd) and the agents' child spent from the redial to convergence per agent, 'loadavg' the machine's 1-minute load average at convergence (other work takes cores from both sides); " +
			"'payload' is update bytes the distributor sent (snapshots + patches; target 0) and 'updates recv' the updates the agents received on their new connections; 'wire' is UDP bytes per agent both ways during the storm (QUIC + TLS handshake, Hello/Welcome), counted at the agents' sockets. " +
			"etcd / NATS: N subscribers (own connections) through a counting TCP relay, watching the same 10 keys; every relayed connection is cut and one 1 KiB value is written at once; 'converge' is from the cut to every subscriber having that value (reconnect with the client's own backoff + resumed watch), 'wire' both ways per subscriber includes that one change.",
	}
	for _, n := range ns {
		row, err := stormLehr(ctx, e, n)
		if err != nil {
			return res, fmt.Errorf("lehr N=%d: %w", n, err)
		}
		res.Rows = append(res.Rows, row)
		conv, _ := row.Get("converge")
		payload, _ := row.Get("payload")
		failed, _ := row.Get("failed")
		res.Targets = append(res.Targets,
			Target{Goal: fmt.Sprintf("N=%d: reconnect of up-to-date agents sends no payload bytes", n), Got: fmt.Sprintf("%.0f B", payload), Met: payload == 0},
			Target{Goal: fmt.Sprintf("N=%d: no permanent failures", n), Got: fmt.Sprintf("%.0f failed", failed), Met: failed == 0})
		if n >= 10000 {
			res.Targets = append(res.Targets, Target{Goal: "N=10000: storm converged within 15 s", Got: fmt.Sprintf("%.1f s", conv/1000), Met: conv <= 15000})
		}
		for _, mk := range []func() (peer, error){
			func() (peer, error) {
				return startEtcdPeer(ctx, filepath.Join(e.Dir, fmt.Sprintf("etcd-%d", n)), e.Log)
			},
			func() (peer, error) { return startNATSPeer(ctx, filepath.Join(e.Dir, fmt.Sprintf("nats-%d", n))) },
		} {
			pr, err := mk()
			if err != nil {
				return res, err
			}
			prow, err := stormPeer(ctx, pr, n)
			pr.close()
			if err != nil {
				return res, fmt.Errorf("%s N=%d: %w", pr.name(), n, err)
			}
			res.Rows = append(res.Rows, prow, ratioRow(row, prow, []string{"converge", "wire/sub"}))
		}
	}
	res.Notes = append(res.Notes, "at N=10000 five etcd/NATS subscribers share each connection (see fanout), so their per-subscriber bytes are per watcher.")
	res.Notes = append(res.Notes, "the Lehr and peer 'converge' figures measure different things by necessity: a Lehr agent's reconnect is observable (Welcome), a watch client's is not, so peers are timed to the first change after the cut; the ratio row is indicative only.")
	return res, nil
}

func stormLehr(ctx context.Context, e *Env, n int) (Row, error) {
	row := Row{System: "lehr", Case: fmt.Sprintf("N=%d", n)}
	cl, err := devcluster.Start(ctx, devcluster.Options{
		Dir: filepath.Join(e.Dir, fmt.Sprintf("storm-%d", n)), Zones: []string{benchZone}, Domains: []string{benchDomain},
		AgentsPerZone: -1, Logger: e.Log,
	})
	if err != nil {
		return row, err
	}
	defer cl.Close()
	dist := cl.Distributors(benchZone)[0]
	nsName := fmt.Sprintf("%s/storm-%d", benchDomain, n)
	vals := newValueSource(1 << 10)
	var props []producer.Property
	for i := range 10 {
		props = append(props, producer.Property{Key: fmt.Sprintf("key%02d", i), Value: vals.next()})
	}
	v, err := cl.Producer().Publish(ctx, nsName, props)
	if err != nil {
		return row, err
	}
	col := newCollector(n)
	sw, conn, err := startSwarm(ctx, swarmConfig{
		Addr: dist.Addr(), CADir: filepath.Join(cl.Dir(), "pki", "ca"), N: n, Prefix: fmt.Sprintf("storm%d", n),
		Zone: benchZone, Subs: []string{nsName}, Parallel: 32, RedialTimeout: stormTimeout, CountBytes: true, SilenceTimeout: e.AgentSilenceTimeout,
		DialAttempts: 20, // the first connections are not the storm; see fanout
	}, func(ev swarmEvent) {
		if ev.NS == nsName && !ev.Refused {
			col.record(ev.I, ev.Version, ev.T)
		}
	})
	if err != nil {
		return row, err
	}
	defer sw.quit()
	if conn.Failed > 0 {
		return row, fmt.Errorf("%d agents failed to connect: %s", conn.Failed, conn.Err)
	}
	if ok, err := col.wait(ctx, v.GetSeq(), 120*time.Second); !ok || err != nil {
		return row, fmt.Errorf("initial version not at every agent (err %v)", err)
	}
	if err := dist.Stop(); err != nil {
		return row, fmt.Errorf("stop distributor: %w", err)
	}
	if err := dist.Restart(ctx); err != nil {
		return row, fmt.Errorf("restart distributor: %w", err)
	}
	// The restarted distributor serves once its goals are synced from control.
	before, err := sw.command(ctx, "stats", "stats")
	if err != nil {
		return row, err
	}
	var prof *cpuProfile
	if e.OutDir != "" {
		if prof, err = startCPUProfile(e.Dir, fmt.Sprintf("storm-%d", n)); err != nil {
			return row, err
		}
		defer prof.stop() // on an early return; stopping twice is harmless
	}
	self := os.Getpid()
	cpu0, _ := readProc(self)
	agents0, _ := readProc(sw.pid)
	start := time.Now()
	// The redial command answers once every agent is welcomed again;
	// meanwhile the loop below watches the distributor.
	type redialed struct {
		ev  swarmEvent
		err error
	}
	redialc := make(chan redialed, 1)
	go func() {
		ev, err := sw.command(ctx, "redial", "redialed")
		redialc <- redialed{ev, err}
	}()
	converged := false
	agents, at := 0, 0
	deadline := start.Add(stormTimeout)
	nextLog := time.Now().Add(time.Second)
	for {
		// Polled every 20 ms, and the per-version counts (a scan of every
		// session under its lock) only once every agent is connected: a
		// full scan every 5 ms took a third of the distributor process's
		// CPU at 10,000 agents, slowing the storm it measured.
		agents = dist.Stats().Agents
		if agents == n {
			var counts []fanout.VersionCount
			agents, counts = dist.Convergence()
			at = 0
			for _, c := range counts {
				if c.Namespace == nsName && c.Version == v.GetSeq() {
					at = c.Agents
				}
			}
		}
		if agents == n && at == n {
			converged = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if time.Now().After(nextLog) {
			// Every second: how the storm progresses (lehr-bench -v).
			st := dist.Stats()
			e.Log.Info("storm: waiting for convergence", "n", n, "connected", agents, "admitting", st.Admitting,
				"handshakes", st.Handshakes+st.ResumedHandshakes, "refused", st.RefusedHandshakes, "abandoned", st.AbandonedHandshakes, "elapsed", time.Since(start).Round(time.Millisecond))
			nextLog = time.Now().Add(time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conv := time.Since(start)
	cpu1, _ := readProc(self)
	agents1, _ := readProc(sw.pid)
	if prof != nil {
		path := prof.stop()
		hdr := fmt.Sprintf("CPU profile of the bench process (control + embedded etcd + the restarted distributor; agents in a child) from the redial of N=%d agents to convergence (%v), profile %s.", n, conv.Round(time.Millisecond), e.Profile)
		if _, err := topSummary(path, e.OutDir, fmt.Sprintf("storm-%s-N%d-cpu-top10", e.Profile, n), hdr); err != nil {
			e.Log.Warn("storm: CPU profile summary unavailable", "err", err)
		}
	}
	var redial swarmEvent
	select {
	case r := <-redialc:
		if r.err != nil {
			return row, r.err
		}
		redial = r.ev
	case <-ctx.Done():
		return row, ctx.Err()
	}
	time.Sleep(100 * time.Millisecond)
	after, err := sw.command(ctx, "stats", "stats")
	if err != nil {
		return row, err
	}
	st := dist.Stats()
	if !converged {
		return row, fmt.Errorf("not converged after %v: %d agents not welcomed again, %d failed attempts (first: %s), %d connections lost after their Welcome; the distributor counts %d of %d agents connected, %d at the goal, %d being admitted, %d refused handshakes; the swarm has %d connections up, ended ones by reason: %v",
			conv, redial.Failed, after.Retries, redial.Err, after.Lost, agents, n, at, st.Admitting, st.RefusedHandshakes, after.Alive, after.Ended)
	}
	row.Add("converge", ms(conv), "ms")
	row.Add("redial", float64(redial.ElapsedNS)/1e6, "ms")
	row.Add("payload", float64(st.SnapshotBytes+st.PatchBytes), "B")
	row.Add("updates recv", float64(after.Stats.Updates), "")
	row.Add("wire/sub", float64(after.WireIn-before.WireIn+after.WireOut-before.WireOut)/float64(n), "B")
	row.Add("failed", float64(redial.Failed), "")
	row.Add("retries", float64(after.Retries), "")
	row.Add("refused", float64(st.RefusedHandshakes), "")
	row.Add("abandoned", float64(st.AbandonedHandshakes), "")
	row.Add("resumed", float64(st.ResumedHandshakes), "")
	row.Add("cpu util", (cpu1.cpu-cpu0.cpu).Seconds()/conv.Seconds(), "cores")
	// The agents' side of the same window: with both near the machine's
	// cores, the storm is bound by CPU, not by the distributor alone.
	row.Add("agents cpu util", (agents1.cpu-agents0.cpu).Seconds()/conv.Seconds(), "cores")
	// Per reconnected agent, each side: what admitting one costs (its
	// handshake, Hello and Welcome, and the keepalives of those already
	// back), from which the rate a distributor on cores of its own could
	// admit follows — the agents' share is their own hosts' in a fleet.
	row.Add("cpu/agent", float64((cpu1.cpu-cpu0.cpu).Microseconds())/1000/float64(n), "ms")
	row.Add("agents cpu/agent", float64((agents1.cpu-agents0.cpu).Microseconds())/1000/float64(n), "ms")
	// Other work on the machine takes cores from both sides: the 1-minute
	// load average when the storm ended (the run's JSON has it at the start).
	row.Add("loadavg", loadAvg1(), "")
	row.Add("full", float64(st.Handshakes), "")
	row.Add("lost", float64(after.Lost), "")
	return row, nil
}

func stormPeer(ctx context.Context, pr peer, n int) (Row, error) {
	row := Row{System: pr.name(), Case: fmt.Sprintf("N=%d", n)}
	prefix := fmt.Sprintf("/bench/storm-%d/", n)
	vals := newValueSource(1 << 10)
	for i := range 10 {
		if err := pr.put(ctx, fmt.Sprintf("%skey%02d", prefix, i), vals.next()); err != nil {
			return row, err
		}
	}
	relay, err := newTCPProxy(pr.addr())
	if err != nil {
		return row, err
	}
	defer relay.close()
	col := newCollector(n)
	if err := pr.subscribe(ctx, n, relay.addr(), prefix, func(i int, key string, seq uint64, at time.Time) {
		col.record(i, seq, at.UnixNano())
	}); err != nil {
		return row, err
	}
	// One change before the cut proves every watch is live.
	val := vals.next()
	if err := pr.put(ctx, prefix+"key00", val); err != nil {
		return row, err
	}
	if ok, err := col.wait(ctx, seqOf(val), 120*time.Second); !ok || err != nil {
		return row, fmt.Errorf("watches not live (err %v)", err)
	}
	time.Sleep(100 * time.Millisecond)
	d0, u0 := relay.snapshot()
	start := time.Now()
	relay.cut()
	val = vals.next()
	if err := pr.put(ctx, prefix+"key00", val); err != nil {
		return row, err
	}
	ok, err := col.wait(ctx, seqOf(val), 120*time.Second)
	if err != nil {
		return row, err
	}
	conv := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	d1, u1 := relay.snapshot()
	_, missed, _ := col.result(seqOf(val), start)
	if !ok {
		row.Add("converge", -1, "ms")
	} else {
		row.Add("converge", ms(conv), "ms")
	}
	row.Add("wire/sub", float64(d1-d0+u1-u0)/float64(n), "B")
	row.Add("failed", float64(missed), "")
	return row, nil
}
