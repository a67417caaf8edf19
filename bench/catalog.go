package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/memcgroup"
)

func catalogScenario() Scenario {
	return Scenario{
		Name: "catalog",
		Title: "UCDP's catalog held: 277 domains and up to 71,000 namespaces of the realistic size mix in control (real processes): etcd against its quota, " +
			"control's RSS and idle cost, publish latency at 1/10/50 per second, history compaction, restart, a distributor with 0 and with thousands of agents (issue 27 §6), backup and restore (issue 33)",
		Run: runCatalog,
	}
}

// catalogParams are the sizes of one profile.
type catalogParams struct {
	domains, namespaces int
	// publishers load the catalog concurrently, each with its own client.
	publishers int
	// idle is the window control and the distributor are watched idle.
	idle time.Duration
	// rateFor is how long each publish rate runs.
	rateFor time.Duration
	// patches one-key patches go to patchNS of the 1 MiB namespaces
	// (more than the history kept, catalogKeepLast, each).
	patches, patchNS int
	// agents simulated agents subscribe catalogSubs namespaces each.
	agents int
	// fillQuota is the quota of the second store filled until it refuses.
	fillQuota int64
}

const (
	// catalogSubs is how many namespaces each simulated agent subscribes.
	catalogSubs = 10
	// catalogKeepLast is control's --keep-last (its default).
	catalogKeepLast = 100
	// catalogKeepFor is control's --keep-for here, instead of its default
	// of 7 days, so that the compaction pass after the patches removes
	// what it would remove a week later.
	catalogKeepFor = time.Second
)

// The size mix of issue 27: 70 % of namespaces ~1 KiB, 25 % ~20 KiB, 5 %
// ~1 MiB (mean 57 KiB).
type sizeClass struct {
	name        string
	keys, value int // keys per namespace, bytes per value
}

var catalogClasses = [3]sizeClass{
	{"1KiB", 4, 256},
	{"20KiB", 10, 2 << 10},
	{"1MiB", 16, 64 << 10},
}

// catalogClass returns namespace i's size class: one in 20 is 1 MiB, five
// in 20 are 20 KiB, the rest 1 KiB.
func catalogClass(i int) sizeClass {
	switch i % 20 {
	case 0:
		return catalogClasses[2]
	case 1, 2, 3, 4, 5:
		return catalogClasses[1]
	}
	return catalogClasses[0]
}

// catalogMeanBytes is the mix's mean namespace size (values only).
func catalogMeanBytes() float64 {
	var sum int
	for i := range 20 {
		c := catalogClass(i)
		sum += c.keys * c.value
	}
	return float64(sum) / 20
}

// catalogValues makes distinct values: a random block per size with a
// unique counter in its first 8 bytes (nothing on the path compresses).
type catalogValues struct {
	n    atomic.Uint64
	base map[int][]byte
}

func newCatalogValues() *catalogValues {
	v := &catalogValues{base: map[int][]byte{}}
	for _, c := range catalogClasses {
		b := make([]byte, c.value)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		v.base[c.value] = b
	}
	return v
}

func (v *catalogValues) next(size int) []byte {
	b := append([]byte(nil), v.base[size]...)
	binary.BigEndian.PutUint64(b, v.n.Add(1))
	return b
}

func (v *catalogValues) props(c sizeClass) []producer.Property {
	props := make([]producer.Property, c.keys)
	for k := range props {
		props[k] = producer.Property{Key: fmt.Sprintf("k%02d", k), Value: v.next(c.value)}
	}
	return props
}

// catalogName is namespace i of a catalog of the given domains.
func catalogName(i, domains int) string {
	return fmt.Sprintf("cat-%03d/n-%06d", i%domains, i)
}

func catalogDomain(d int) string { return fmt.Sprintf("cat-%03d", d) }

func runCatalog(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile,
		catalogParams{domains: 5, namespaces: 60, publishers: 4, idle: 2 * time.Second, rateFor: 2 * time.Second,
			patches: 300, patchNS: 2, agents: 20, fillQuota: 32 << 20},
		catalogParams{domains: 277, namespaces: 5000, publishers: 8, idle: 10 * time.Second, rateFor: 10 * time.Second,
			patches: 2000, patchNS: 5, agents: 1000, fillQuota: 256 << 20},
		catalogParams{domains: 277, namespaces: 71000, publishers: 8, idle: 30 * time.Second, rateFor: 60 * time.Second,
			patches: 9000, patchNS: 9, agents: 7500, fillQuota: 512 << 20},
	)
	res := &Result{
		Setup: fmt.Sprintf("control (embedded etcd, fsync on, default quota %d GiB, rollout strategist on, --keep-last %d, --keep-for %v instead of 7 days so that a compaction pass removes what it would a week later) "+
			"and one distributor run as real processes of the lehr binary; the bench process only publishes, the simulated agents run in a child process. "+
			"Load: %d domains (quotas the load never meets, each with a global-blast rollout policy), %d namespaces spread over them, 70 %% of 4 × 256 B, 25 %% of 10 × 2 KiB, 5 %% of 16 × 64 KiB "+
			"(mean %.0f KiB), random values, each published once by %d concurrent publishers (the quick profile's 5,000 loaded in 8.6 s, 578 namespaces/s, on 2 shared cores; "+
			"full loads the real 71,000). "+
			"Idle: %v with nothing published (control's history compactor off until the restart, so no pass of it lands in the window at random; its pass is timed after the restart): control's CPU and RSS "+
			"(/proc/<pid>, control and its etcd are one process; 'go heap' is the live heap after the process's last GC, from GODEBUG=gctrace=1, 1 MB resolution), etcd writes/s (the rise of lehr_control_store_revision), etcd's size and in-use bytes against its quota (lehr_control_store_*); "+
			"the distributor's RSS and CPU with every namespace's goal in its zone and no agent (it holds only what its agents subscribe to). "+
			"Publish: one-key patches (a value of the namespace's size class) to random namespaces, paced at 1, 10 and 50 per second for %v each, latency from the call to control's answer. "+
			"History: %d one-key patches of a 64 KiB value to %d of the 1 MiB namespaces, then control is restarted (SIGTERM, a new process on the same data directory, timed until a Get succeeds) with its compactor on: "+
			"its first pass (at once) removes what exceeds the history kept and asks for etcd's revision compaction; then control is restarted once more, "+
			"giving the free pages back before it serves (its embedded etcd is not defragmented online below the high-water mark); etcd's file and in-use bytes are read after it. "+
			"Agents: %d simulated agents (distributor/agenttest: real QUIC, mutual TLS and the agent's decisions; content not kept, versions kept) each subscribing %d random namespaces of the catalog; "+
			"the distributor's RSS once every agent holds all of its namespaces. "+
			"Refusal: a second control with a %d MiB store quota, filled with the same mix until it refuses a namespace; the namespaces it held then, scaled to the default quota, are the projected capacity.",
			control.DefaultStoreQuota>>30, catalogKeepLast, catalogKeepFor, p.domains, p.namespaces, catalogMeanBytes()/1024, p.publishers,
			p.idle, p.rateFor, p.patches, p.patchNS, p.agents, catalogSubs, p.fillQuota>>20),
	}
	bin, err := buildLehr(ctx, e.Dir)
	if err != nil {
		return res, err
	}
	c := &catalogRun{e: e, p: p, res: res, bin: bin, vals: newCatalogValues()}
	defer c.close()
	if err := c.run(ctx); err != nil {
		c.keepLogs()
		return res, err
	}
	res.Notes = append(res.Notes,
		"etcd writes/s with 1,000+ rollouts baking and nothing published (issue 27's ≈ 0) is the strategist scenario's row; not repeated here.",
		"control's RSS counts the pages of etcd's database file it has touched (mapped, reclaimable); anon is the heap and stacks.",
		"the projected capacity counts one version per namespace; history adds what its patches changed (see the patch row: one-key patches store the changed value and a small manifest, not the namespace again).")
	return res, nil
}

// catalogRun is one run of the scenario: the processes and what is known
// of the catalog.
type catalogRun struct {
	e    *Env
	p    catalogParams
	res  *Result
	bin  string
	vals *catalogValues

	ctl, dist *daemon
	ctlAddr   string
	distAddr  string
	pkiDir    string // the CA's directory, and the distributor's certificate
	prods     []*producer.Client
	// latest is each namespace's latest version.
	latest []atomic.Uint64
	// distIdleRSS is the distributor's RSS with no agent, bytes.
	distIdleRSS float64
	// histGot says what etcd's file did around the patches.
	histGot string
	// distCg is the distributor's memory cgroup (catalogDistMemoryMax);
	// nil when none could be made.
	distCg *memcgroup.Cgroup
}

// catalogDistMemoryMax is the memory cgroup limit the distributor runs
// under, as a unit's MemoryMax= would set it: the target's 1.5 GiB. The
// distributor gives its Go heap 90 % of it (internal/gomemlimit), so the
// row shows whether it holds 7,500 agents within the limit, not how far a
// heap left to double between collections would grow.
const catalogDistMemoryMax = 1536 << 20

func (c *catalogRun) close() {
	for _, p := range c.prods {
		p.Close()
	}
	for _, d := range []*daemon{c.dist, c.ctl} {
		if d != nil {
			d.stop(time.Minute)
		}
	}
	if c.distCg != nil {
		c.distCg.Close() // empty now
	}
}

// keepLogs copies the daemons' logs to the run's artefacts (after a
// failure: the scratch directory is removed).
func (c *catalogRun) keepLogs() {
	if c.e.OutDir == "" || os.MkdirAll(c.e.OutDir, 0o755) != nil {
		return
	}
	for _, d := range []*daemon{c.ctl, c.dist} {
		if d == nil {
			continue
		}
		if b, err := os.ReadFile(d.logPath); err == nil {
			path := filepath.Join(c.e.OutDir, fmt.Sprintf("catalog-%s-%s.log", c.e.Profile, d.name))
			if err := os.WriteFile(path, b, 0o644); err == nil {
				c.res.Notes = append(c.res.Notes, "the failed run's "+d.name+" log: "+path)
			}
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// controlArgs returns control's command line.
func controlArgs(dataDir, listen, metrics string, extra ...string) []string {
	return append([]string{"control", "--data-dir", dataDir, "--listen", listen, "--metrics-listen", metrics, "--dev",
		"--keep-last", fmt.Sprint(catalogKeepLast), "--keep-for", catalogKeepFor.String(), "--log-level", "warn"}, extra...)
}

// controlConn is a connection to control at addr that redials at once.
func controlConn(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond}, MinConnectTimeout: time.Second}))
}

// waitServing waits until control at addr answers a Get of ns (with the
// namespace's content: control read etcd to give it) or, with ns empty, a
// list of the zones.
func waitServing(ctx context.Context, d *daemon, addr, ns string, timeout time.Duration) error {
	conn, err := controlConn(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	cl := lehrpb.NewControlClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if ns != "" {
			_, err = cl.Get(cctx, &lehrpb.GetRequest{Namespace: ns})
		} else {
			_, err = cl.ListZones(cctx, &lehrpb.ListZonesRequest{})
		}
		cancel()
		if err == nil {
			return nil
		}
		if err := d.alive(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve within %v: %v", d.name, timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *catalogRun) run(ctx context.Context) error {
	e, p := c.e, c.p
	var err error
	if c.ctlAddr, err = freeTCPAddr(); err != nil {
		return err
	}
	metricsAddr, err := freeTCPAddr()
	if err != nil {
		return err
	}
	dataDir := filepath.Join(e.Dir, "control")
	// The history compactor is off for the first process (see Setup); the
	// restarted one runs it at the default interval.
	args := controlArgs(dataDir, c.ctlAddr, metricsAddr, "--compact-interval", "-1s")
	if c.ctl, err = startDaemon("control", c.bin, filepath.Join(e.Dir, "control.log"), metricsAddr, args); err != nil {
		return err
	}
	if err := waitServing(ctx, c.ctl, c.ctlAddr, "", controlStartTimeout); err != nil {
		return err
	}
	for range p.publishers {
		pr, err := producer.New(producer.Options{Address: c.ctlAddr, Author: "lehr-bench", Logger: e.Log})
		if err != nil {
			return err
		}
		c.prods = append(c.prods, pr)
	}
	if _, err := c.prods[0].CreateZone(ctx, benchZone); err != nil {
		return fmt.Errorf("create zone: %w", err)
	}
	if err := parallel(ctx, p.publishers, p.domains, func(d int) error {
		pr := c.prods[d%len(c.prods)]
		if _, err := pr.CreateDomain(ctx, &lehrpb.Domain{Name: catalogDomain(d), Description: "catalog", Quotas: benchQuotas()}); err != nil {
			return fmt.Errorf("create domain: %w", err)
		}
		_, err := pr.SetRolloutPolicy(ctx, catalogDomain(d), &lehrpb.RolloutPolicy{GlobalBlast: true}, "bench", 0)
		return err
	}); err != nil {
		return err
	}
	if err := c.startDistributor(ctx); err != nil {
		return err
	}

	// Load.
	c.latest = make([]atomic.Uint64, p.namespaces)
	var loadedBytes atomic.Int64
	start := time.Now()
	if err := parallel(ctx, p.publishers, p.namespaces, func(i int) error {
		cl := catalogClass(i)
		v, err := c.prods[i%len(c.prods)].Publish(ctx, catalogName(i, p.domains), c.vals.props(cl))
		if err != nil {
			return fmt.Errorf("load namespace %d: %w", i, err)
		}
		c.latest[i].Store(v.GetSeq())
		loadedBytes.Add(int64(cl.keys * cl.value))
		return nil
	}); err != nil {
		return err
	}
	loaded := time.Since(start)
	e.Log.Info("catalog loaded", "namespaces", p.namespaces, "took", loaded)
	if err := c.waitDistGoals(ctx, p.namespaces, 5*time.Minute); err != nil {
		return err
	}
	// Settle: the last rounds, the audit writer, a reading of etcd's space.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	m, err := c.ctl.metrics(ctx)
	if err != nil {
		return err
	}
	dbBytes, inUse := m.sum("lehr_control_store_bytes"), m.sum("lehr_control_store_in_use_bytes")
	quota, high := m.sum("lehr_control_store_quota_bytes"), m.sum("lehr_control_store_high_water_bytes")
	c.res.Rows = append(c.res.Rows, *(&Row{System: "lehr-control", Case: fmt.Sprintf("load %d namespaces, %d domains", p.namespaces, p.domains)}).
		Add("time", loaded.Seconds(), "s").Add("namespaces/s", float64(p.namespaces)/loaded.Seconds(), "").
		Add("content", float64(loadedBytes.Load())/(1<<20), "MiB").
		Add("etcd size", dbBytes/(1<<20), "MiB").Add("etcd in use", inUse/(1<<20), "MiB").
		Add("of quota", 100*dbBytes/quota, "%"))

	if c.e.CatalogAgentsOnly {
		rss, err := c.agents(ctx)
		if err != nil {
			return err
		}
		c.res.Targets = append(c.res.Targets, c.agentsTarget(rss))
		c.res.Notes = append(c.res.Notes, "run with -catalog-agents-only: the load, then the distributor with its agents; the other rows not measured")
		return nil
	}
	idleCPU, err := c.idle(ctx)
	if err != nil {
		return err
	}
	for _, rate := range []int{1, 10, 50} {
		if err := c.publishAt(ctx, rate, p.rateFor); err != nil {
			return err
		}
	}
	fileRatio, patched, err := c.history(ctx)
	if err != nil {
		return err
	}
	distAgentsRSS, err := c.agents(ctx)
	if err != nil {
		return err
	}
	fill, err := c.fill(ctx)
	if err != nil {
		return err
	}
	// Last: the restore renumbers every namespace.
	if err := c.restore(ctx); err != nil {
		return err
	}

	// Targets.
	n := p.namespaces
	// The default store's capacity at this mix, projected from the small
	// store's by the ratio of their high-water marks.
	defHigh := float64(control.DefaultStoreQuota - control.DefaultStoreQuota/store.DefaultReserveFraction)
	projected := float64(fill.held) * defHigh / float64(fill.highWater)
	goal := "namespaces held by the default store, realistic mix: >= 71,000 with history, writes refused cleanly long before full"
	if n < 71000 {
		goal = fmt.Sprintf("namespaces held by the default store, realistic mix: >= 71,000 (projected: %d loaded here), writes refused cleanly long before full", n)
	}
	c.res.Targets = append(c.res.Targets,
		Target{Goal: goal,
			Got: fmt.Sprintf("%d loaded, etcd at %.0f%% of its high-water mark; a %d MiB store held %d when it refused the next, at %.0f%% of its quota (%s): %.0f projected for the default %d GiB",
				n, 100*dbBytes/high, p.fillQuota>>20, fill.held, 100*fill.atFraction, fill.how, projected, control.DefaultStoreQuota>>30),
			Met: dbBytes < high && fill.clean && projected >= 71000},
		Target{Goal: fmt.Sprintf("etcd file after %s (live data unchanged) back to within 10 %% of the live data", patched),
			Got: fmt.Sprintf("%s: file / in use = %.2f", c.histGot, fileRatio), Met: fileRatio > 0 && fileRatio <= 1.10},
		Target{Goal: fmt.Sprintf("distributor RSS, %d namespaces in its zone (issue: 20,000), 0 agents <= 128 MiB", n),
			Got: fmt.Sprintf("%.0f MiB", c.distIdleRSS/(1<<20)), Met: c.distIdleRSS <= 128<<20},
		c.agentsTarget(distAgentsRSS),
		Target{Goal: fmt.Sprintf("control idle CPU with %d namespaces <= 0.02 cores", n),
			Got: fmt.Sprintf("%.4f cores", idleCPU), Met: idleCPU <= 0.02})
	return nil
}

// startDistributor starts the distributor process of benchZone, with a
// certificate from a CA of the run's.
func (c *catalogRun) startDistributor(ctx context.Context) error {
	c.pkiDir = filepath.Join(c.e.Dir, "pki")
	ca, err := pki.NewCA(c.pkiDir, "lehr-bench-catalog-CA", 24*time.Hour)
	if err != nil {
		return err
	}
	const id = "catalog-d0"
	ident := tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: benchZone, Name: id}
	cert, key, err := ca.IssueURIFiles(c.pkiDir, id, pki.Both, []string{"127.0.0.1"}, ident.URI(), 24*time.Hour)
	if err != nil {
		return err
	}
	if c.distAddr, err = freeUDPAddr(); err != nil {
		return err
	}
	metricsAddr, err := freeTCPAddr()
	if err != nil {
		return err
	}
	args := []string{"distributor", "--zone", benchZone, "--id", id, "--control", c.ctlAddr, "--control-plaintext",
		"--listen", c.distAddr, "--tls-cert", cert, "--tls-key", key, "--tls-ca", filepath.Join(c.pkiDir, pki.CACertFile),
		"--metrics-listen", metricsAddr, "--log-level", "warn"}
	bin := c.bin
	if c.distCg, err = memcgroup.New(fmt.Sprintf("lehr-bench-catalog-%d", os.Getpid()), catalogDistMemoryMax); err != nil {
		c.distCg = nil
		c.res.Notes = append(c.res.Notes, "the distributor ran without a memory limit: "+err.Error())
	} else {
		bin, args = c.distCg.Wrap(bin, args)
	}
	if c.dist, err = startDaemon("distributor", bin, filepath.Join(c.e.Dir, "distributor.log"), metricsAddr, args); err != nil {
		return err
	}
	return c.waitDist(ctx, "connected to control", startTimeout, func(m promSamples) bool {
		return m.sum("lehr_distributor_control_connected") == 1
	})
}

// waitDist polls the distributor's metrics until cond holds.
func (c *catalogRun) waitDist(ctx context.Context, what string, timeout time.Duration, cond func(promSamples) bool) error {
	return waitMetrics(ctx, c.dist, what, timeout, cond)
}

// waitDistGoals waits until the distributor knows n goals.
func (c *catalogRun) waitDistGoals(ctx context.Context, n int, timeout time.Duration) error {
	return c.waitDist(ctx, fmt.Sprintf("holding %d goals", n), timeout, func(m promSamples) bool {
		return m.sum("lehr_distributor_goals") >= float64(n)
	})
}

// idle watches control and the distributor with nothing published and
// returns control's CPU in cores.
func (c *catalogRun) idle(ctx context.Context) (float64, error) {
	m0, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, err
	}
	cpu0, _ := c.ctl.proc()
	d0, _ := c.dist.proc()
	t0 := time.Now()
	if err := sleep(ctx, c.p.idle); err != nil {
		return 0, err
	}
	m1, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, err
	}
	cpu1, err := c.ctl.proc()
	if err != nil {
		return 0, err
	}
	d1, err := c.dist.proc()
	if err != nil {
		return 0, err
	}
	secs := time.Since(t0).Seconds()
	dm, err := c.dist.metrics(ctx)
	if err != nil {
		return 0, err
	}
	cpu := (cpu1.cpu - cpu0.cpu).Seconds() / secs
	n := c.p.namespaces
	c.res.Rows = append(c.res.Rows,
		*(&Row{System: "lehr-control", Case: fmt.Sprintf("idle, %d namespaces", n)}).
			Add("rss", float64(cpu1.rss)/(1<<20), "MiB").Add("anon", float64(cpu1.anon)/(1<<20), "MiB").
			Add("cpu", cpu, "cores").
			Add("etcd writes/s", (m1.sum("lehr_control_store_revision")-m0.sum("lehr_control_store_revision"))/secs, "").
			Add("etcd requests/s", (m1.sum("lehr_control_etcd_round_trips_total")-m0.sum("lehr_control_etcd_round_trips_total"))/secs, "").
			Add("go heap", c.ctl.heapOr0(), "MiB"),
		*(&Row{System: "lehr-distributor", Case: fmt.Sprintf("%d goals in its zone, 0 agents", n)}).
			Add("rss", float64(d1.rss)/(1<<20), "MiB").Add("anon", float64(d1.anon)/(1<<20), "MiB").
			Add("go heap", c.dist.heapOr0(), "MiB").
			Add("cpu", (d1.cpu-d0.cpu).Seconds()/secs, "cores").
			Add("goals", dm.sum("lehr_distributor_goals"), "").Add("wanted", dm.sum("lehr_distributor_namespaces_wanted"), "").
			Add("cache", dm.sum("lehr_distributor_cache_bytes")/(1<<20), "MiB"))
	c.distIdleRSS = float64(d1.rss)
	return cpu, nil
}

// patch sets key k00 of namespace i to a new value of its size class,
// based on the latest version known.
func (c *catalogRun) patch(ctx context.Context, pr *producer.Client, i int) error {
	cl := catalogClass(i)
	v, err := pr.Patch(ctx, catalogName(i, c.p.domains), c.latest[i].Load(),
		producer.Patch{Set: []producer.Property{{Key: "k00", Value: c.vals.next(cl.value)}}})
	if err != nil {
		return err
	}
	c.latest[i].Store(v.GetSeq())
	return nil
}

// publishAt sends one-key patches to random namespaces, rate a second,
// for d, each from its own goroutine (open loop: a slow answer does not
// delay the next patch), never two at once to one namespace.
func (c *catalogRun) publishAt(ctx context.Context, rate int, d time.Duration) error {
	rng := rand.New(rand.NewPCG(uint64(rate), 27))
	var mu sync.Mutex
	inflight := map[int]bool{}
	var lats []time.Duration
	errs := 0
	var firstErr error
	var wg sync.WaitGroup
	m0, err := c.ctl.metrics(ctx)
	if err != nil {
		return err
	}
	cpu0, _ := c.ctl.proc()
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < d && ctx.Err() == nil {
		mu.Lock()
		i := rng.IntN(c.p.namespaces)
		for tries := 0; inflight[i] && tries < 100; tries++ {
			i = rng.IntN(c.p.namespaces)
		}
		busy := inflight[i]
		inflight[i] = true
		mu.Unlock()
		if !busy {
			sent++
			pr := c.prods[sent%len(c.prods)]
			wg.Go(func() {
				t0 := time.Now()
				err := c.patch(ctx, pr, i)
				lat := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				delete(inflight, i)
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				lats = append(lats, lat)
			})
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	m1, err := c.ctl.metrics(ctx)
	if err != nil {
		return err
	}
	cpu1, _ := c.ctl.proc()
	s := Summarize(lats)
	row := Row{System: "lehr-control", Case: fmt.Sprintf("publish %d/s for %v, one-key patches", rate, d)}
	row.Add("p50", ms(s.P50), "ms").Add("p99", ms(s.P99), "ms").Add("max", ms(s.Max), "ms").
		Add("publishes", float64(len(lats)), "").Add("errors", float64(errs), "").
		Add("cpu", (cpu1.cpu-cpu0.cpu).Seconds()/secs, "cores").
		Add("etcd writes/s", (m1.sum("lehr_control_store_revision")-m0.sum("lehr_control_store_revision"))/secs, "")
	c.res.Rows = append(c.res.Rows, row)
	if firstErr != nil {
		c.res.Notes = append(c.res.Notes, fmt.Sprintf("publish at %d/s: %d of %d failed, the first with: %v", rate, errs, sent, firstErr))
	}
	return nil
}

// history patches a few 1 MiB namespaces far beyond the history kept,
// restarts control (timed) with its compactor on, and waits for its first
// pass and the etcd compaction and defragmentation it asks for. It
// returns etcd's file size over its in-use bytes after, and the case.
func (c *catalogRun) history(ctx context.Context) (float64, string, error) {
	p := c.p
	var idx []int // the first patchNS 1 MiB namespaces
	for i := 0; i < p.namespaces && len(idx) < p.patchNS; i++ {
		if catalogClass(i) == catalogClasses[2] {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0, "", errors.New("no 1 MiB namespace to patch")
	}
	per := p.patches / len(idx)
	label := fmt.Sprintf("%d one-key patches to %d namespaces of 1 MiB", per*len(idx), len(idx))
	m0, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	if err := parallel(ctx, len(idx), len(idx), func(k int) error {
		for range per {
			if err := c.patch(ctx, c.prods[k%len(c.prods)], idx[k]); err != nil {
				return fmt.Errorf("patch: %w", err)
			}
		}
		return nil
	}); err != nil {
		return 0, "", err
	}
	took := time.Since(start)
	if err := sleep(ctx, 2*time.Second); err != nil { // a reading of etcd's space
		return 0, "", err
	}
	m1, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, "", err
	}

	// Restart, with the compactor at its default interval: its first pass
	// runs at once.
	stopped := c.ctl.stop(5 * time.Minute)
	args := c.ctl.args
	for i, a := range args {
		if a == "--compact-interval" {
			args = append(args[:i:i], args[i+2:]...)
			break
		}
	}
	c.ctl.args = args
	t0 := time.Now()
	if err := c.ctl.restart(); err != nil {
		return 0, "", err
	}
	if err := waitServing(ctx, c.ctl, c.ctlAddr, catalogName(idx[0], p.domains), 10*time.Minute); err != nil {
		return 0, "", fmt.Errorf("restart: %w", err)
	}
	serving := time.Since(t0)
	atServe, _ := c.ctl.proc()
	heapAtServe := c.ctl.heapOr0()
	// The first pass ends by asking for etcd's compaction (it removed
	// versions), which the space monitor runs at its next reading (within
	// a second).
	const (
		compactEv         = `lehr_control_store_space_events_total{event="compact"}`
		compactAtStartEv  = `lehr_control_store_space_events_total{event="compact_at_start"}`
		compactDur        = `lehr_control_etcd_duration_seconds_sum{op="compact"}`
		compactAtStartDur = `lehr_control_etcd_duration_seconds_sum{op="compact_at_start"}`
	)
	var compacted time.Duration
	var cpuThen procSample
	var m2 promSamples
	deadline := time.Now().Add(30 * time.Minute)
	for {
		m, err := c.ctl.metrics(ctx)
		if err == nil && m[compactEv] >= 1 {
			compacted = time.Since(t0)
			cpuThen, _ = c.ctl.proc()
			m2 = m
			break
		}
		if err := c.ctl.alive(); err != nil {
			return 0, "", err
		}
		if time.Now().After(deadline) {
			return 0, "", fmt.Errorf("control's first compaction pass did not compact etcd within 30 minutes (%v)", err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, "", err
		}
	}
	etcdCompact := time.Duration(m2[compactDur] * float64(time.Second))
	// Below the high-water mark control's embedded etcd is not
	// defragmented online (it would stall every call meanwhile): the
	// free pages the compaction made are given back at control's next
	// start, before it serves. Wait for a reading after the compaction,
	// then restart once more.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return 0, "", err
	}
	mFrag, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, "", err
	}
	if err := c.ctl.alive(); err != nil {
		return 0, "", err
	}
	c.ctl.stop(5 * time.Minute)
	t1 := time.Now()
	if err := c.ctl.restart(); err != nil {
		return 0, "", err
	}
	if err := waitServing(ctx, c.ctl, c.ctlAddr, catalogName(idx[0], p.domains), 10*time.Minute); err != nil {
		return 0, "", fmt.Errorf("second restart: %w", err)
	}
	serving2 := time.Since(t1)
	if err := sleep(ctx, 2*time.Second); err != nil { // a reading after it
		return 0, "", err
	}
	m3, err := c.ctl.metrics(ctx)
	if err != nil {
		return 0, "", err
	}
	rewritten := m3[compactAtStartEv] >= 1
	size, inUse := m3.sum("lehr_control_store_bytes"), m3.sum("lehr_control_store_in_use_bytes")
	mib := func(m promSamples, name string) float64 { return m.sum(name) / (1 << 20) }
	c.res.Rows = append(c.res.Rows,
		*(&Row{System: "lehr-control", Case: label}).
			Add("time", took.Seconds(), "s").Add("publishes", float64(per*len(idx)), "").
			Add("etcd size", mib(m1, "lehr_control_store_bytes"), "MiB").Add("etcd in use", mib(m1, "lehr_control_store_in_use_bytes"), "MiB"),
		*(&Row{System: "lehr-control", Case: fmt.Sprintf("restart, %d namespaces", p.namespaces)}).
			Add("stop", stopped.Seconds(), "s").Add("to serving", serving.Seconds(), "s").
			Add("rss", float64(atServe.rss)/(1<<20), "MiB").Add("anon", float64(atServe.anon)/(1<<20), "MiB").
			Add("go heap", heapAtServe, "MiB"),
		*(&Row{System: "lehr-control", Case: fmt.Sprintf("first compaction after the restart, %d namespaces", p.namespaces)}).
			Add("history pass", (compacted-etcdCompact).Seconds(), "s").
			Add("etcd compaction", etcdCompact.Seconds(), "s").
			Add("cpu time", cpuThen.cpu.Seconds(), "s").
			Add("etcd size", mib(mFrag, "lehr_control_store_bytes"), "MiB").Add("etcd in use", mib(mFrag, "lehr_control_store_in_use_bytes"), "MiB"),
		*(&Row{System: "lehr-control", Case: fmt.Sprintf("second restart: free pages given back before serving, %d namespaces", p.namespaces)}).
			Add("to serving", serving2.Seconds(), "s").
			Add("rewrite", m3[compactAtStartDur], "s").
			Add("etcd size", size/(1<<20), "MiB").Add("etcd in use", inUse/(1<<20), "MiB"))
	c.histGot = fmt.Sprintf("etcd file %.0f MiB before the patches, %.0f after them, %.0f after the compaction, %.0f after the next restart (%s), %.0f MiB in use",
		mib(m0, "lehr_control_store_bytes"), mib(m1, "lehr_control_store_bytes"), mib(mFrag, "lehr_control_store_bytes"), size/(1<<20),
		map[bool]string{true: "rewritten before serving", false: "not rewritten"}[rewritten], inUse/(1<<20))
	c.res.Notes = append(c.res.Notes, "first compaction: 'history pass' is from the restart to etcd's revision compaction its end asks for, less that compaction's own time "+
		"(it includes start-up and up to a second's wait for the space monitor's reading); 'etcd compaction' is that call's time (lehr_control_etcd_duration_seconds); "+
		"'cpu time' is control's CPU from its start to the end of etcd's compaction. "+
		"Second restart: control's embedded etcd is not defragmented online below the high-water mark (every call would wait it out); "+
		"control rewrites its database without the free pages at its next start, before serving ('rewrite', op=\"compact_at_start\").")
	if inUse <= 0 {
		return 0, label, nil
	}
	return size / inUse, label, nil
}

// agents connects the simulated agents, each subscribing catalogSubs
// random namespaces, waits until every one holds all of them, and returns
// the distributor's peak RSS.
func (c *catalogRun) agents(ctx context.Context) (float64, error) {
	p := c.p
	rng := rand.New(rand.NewPCG(7500, 10))
	subs := make([][]string, p.agents)
	want := map[string]int{} // namespace → index
	for a := range subs {
		picked := map[int]bool{}
		for len(picked) < min(catalogSubs, p.namespaces) {
			picked[rng.IntN(p.namespaces)] = true
		}
		for i := range picked {
			ns := catalogName(i, p.domains)
			want[ns] = i
			subs[a] = append(subs[a], ns)
		}
	}
	total := 0
	for _, s := range subs {
		total += len(s)
	}
	var mu sync.Mutex
	got := map[[2]int]bool{}
	all := make(chan struct{})
	onApplied := func(ev swarmEvent) {
		i, ok := want[ev.NS]
		if !ok || ev.Refused || ev.Version == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		k := [2]int{ev.I, i}
		if got[k] {
			return
		}
		got[k] = true
		if len(got) == total {
			close(all)
		}
	}
	d0, _ := c.dist.proc()
	start := time.Now()
	sw, conn, err := startSwarm(ctx, swarmConfig{
		Addr: c.distAddr, CADir: c.pkiDir, N: p.agents, Prefix: "cat", Zone: benchZone, AgentSubs: subs,
		Parallel: 32, Keep: true, DropContent: true, SilenceTimeout: c.e.AgentSilenceTimeout,
		// 7,500 handshakes took over 10 minutes on 2 cores shared with
		// builds, and the distributor refused some beyond its admission
		// bound (13 of 7,500 three times in a row).
		ConnectTimeout: 30 * time.Minute, DialAttempts: 20,
	}, onApplied)
	if err != nil {
		return 0, err
	}
	defer sw.quit()
	if conn.Failed > 0 {
		return 0, fmt.Errorf("%d agents failed to connect: %s", conn.Failed, conn.Err)
	}
	timeout := 20 * time.Minute
	select {
	case <-all:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(timeout):
		mu.Lock()
		n := len(got)
		mu.Unlock()
		return 0, fmt.Errorf("agents hold %d of their %d subscriptions after %v; %s", n, total, timeout, c.stallReport(ctx))
	}
	converged := time.Since(start)
	if err := sleep(ctx, 3*time.Second); err != nil {
		return 0, err
	}
	d1, err := c.dist.proc()
	if err != nil {
		return 0, err
	}
	scrapeStart := time.Now()
	dm, err := c.dist.metrics(ctx)
	if err != nil {
		return 0, err
	}
	scrape := time.Since(scrapeStart)
	swp, _ := readProc(sw.pid)
	c.res.Rows = append(c.res.Rows, *(&Row{System: "lehr-distributor", Case: fmt.Sprintf("%d agents × %d of %d namespaces", p.agents, catalogSubs, p.namespaces)}).
		Add("time", converged.Seconds(), "s").
		Add("rss", float64(d1.rss)/(1<<20), "MiB").Add("anon", float64(d1.anon)/(1<<20), "MiB").
		Add("peak rss", float64(d1.hwm)/(1<<20), "MiB").Add("go heap", c.dist.heapOr0(), "MiB").
		Add("cpu", (d1.cpu-d0.cpu).Seconds()/time.Since(start).Seconds(), "cores").
		Add("goals", dm.sum("lehr_distributor_goals"), "").Add("wanted", dm.sum("lehr_distributor_namespaces_wanted"), "").
		Add("cache", dm.sum("lehr_distributor_cache_bytes")/(1<<20), "MiB").
		Add("go memory limit", dm.sum("go_memlimit_bytes")/(1<<20), "MiB").Add("oom kills", float64(c.oomKills()), "").
		Add("scrape", ms(scrape), "ms").
		Add("agents' rss", float64(swp.rss)/(1<<20), "MiB").
		Add("behind after", c.behindAfter(ctx, dm), "").
		Add("reconnects", dm.sum("lehr_distributor_handshakes_total")-float64(p.agents), "").
		Add("zone report counts", c.zoneReportCounts(ctx, len(want)), "").
		Add("report errors", dm.sum("lehr_distributor_report_errors_total"), ""))
	return float64(d1.hwm), nil
}

// zoneReportBound is how long zoneReportCounts waits for control's view of
// the zone to count every namespace subscribed: a few report intervals.
const zoneReportBound = time.Minute

// zoneReportCounts returns how many namespaces control's status of the
// zone counts agents of (GetZoneStatus, BASIC view), waiting up to
// zoneReportBound for it to be every one of the distinct namespaces
// subscribed: the distributor's report, larger than one etcd request at
// this size, stored and read back whole (issue 27).
func (c *catalogRun) zoneReportCounts(ctx context.Context, subscribed int) float64 {
	cl := c.prods[0].RPC()
	n := 0
	var lastErr error
	for end := time.Now().Add(zoneReportBound); ; {
		st, err := cl.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: benchZone, View: lehrpb.ZoneStatusView_ZONE_STATUS_VIEW_BASIC})
		if err == nil {
			seen := map[string]bool{}
			for _, v := range st.GetVersions() {
				seen[v.GetNamespace()] = true
			}
			n, lastErr = len(seen), nil
		} else {
			lastErr = err
		}
		if n == subscribed || time.Now().After(end) || sleep(ctx, 5*time.Second) != nil {
			break
		}
	}
	if n != subscribed {
		c.res.Notes = append(c.res.Notes, fmt.Sprintf("control's status of the zone counts %d of the %d namespaces subscribed after %v (last error: %v)", n, subscribed, zoneReportBound, lastErr))
	}
	return float64(n)
}

// behindBound is how long behindAfter waits for the distributor's own
// view to agree with the agents'.
const behindBound = 2 * time.Minute

// behindAfter returns how many namespaces the distributor still counts
// agents behind on (lehr_distributor_namespace_lag) once every agent has
// applied every namespace, waiting up to behindBound for it to reach 0;
// dm is its first reading. A session the distributor counts behind with
// nothing in flight is one that stopped pushing (issue 27's tail): when
// some remain, the distributor dumps its goroutines (SIGQUIT) and the
// fan-out's are kept in OutDir.
func (c *catalogRun) behindAfter(ctx context.Context, dm promSamples) float64 {
	behind := func(m promSamples) (n int) {
		for series, v := range m {
			if v > 0 && strings.HasPrefix(series, "lehr_distributor_namespace_lag{") {
				n++
			}
		}
		return n
	}
	n := behind(dm)
	for end := time.Now().Add(behindBound); n > 0 && time.Now().Before(end); {
		if sleep(ctx, 5*time.Second) != nil {
			break
		}
		if m, err := c.dist.metrics(ctx); err == nil {
			n = behind(m)
		}
	}
	if n > 0 {
		c.res.Notes = append(c.res.Notes, fmt.Sprintf("%d namespace(s) still counted behind by the distributor %v after every agent applied every namespace; %s", n, behindBound, c.stallReport(ctx)))
		c.keepFanoutGoroutines()
	}
	return float64(n)
}

// keepFanoutGoroutines waits for the distributor's SIGQUIT dump and keeps
// its goroutines that run the fan-out's code in OutDir.
func (c *catalogRun) keepFanoutGoroutines() {
	if c.e.OutDir == "" {
		return
	}
	select {
	case <-c.dist.done:
	case <-time.After(time.Minute):
		return
	}
	b, err := os.ReadFile(c.dist.logPath)
	if err != nil {
		return
	}
	var out strings.Builder
	for _, g := range strings.Split(string(b), "\n\ngoroutine ") {
		if strings.Contains(g, "distributor/fanout.") {
			out.WriteString("goroutine " + g + "\n\n")
		}
	}
	path := filepath.Join(c.e.OutDir, fmt.Sprintf("catalog-%s-fanout-goroutines.txt", c.e.Profile))
	if os.WriteFile(path, []byte(out.String()), 0o644) == nil {
		c.res.Notes = append(c.res.Notes, "the fan-out's goroutines at the end: "+path)
	}
}

// agentsTarget is issue 27's target for the distributor with its agents,
// given its peak RSS.
func (c *catalogRun) agentsTarget(rss float64) Target {
	return Target{Goal: fmt.Sprintf("distributor RSS, %d agents × %d of %d namespaces <= 1.5 GiB", c.p.agents, catalogSubs, c.p.namespaces),
		Got: fmt.Sprintf("%.0f MiB at its peak, %d OOM kills", rss/(1<<20), c.oomKills()), Met: rss <= 1.5*(1<<30) && c.oomKills() == 0}
}

// oomKills is how many processes of the distributor's cgroup the kernel
// killed for memory (0 without a cgroup).
func (c *catalogRun) oomKills() int {
	if c.distCg == nil {
		return 0
	}
	return c.distCg.OOMKills()
}

// fillResult is what filling a small store to refusal showed.
type fillResult struct {
	held       int     // namespaces it held when it refused one
	atFraction float64 // its etcd size over its quota then
	highWater  int64
	clean      bool   // refused with STORE_FULL before etcd's alarm; rollback and reads go on
	how        string // what the refusal was
}

// fill starts a second control with a store quota of p.fillQuota and
// publishes the catalog's mix into it until it refuses a namespace; then
// checks that the refusal is the store's (not etcd's NOSPACE alarm) and
// that a rollback and a read still succeed.
func (c *catalogRun) fill(ctx context.Context) (fillResult, error) {
	var r fillResult
	addr, err := freeTCPAddr()
	if err != nil {
		return r, err
	}
	metricsAddr, err := freeTCPAddr()
	if err != nil {
		return r, err
	}
	dir := filepath.Join(c.e.Dir, "fill")
	defer os.RemoveAll(dir)
	args := controlArgs(dir, addr, metricsAddr, "--compact-interval", "-1s", "--store-quota", fmt.Sprintf("%dMiB", c.p.fillQuota>>20))
	d, err := startDaemon("control (small store)", c.bin, filepath.Join(c.e.Dir, "fill.log"), metricsAddr, args)
	if err != nil {
		return r, err
	}
	defer d.stop(time.Minute)
	if err := waitServing(ctx, d, addr, "", controlStartTimeout); err != nil {
		return r, err
	}
	var prods []*producer.Client
	for range c.p.publishers {
		pr, err := producer.New(producer.Options{Address: addr, Author: "lehr-bench", Logger: c.e.Log})
		if err != nil {
			return r, err
		}
		defer pr.Close()
		prods = append(prods, pr)
	}
	const domain = "fill"
	if _, err := prods[0].CreateDomain(ctx, &lehrpb.Domain{Name: domain, Description: "filled to refusal", Quotas: benchQuotas()}); err != nil {
		return r, err
	}
	// A namespace with two versions, to roll back once the store refuses.
	first := domain + "/first"
	for range 2 {
		if _, err := prods[0].Publish(ctx, first, c.vals.props(catalogClasses[0])); err != nil {
			return r, err
		}
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var next, held atomic.Int64
	var refusal error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for _, pr := range prods {
		wg.Go(func() {
			for fctx.Err() == nil {
				i := int(next.Add(1) - 1)
				_, err := pr.Publish(fctx, fmt.Sprintf("%s/n-%06d", domain, i), c.vals.props(catalogClass(i)))
				if err == nil {
					held.Add(1)
					continue
				}
				if fctx.Err() == nil {
					once.Do(func() { refusal = err })
				}
				stop()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if err := sleep(ctx, 2*time.Second); err != nil { // a reading of etcd's space
		return r, err
	}
	m, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	size, quota := m.sum("lehr_control_store_bytes"), m.sum("lehr_control_store_quota_bytes")
	r.highWater = int64(m.sum("lehr_control_store_high_water_bytes"))
	r.held = int(held.Load()) + 1 // and "first"
	r.atFraction = size / quota
	var ae *apierror.Error
	storeFull := errors.As(refusal, &ae) && ae.Reason == apierror.ReasonStoreFull
	alarm := m.sum("lehr_control_store_nospace_alarm") != 0
	_, rbErr := prods[0].Rollback(ctx, first, 1, producer.WithMessage("the safety path, the store refusing content"))
	_, getErr := prods[0].Get(ctx, first)
	r.clean = storeFull && !alarm && rbErr == nil && getErr == nil
	r.how = fmt.Sprintf("refused: %v", refusal)
	if storeFull {
		r.how = fmt.Sprintf("refused with %s %s", ae.Code, ae.Reason)
	}
	if alarm {
		r.how += ", etcd's NOSPACE alarm raised"
	}
	if rbErr != nil {
		r.how += fmt.Sprintf(", rollback failed: %v", rbErr)
	} else {
		r.how += ", a rollback succeeded"
	}
	if getErr != nil {
		r.how += fmt.Sprintf(", a read failed: %v", getErr)
	}
	rb := 0.0
	if rbErr == nil {
		rb = 1
	}
	c.res.Rows = append(c.res.Rows, *(&Row{System: "lehr-control", Case: fmt.Sprintf("a %d MiB store filled until it refuses", c.p.fillQuota>>20)}).
		Add("time", took.Seconds(), "s").Add("namespaces", float64(r.held), "").
		Add("etcd size", size/(1<<20), "MiB").Add("of quota", 100*r.atFraction, "%").Add("of high-water", 100*size/float64(r.highWater), "%").
		Add("rollback ok", rb, ""))
	return r, nil
}

// stallReport says what the distributor makes of a tail that does not
// converge — its counters and the namespaces whose agents lag — and has it
// dump every goroutine into its log (SIGQUIT; the run has failed anyway),
// so that where its pushes wait can be read afterwards.
func (c *catalogRun) stallReport(ctx context.Context) string {
	var b strings.Builder
	if m, err := c.dist.metrics(ctx); err != nil {
		fmt.Fprintf(&b, "distributor metrics: %v; ", err)
	} else {
		for _, name := range []string{"lehr_distributor_connected_agents", "lehr_distributor_pushes_total", "lehr_distributor_acks_total",
			"lehr_distributor_ack_timeouts_total", "lehr_distributor_stalled_pushes_total", "lehr_distributor_refused_updates_total",
			"lehr_distributor_handshakes_total", "lehr_distributor_goals", "lehr_distributor_namespaces_wanted"} {
			fmt.Fprintf(&b, "%s %.0f, ", name, m.sum(name))
		}
		var lagging []string
		for series, v := range m {
			if v > 0 && strings.HasPrefix(series, "lehr_distributor_namespace_lag{") {
				lagging = append(lagging, fmt.Sprintf("%s=%.0f", strings.TrimPrefix(series, "lehr_distributor_namespace_lag"), v))
			}
		}
		slices.Sort(lagging)
		if len(lagging) > 20 {
			lagging = append(lagging[:20], fmt.Sprintf("… %d more", len(lagging)-20))
		}
		fmt.Fprintf(&b, "lagging %v; ", lagging)
	}
	if err := c.dist.cmd.Process.Signal(syscall.SIGQUIT); err == nil {
		fmt.Fprintf(&b, "the distributor's goroutines are dumped in %s", c.dist.logPath)
	}
	return b.String()
}
