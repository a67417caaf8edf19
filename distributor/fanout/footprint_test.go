package fanout_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/testenv/wait"
)

// The footprint measurement: N simulated agents in a child process (so the
// parent's heap is the distributor's alone) connect to one fanout server,
// each receives a 10 × 1 KiB namespace, and the parent reports the Go heap
// in use per connected agent after full collections, goroutines per agent
// and the top allocation sites still in use. Run it alone with more agents:
//
//	go test ./distributor/fanout -run TestConnectionFootprint -v -footprint.agents 1000
var (
	footprintAgents  = flag.Int("footprint.agents", 100, "agents connected by TestConnectionFootprint")
	footprintProfile = flag.String("footprint.profile", "", "write the distributor's heap profile after TestConnectionFootprint connected every agent to this file")
)

// footprintBound is a generous regression bound on the distributor's Go
// heap per connected agent (measured ≈ 30 KiB with the server QUIC config,
// ≈ 60 KiB before it; the race detector adds some).
const footprintBound = 200 << 10

// footprintChildEnv carries the child's configuration (JSON of
// footprintConfig); set, TestConnectionFootprint runs the agent swarm.
const footprintChildEnv = "LEHR_FANOUT_FOOTPRINT_CHILD"

type footprintConfig struct {
	Addr      string
	CADir     string
	N         int
	Namespace string
	Seq       uint64
}

// footprintReport is the child's one line on stdout, after "FOOTPRINT ".
type footprintReport struct {
	Connected int
	// HeapPerAgent is the child's own Go heap per simulated agent (the
	// client side of the QUIC config, not the real agent).
	HeapPerAgent int64
	Err          string
}

func TestConnectionFootprint(t *testing.T) {
	if cfg := os.Getenv(footprintChildEnv); cfg != "" {
		footprintChild(t, cfg)
		return
	}
	if testing.Short() {
		t.Skip("connects many agents; skipped in -short")
	}
	n := *footprintAgents
	oldRate := runtime.MemProfileRate
	runtime.MemProfileRate = 4096
	defer func() { runtime.MemProfileRate = oldRate }()

	e := newEnv(t)
	const ns = "dom/footprint"
	m := map[string]string{}
	for i := range 10 {
		m[fmt.Sprintf("key%02d", i)] = strings.Repeat(string(rune('a'+i)), 1024)
	}
	v := e.publish(ns, m)

	m0 := settledMem()
	cfg, _ := json.Marshal(footprintConfig{Addr: e.srv.Addr().String(), CADir: filepath.Join(e.pki.dir, "ca"), N: n, Namespace: ns, Seq: v.Seq})
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnectionFootprint$", "-test.count=1")
	cmd.Env = append(os.Environ(), footprintChildEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("stdin pipe: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start swarm: %v", err)
	}
	defer func() {
		stdin.Close() // the child closes its agents and exits on EOF
		if err := cmd.Wait(); err != nil {
			t.Errorf("swarm child: %v", err)
		}
	}()
	rep, err := readFootprintReport(stdout)
	if err != nil {
		t.Fatalf("swarm child: %v", err)
	}
	if rep.Err != "" || rep.Connected != n {
		t.Fatalf("swarm child connected %d of %d agents: %s", rep.Connected, n, rep.Err)
	}
	wait.For(t, "every agent registered and holding the goal", func() bool {
		return e.srv.Stats().Agents == n && e.srv.Lag(ns) == 0
	})
	elapsed := time.Since(start)
	m1 := settledMem()
	per := (m1.heap - m0.heap) / int64(n)
	t.Logf("%d agents connected and served in %v", n, elapsed.Round(time.Millisecond))
	t.Logf("distributor: %.1f KiB Go heap in use per agent (%.1f MiB → %.1f MiB); %.1f KiB goroutine stacks per agent, %.1f goroutines per agent",
		float64(per)/1024, float64(m0.heap)/(1<<20), float64(m1.heap)/(1<<20),
		float64(m1.stack-m0.stack)/1024/float64(n), float64(m1.goroutines-m0.goroutines)/float64(n))
	t.Logf("simulated agent (client side, in the child): %.1f KiB Go heap in use per connection", float64(rep.HeapPerAgent)/1024)
	t.Logf("distributor heap in use by allocation site (first frame outside runtime), KiB per agent:\n%s", heapTop(n, 12))
	if *footprintProfile != "" {
		if err := writeHeapProfile(*footprintProfile); err != nil {
			t.Errorf("write heap profile: %v", err)
		} else {
			t.Logf("heap profile: go tool pprof -top -sample_index=inuse_space %s", *footprintProfile)
		}
	}
	if per > footprintBound {
		t.Errorf("distributor heap per connected agent = %d B, want ≤ %d B", per, footprintBound)
	}
	// An idle agent's connection holds quic-go's two goroutines (its
	// connection loop and send queue) and the session's read loop; push
	// rounds run only while there is something to push (session.kick).
	// With a push goroutine per session for its lifetime it was 4.0, and
	// its stack cost each agent ~5 KiB (bench/RESULTS.md).
	if g := float64(m1.goroutines-m0.goroutines) / float64(n); g > footprintGoroutines {
		t.Errorf("distributor goroutines per idle connected agent = %.2f, want ≤ %.1f", g, footprintGoroutines)
	}
}

// footprintGoroutines bounds the distributor's goroutines per idle
// connected agent (3.0 measured; a few in flight at the moment of the
// count are allowed for).
const footprintGoroutines = 3.2

// memSample is the process's memory after two full collections (the
// second empties sync.Pool victim caches, so pooled packet buffers do not
// count as per-connection memory).
type memSample struct {
	heap, stack int64
	goroutines  int
}

func settledMem() memSample {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: int64(ms.HeapInuse), stack: int64(ms.StackInuse), goroutines: runtime.NumGoroutine()}
}

func readFootprintReport(stdout interface{ Read([]byte) (int, error) }) (footprintReport, error) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "FOOTPRINT ")
		if !ok {
			continue
		}
		var rep footprintReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			return rep, fmt.Errorf("decode report %q: %w", line, err)
		}
		// Keep draining so the child never blocks on a full pipe.
		go func() {
			for sc.Scan() {
			}
		}()
		return rep, nil
	}
	return footprintReport{}, fmt.Errorf("no report (exited early: %v)", sc.Err())
}

// heapTop aggregates the in-use heap profile by the first frame outside
// the runtime (scaled for sampling as pprof does) and renders the top k in
// KiB per agent.
func heapTop(n, k int) string {
	rate := float64(runtime.MemProfileRate)
	var recs []runtime.MemProfileRecord
	for {
		c, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:c]
			break
		}
		recs = make([]runtime.MemProfileRecord, c+50)
	}
	bySite := map[string]float64{}
	var total float64
	for _, r := range recs {
		if r.InUseBytes() <= 0 || r.AllocObjects == 0 {
			continue
		}
		avg := float64(r.AllocBytes) / float64(r.AllocObjects)
		scale := 1 / (1 - math.Exp(-avg/rate))
		b := float64(r.InUseBytes()) * scale
		total += b
		var site []string
		frames := runtime.CallersFrames(r.Stack())
		for more := true; more && len(site) < 2; {
			var f runtime.Frame
			f, more = frames.Next()
			if len(site) > 0 || !slices.ContainsFunc([]string{"runtime.", "internal/runtime/", "sync.", "bytes.", "bufio.", "crypto/internal/"}, func(p string) bool {
				return strings.HasPrefix(f.Function, p)
			}) {
				site = append(site, strings.TrimPrefix(f.Function, "github.com/quic-go/"))
			}
		}
		bySite[strings.Join(site, " ← ")] += b
	}
	type row struct {
		site string
		b    float64
	}
	var rows []row
	for s, b := range bySite {
		rows = append(rows, row{s, b})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.b, a.b) })
	var out strings.Builder
	fmt.Fprintf(&out, "  %8.1f  total in-use heap of the test process (incl. its baseline)\n", total/1024/float64(n))
	for _, r := range rows[:min(k, len(rows))] {
		fmt.Fprintf(&out, "  %8.1f  %s\n", r.b/1024/float64(n), r.site)
	}
	return out.String()
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// footprintChild connects the agents, reports on stdout and holds the
// connections until stdin closes.
func footprintChild(t *testing.T, raw string) {
	var cfg footprintConfig
	report := func(rep footprintReport) {
		b, _ := json.Marshal(rep)
		fmt.Printf("FOOTPRINT %s\n", b)
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		report(footprintReport{Err: err.Error()})
		return
	}
	ca, err := pki.LoadCA(cfg.CADir)
	if err != nil {
		report(footprintReport{Err: err.Error()})
		return
	}
	tcs := make([]*tls.Config, cfg.N)
	for i := range cfg.N {
		c, k, err := ca.IssueURI(fmt.Sprintf("fp-%d", i), pki.Client, nil, tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: fmt.Sprintf("fp-%d", i)}.URI(), time.Hour)
		if err != nil {
			report(footprintReport{Err: err.Error()})
			return
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			report(footprintReport{Err: err.Error()})
			return
		}
		tcs[i] = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	}
	m0 := settledMem()
	agents := make([]*agenttest.Agent, cfg.N)
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.Close()
			}
		}
	}()
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range cfg.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, err := agenttest.Dial(ctx, agenttest.Options{
				Addr: cfg.Addr, TLS: tcs[i], HostID: fmt.Sprintf("fp-%d", i), Zone: zone,
				Subscriptions: []string{cfg.Namespace}, Logger: quietLogger(),
			})
			if err == nil {
				agents[i] = a
				err = a.WaitVersion(ctx, cfg.Namespace, cfg.Seq)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, fmt.Errorf("agent %d: %w", i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	connected := 0
	for _, a := range agents {
		if a != nil {
			connected++
		}
	}
	m1 := settledMem()
	rep := footprintReport{Connected: connected, HeapPerAgent: (m1.heap - m0.heap) / int64(max(connected, 1))}
	if firstErr != nil {
		rep.Err = firstErr.Error()
	}
	report(rep)
	// Hold the connections until the parent is done measuring.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}
