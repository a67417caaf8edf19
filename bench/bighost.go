package bench

import (
	"context"
	"fmt"
	"io/fs"
	"lehr.dev/lehr/testenv/memcgroup"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

func bighostScenario() Scenario {
	return Scenario{
		Name:  "bighost",
		Title: "a host that needs hundreds of MB: a real agent taking 300 MB across 60 namespaces cold, then restarted on its cache (issue 27 §4, §6)",
		Run:   runBighost,
	}
}

type bighostParams struct {
	namespaces, keys, valueBytes int
}

// bighostMemoryMax is the agent unit's MemoryMax (deploy/systemd): the
// peak RSS of a cold start must fit in it.
const bighostMemoryMax = 256 << 20

func runBighost(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile, bighostParams{4, 8, 16 << 10}, bighostParams{20, 80, 64 << 10}, bighostParams{60, 80, 64 << 10})
	nsBytes := p.keys * p.valueBytes
	total := p.namespaces * nsBytes
	res := &Result{
		Setup: fmt.Sprintf("a real lehr-agent process (durable writes) against a distributor and control (embedded etcd, fsync on) in the bench process; %d namespaces of %d keys × %d KiB random values (%.1f MiB each, %.0f MiB in all). "+
			"Cold: an empty data directory, every namespace subscribed at once, timed until the agent's status shows every version. Peak RSS is the process's VmHWM (/proc/<pid>/status), "+
			"peak Go heap the largest live heap after a GC (GODEBUG=gctrace=1, 1 MB resolution); anon is RssAnon, the resident memory that is not a mapped file (Badger maps its value log; those pages count in RSS but the kernel may reclaim them). Bytes are the update frames the distributor wrote. Restart: SIGTERM, a new process on the same data directory, timed until its local API serves every namespace at its version.",
			p.namespaces, p.keys, p.valueBytes>>10, float64(nsBytes)/(1<<20), float64(total)/(1<<20)),
	}
	rig, err := newAgentRig(ctx, e, "big-host-0")
	if err != nil {
		return res, err
	}
	defer rig.close()
	cl, bin, args, sock, dataDir := rig.cl, rig.bin, rig.args, rig.sock, rig.dataDir
	dist := cl.Distributors(benchZone)[0]

	prod := cl.Producer()
	vals := newValueSource(p.valueBytes)
	names := make([]string, p.namespaces)
	latest := make([]uint64, p.namespaces)
	for i := range names {
		names[i] = fmt.Sprintf("%s/big-%03d", benchDomain, i)
		props := make([]producer.Property, p.keys)
		for k := range props {
			props[k] = producer.Property{Key: fmt.Sprintf("key%03d", k), Value: vals.next()}
		}
		v, err := prod.Publish(ctx, names[i], props)
		if err != nil {
			return res, fmt.Errorf("publish %s: %w", names[i], err)
		}
		latest[i] = v.GetSeq()
	}

	ap, err := startAgentProc(bin, args)
	if err != nil {
		return res, err
	}
	defer func() { ap.stop() }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	api := lehrpb.NewAgentClient(conn)
	waitFor := func(what string, timeout time.Duration, cond func() bool) error {
		return pollUntil(ctx, what, timeout, 10*time.Millisecond, cond)
	}
	status := func() *lehrpb.StatusResponse { return agentStatus(ctx, api) }
	if err := waitFor("agent connected", 60*time.Second, func() bool { st := status(); return st != nil && st.GetConnected() }); err != nil {
		return res, err
	}
	sent := func() uint64 { st := dist.Stats(); return st.SnapshotBytes + st.PatchBytes }

	// Cold: every namespace at once.
	before := sent()
	t0 := time.Now()
	for _, ns := range names {
		if _, err := api.Subscribe(ctx, &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "lehr-bench", TtlSeconds: 600}); err != nil {
			return res, fmt.Errorf("subscribe %s: %w", ns, err)
		}
	}
	allAt := func() bool { return agentHolds(ctx, api, names, latest) }
	// The peak of the agent's anonymous memory (heap, stacks: what the
	// kernel cannot reclaim, unlike the value log's mapped pages that
	// VmHWM counts too), sampled at every poll.
	var peakAnon int64
	sampleAnon := func() {
		if s, err := readProc(ap.cmd.Process.Pid); err == nil {
			peakAnon = max(peakAnon, s.anon)
		}
	}
	if err := waitFor("every namespace applied", 10*time.Minute, func() bool { sampleAnon(); return allAt() }); err != nil {
		return res, err
	}
	cold := time.Since(t0)
	coldBytes := sent() - before
	coldProc, _ := readProc(ap.cmd.Process.Pid)
	coldHeap := ap.peakHeap()
	disk := dirBytes(dataDir)
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: fmt.Sprintf("cold, %d × %.0f MiB", p.namespaces, float64(nsBytes)/(1<<20))}).
		Add("time", ms(cold), "ms").Add("peak rss", float64(coldProc.hwm)/(1<<20), "MiB").
		Add("peak go heap", float64(coldHeap), "MiB").Add("rss after", float64(coldProc.rss)/(1<<20), "MiB").
		Add("anon after", float64(coldProc.anon)/(1<<20), "MiB").Add("peak anon", float64(peakAnon)/(1<<20), "MiB").
		Add("sent", float64(coldBytes)/(1<<20), "MiB").Add("disk", float64(disk)/(1<<20), "MiB"))

	// Restart on the cache.
	ap.stop()
	before = sent()
	t0 = time.Now()
	if ap, err = startAgentProc(bin, args); err != nil {
		return res, err
	}
	served := func() bool {
		for i, ns := range names {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := api.Get(c, &lehrpb.AgentGetRequest{Namespace: ns, Keys: []string{"key000"}})
			cancel()
			if err != nil || r.GetVersion().GetSeq() != latest[i] {
				return false
			}
		}
		return true
	}
	if err := waitFor("restart serving", 5*time.Minute, served); err != nil {
		return res, err
	}
	warm := time.Since(t0)
	if err := waitFor("agent reconnected", 60*time.Second, func() bool { st := status(); return st != nil && st.GetConnected() }); err != nil {
		return res, err
	}
	if err := waitFor("every namespace announced", 5*time.Minute, allAt); err != nil {
		return res, err
	}
	warmBytes := sent() - before
	warmProc, _ := readProc(ap.cmd.Process.Pid)
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: "restart on its cache"}).
		Add("time", ms(warm), "ms").Add("peak rss", float64(warmProc.hwm)/(1<<20), "MiB").
		Add("peak go heap", float64(ap.peakHeap()), "MiB").Add("rss after", float64(warmProc.rss)/(1<<20), "MiB").
		Add("anon after", float64(warmProc.anon)/(1<<20), "MiB").
		Add("sent", float64(warmBytes)/(1<<20), "MiB"))

	res.Targets = append(res.Targets,
		Target{Goal: fmt.Sprintf("cold start of %.1f MiB: peak RSS <= %d MiB (the agent unit's MemoryMax)", float64(total)/(1<<20), bighostMemoryMax>>20),
			Got: fmt.Sprintf("%.0f MiB", float64(coldProc.hwm)/(1<<20)), Met: coldProc.hwm <= bighostMemoryMax},
		Target{Goal: fmt.Sprintf("cold start of %.1f MiB: peak anonymous memory (heap and stacks, sampled; RSS less the value log's reclaimable mapped pages) <= %d MiB", float64(total)/(1<<20), bighostMemoryMax>>20),
			Got: fmt.Sprintf("%.0f MiB", float64(peakAnon)/(1<<20)), Met: peakAnon > 0 && peakAnon <= bighostMemoryMax},
		Target{Goal: "restart on an intact cache sends 0 content bytes", Got: fmt.Sprintf("%d bytes", warmBytes), Met: warmBytes == 0})

	// Cold again, inside a memory cgroup limited as the unit's MemoryMax:
	// RSS counts the value log's mapped pages, which the kernel reclaims
	// at the limit; what matters is that the agent is never killed.
	ap.stop()
	cg, err := memcgroup.New(fmt.Sprintf("lehr-bench-bighost-%d", os.Getpid()), bighostMemoryMax)
	if err != nil {
		res.Notes = append(res.Notes, "cold start inside a memory cgroup not run: "+err.Error())
		return res, nil
	}
	if err := os.RemoveAll(dataDir); err != nil {
		return res, err
	}
	wbin, wargs := cg.Wrap(bin, args)
	if ap, err = startAgentProc(wbin, wargs); err != nil {
		return res, err
	}
	defer func() {
		ap.stop() // first: a cgroup with a process cannot be removed
		cg.Close()
	}()
	exited := func() bool {
		select {
		case err := <-ap.done:
			ap.done <- err
			return true
		default:
			return false
		}
	}
	if err := waitFor("agent connected", 60*time.Second, func() bool { st := status(); return exited() || st != nil && st.GetConnected() }); err != nil {
		return res, err
	}
	t0 = time.Now()
	for _, ns := range names {
		if exited() {
			break
		}
		if _, err := api.Subscribe(ctx, &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "lehr-bench", TtlSeconds: 600}); err != nil {
			return res, fmt.Errorf("subscribe %s in the cgroup: %w", ns, err)
		}
	}
	if err := waitFor("every namespace applied in the cgroup", 10*time.Minute, func() bool { return exited() || allAt() }); err != nil {
		return res, err
	}
	limited := time.Since(t0)
	kills, died := cg.OOMKills(), exited()
	lp, _ := readProc(ap.cmd.Process.Pid)
	row := (&Row{System: "lehr-agent", Case: fmt.Sprintf("cold, in a %d MiB memory cgroup", bighostMemoryMax>>20)}).
		Add("time", ms(limited), "ms").Add("peak go heap", float64(ap.peakHeap()), "MiB").Add("oom kills", float64(kills), "")
	if !died {
		row.Add("peak rss", float64(lp.hwm)/(1<<20), "MiB").Add("anon after", float64(lp.anon)/(1<<20), "MiB")
	}
	res.Rows = append(res.Rows, *row)
	res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("cold start of %.1f MiB inside a %d MiB memory cgroup (the unit's MemoryMax) completes, no OOM kill", float64(total)/(1<<20), bighostMemoryMax>>20),
		Got: fmt.Sprintf("completed %v, %d OOM kill(s)", !died, kills), Met: !died && kills == 0})
	return res, nil
}

// dirBytes is the size of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
