package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
)

func footprintScenario() Scenario {
	return Scenario{
		Name:  "footprint",
		Title: "real agent process: idle RSS and Go heap, RSS under load, cold start to serving cached namespaces (issue 4 §6)",
		Run:   runFootprint,
	}
}

type footprintParams struct {
	namespaces int
	load       time.Duration
}

// gctraceRE matches the heap sizes of a GODEBUG=gctrace=1 line:
// "… 4->4->2 MB, 5 MB goal …"; the third number is the live heap.
var gctraceRE = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

// agentProc is a real lehr-agent process.
type agentProc struct {
	cmd      *exec.Cmd
	done     chan error
	stopOnce sync.Once

	mu      sync.Mutex
	liveMB  int // live heap after the last GC, from gctrace
	peakMB  int // the largest live heap after a GC so far
	gcCount int
}

func startAgentProc(bin string, args []string) (*agentProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent process: %w", err)
	}
	ap := &agentProc{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := gctraceRE.FindStringSubmatch(sc.Text()); m != nil {
				live, _ := strconv.Atoi(m[3])
				ap.mu.Lock()
				ap.liveMB, ap.gcCount = live, ap.gcCount+1
				ap.peakMB = max(ap.peakMB, live)
				ap.mu.Unlock()
			}
		}
		io.Copy(io.Discard, stderr)
		ap.done <- cmd.Wait()
	}()
	return ap, nil
}

// peakHeap returns the largest live heap after a GC so far, MB.
func (ap *agentProc) peakHeap() int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return ap.peakMB
}

func (ap *agentProc) heap() (int, int) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return ap.liveMB, ap.gcCount
}

// stop sends SIGTERM and waits (killing after 30 s). It is idempotent.
func (ap *agentProc) stop() {
	ap.stopOnce.Do(func() {
		ap.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ap.done:
		case <-time.After(30 * time.Second):
			ap.cmd.Process.Kill()
			<-ap.done
		}
	})
}

// agentRig is a real lehr-agent process's surroundings: the binary, a
// cluster (control and a distributor in this process, no agents of its
// own), the host's certificate, and the agent's command line.
type agentRig struct {
	bin     string
	cl      *devcluster.Cluster
	args    []string
	dataDir string
	sock    string
	close   func()
}

// newAgentRig builds lehr-agent (unless Env.AgentBinary names one),
// starts the cluster and prepares the command line of agent host, whose
// data lives in e.Dir/<host>. close stops the cluster.
func newAgentRig(ctx context.Context, e *Env, host string) (*agentRig, error) {
	bin := e.AgentBinary
	if bin == "" {
		bin = filepath.Join(e.Dir, "lehr-agent")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "lehr.dev/lehr/cmd/lehr-agent").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("build lehr-agent: %w: %s", err, out)
		}
	}
	cl, err := devcluster.Start(ctx, devcluster.Options{
		DomainQuotas: benchQuotas(),
		Dir:          filepath.Join(e.Dir, "cluster-"+host), Zones: []string{benchZone}, Domains: []string{benchDomain},
		AgentsPerZone: -1, Logger: e.Log,
	})
	if err != nil {
		return nil, err
	}
	if _, err := cl.HostTLS(benchZone, host); err != nil {
		cl.Close()
		return nil, err
	}
	sockDir, err := os.MkdirTemp("", "lbag") // short: a unix socket path is at most 107 bytes
	if err != nil {
		cl.Close()
		return nil, err
	}
	pkiDir := filepath.Join(cl.Dir(), "pki")
	r := &agentRig{bin: bin, cl: cl, dataDir: filepath.Join(e.Dir, host), sock: filepath.Join(sockDir, "agent.sock")}
	r.args = []string{
		"--zone", benchZone, "--distributors", cl.Distributors(benchZone)[0].Addr(),
		"--tls-ca", cl.CAFile(), "--tls-cert", filepath.Join(pkiDir, host+".crt"), "--tls-key", filepath.Join(pkiDir, host+".key"),
		"--host-id", host, "--data-dir", r.dataDir, "--socket", r.sock, "--lease-ttl", "10m", "--grace", "1h", "--log-level", "warn",
	}
	r.close = func() {
		cl.Close()
		os.RemoveAll(sockDir)
	}
	return r, nil
}

// pollUntil calls cond every interval until it holds, ctx ends or timeout
// passes; the error names what was awaited.
func pollUntil(ctx context.Context, what string, timeout, interval time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, timeout)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(interval)
	}
	return nil
}

// agentStatus asks a real agent for its status; nil when it does not
// answer within 2 s.
func agentStatus(ctx context.Context, api lehrpb.AgentClient) *lehrpb.StatusResponse {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := api.Status(c, &lehrpb.StatusRequest{})
	if err != nil {
		return nil
	}
	return st
}

// agentHolds reports whether the agent's status shows each of names at
// least at the version in latest (same index).
func agentHolds(ctx context.Context, api lehrpb.AgentClient, names []string, latest []uint64) bool {
	st := agentStatus(ctx, api)
	if st == nil {
		return false
	}
	have := map[string]uint64{}
	for _, n := range st.GetNamespaces() {
		have[n.GetNamespace()] = n.GetVersion()
	}
	for i, ns := range names {
		if have[ns] < latest[i] {
			return false
		}
	}
	return true
}

func runFootprint(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile, footprintParams{10, time.Second}, footprintParams{100, 5 * time.Second}, footprintParams{100, 20 * time.Second})
	res := &Result{
		Setup: fmt.Sprintf("a real lehr-agent process (cmd/lehr-agent, durable writes) against a distributor and control (embedded etcd, fsync on) in the bench process; %d namespaces of 10 × 1 KiB keys; "+
			"RSS is VmRSS of /proc/<pid>/status, anon its RssAnon (heap, stacks and Go's runtime: what the kernel cannot reclaim; the rest is file-backed: 'executable' the agent binary's own resident pages, clean and shared by every process of the binary, 'other files' Badger's mapped tables and logs and shared libraries, /proc/<pid>/smaps); Go heap is the live heap after the agent's last GC as GODEBUG=gctrace=1 prints it (1 MB resolution). "+
			"Load: one producer patching one key of the namespaces round-robin, back to back, for %v; RSS sampled every 20 ms. Cold start: SIGTERM, then a new process on the same data directory, timed until its local API returns the cached version of every namespace (Get).",
			p.namespaces, p.load),
		Notes: []string{"the Go heap comes from gctrace (1 MB resolution); the agent's /metrics also serves go_memstats_* (metrics.WriteProcessMetrics) when --metrics-listen is set, which a later harness version could read instead."},
	}
	rig, err := newAgentRig(ctx, e, "fp-host-0")
	if err != nil {
		return res, err
	}
	defer rig.close()
	cl, bin, args, sock := rig.cl, rig.bin, rig.args, rig.sock
	prod := cl.Producer()
	vals := newValueSource(1 << 10)
	names := make([]string, p.namespaces)
	latest := make([]uint64, p.namespaces)
	for i := range names {
		names[i] = fmt.Sprintf("%s/fp-%03d", benchDomain, i)
		var props []producer.Property
		for k := range 10 {
			props = append(props, producer.Property{Key: fmt.Sprintf("key%02d", k), Value: vals.next()})
		}
		v, err := prod.Publish(ctx, names[i], props)
		if err != nil {
			return res, err
		}
		latest[i] = v.GetSeq()
	}

	ap, err := startAgentProc(bin, args)
	if err != nil {
		return res, err
	}
	defer func() { ap.stop() }()
	// Reconnect fast: the cold start is timed through this connection.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 1.2, MaxDelay: 10 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	api := lehrpb.NewAgentClient(conn)
	waitFor := func(what string, timeout time.Duration, cond func() bool) error {
		return pollUntil(ctx, what, timeout, 5*time.Millisecond, cond)
	}
	status := func() *lehrpb.StatusResponse { return agentStatus(ctx, api) }
	if err := waitFor("agent connected", 60*time.Second, func() bool { st := status(); return st != nil && st.GetConnected() }); err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second)
	idle, _ := readProc(ap.cmd.Process.Pid)
	idleHeap, _ := ap.heap()
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: "idle, no namespaces"}).
		Add("rss", float64(idle.rss)/(1<<20), "MiB").Add("anon", float64(idle.anon)/(1<<20), "MiB").Add("go heap", float64(idleHeap), "MiB"))

	// Subscribe to every namespace and wait for all of them.
	for _, ns := range names {
		if _, err := api.Subscribe(ctx, &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "lehr-bench", TtlSeconds: 600}); err != nil {
			return res, fmt.Errorf("subscribe %s: %w", ns, err)
		}
	}
	allAt := func() bool { return agentHolds(ctx, api, names, latest) }
	if err := waitFor("every namespace applied", 120*time.Second, allAt); err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second)
	held, _ := readProc(ap.cmd.Process.Pid)
	heldHeap, _ := ap.heap()
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: fmt.Sprintf("idle, %d namespaces", p.namespaces)}).
		Add("rss", float64(held.rss)/(1<<20), "MiB").Add("anon", float64(held.anon)/(1<<20), "MiB").Add("go heap", float64(heldHeap), "MiB"))
	if exe, other, err := fileRSS(ap.cmd.Process.Pid); err == nil {
		r := &res.Rows[len(res.Rows)-1]
		r.Add("executable", float64(exe)/(1<<20), "MiB").Add("other files", float64(other)/(1<<20), "MiB")
	}

	// Load.
	var peak int64
	stopSampler := make(chan struct{})
	var swg sync.WaitGroup
	swg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-t.C:
				if s, err := readProc(ap.cmd.Process.Pid); err == nil {
					peak = max(peak, s.rss)
				}
			}
		}
	})
	cpu0, _ := readProc(ap.cmd.Process.Pid)
	start := time.Now()
	updates := 0
	for i := 0; time.Since(start) < p.load; i++ {
		k := i % len(names)
		nv, err := prod.Patch(ctx, names[k], latest[k], producer.Patch{Set: []producer.Property{{Key: "key00", Value: vals.next()}}})
		if err != nil {
			close(stopSampler)
			swg.Wait()
			return res, err
		}
		latest[k] = nv.GetSeq()
		updates++
	}
	err = waitFor("load applied", 120*time.Second, allAt)
	el := time.Since(start)
	close(stopSampler)
	swg.Wait()
	if err != nil {
		return res, err
	}
	cpu1, _ := readProc(ap.cmd.Process.Pid)
	loadHeap, gcs := ap.heap()
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: fmt.Sprintf("load, %d updates in %.1fs", updates, el.Seconds())}).
		Add("rss", float64(peak)/(1<<20), "MiB").Add("go heap", float64(loadHeap), "MiB").
		Add("cpu/update", (cpu1.cpu-cpu0.cpu).Seconds()*1000/float64(updates), "ms").Add("gcs so far", float64(gcs), ""))

	// Cold start.
	ap.stop()
	t0 := time.Now()
	ap2, err := startAgentProc(bin, args)
	if err != nil {
		return res, err
	}
	ap = ap2
	served := func() bool {
		for i, ns := range names {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := api.Get(c, &lehrpb.AgentGetRequest{Namespace: ns, Keys: []string{"key00"}})
			cancel()
			if err != nil || r.GetVersion().GetSeq() != latest[i] {
				return false
			}
		}
		return true
	}
	if err := waitFor("cold start", 120*time.Second, served); err != nil {
		return res, err
	}
	cold := time.Since(t0)
	coldRSS, _ := readProc(ap.cmd.Process.Pid)
	res.Rows = append(res.Rows, *(&Row{System: "lehr-agent", Case: fmt.Sprintf("cold start, %d cached namespaces", p.namespaces)}).
		Add("rss", float64(coldRSS.rss)/(1<<20), "MiB").Add("to serving", ms(cold), "ms"))
	res.Targets = append(res.Targets,
		Target{Goal: "real agent idle RSS <= 32 MiB (no namespace)", Got: fmt.Sprintf("%.1f MiB", float64(idle.rss)/(1<<20)), Met: idle.rss <= 32<<20},
		Target{Goal: fmt.Sprintf("real agent idle RSS <= 32 MiB (holding %d namespaces)", p.namespaces), Got: fmt.Sprintf("%.1f MiB", float64(held.rss)/(1<<20)), Met: held.rss <= 32<<20})
	return res, nil
}
