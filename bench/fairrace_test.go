package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/testenv/cpupin"
	"lehr.dev/lehr/testenv/wait"
)

func TestFairRaceTargets(t *testing.T) {
	row := func(sys string, p99, cpu, missed float64) Row {
		r := Row{System: sys, Case: "N=100"}
		r.Add("p99", p99, "ms").Add("missed", missed, "").Add("dup", 0, "").Add("server cpu/delivery", cpu, "µs")
		return r
	}
	for _, tc := range []struct {
		name  string
		lehr  Row
		peers []Row
		met   []bool   // p99, cpu, none missed
		got   []string // substrings of each target's Got
	}{
		{"behind both", row("lehr", 4, 60, 0), []Row{row("etcd", 3, 40, 0), row("nats", 2, 30, 0)},
			[]bool{false, false, true}, []string{"nats 2 ms (2.00×)", "nats 30 µs (2.00×)", "missed = 0"}},
		{"ahead of the best", row("lehr", 1, 20, 0), []Row{row("etcd", 3, 25, 0), row("nats", 2, 30, 0)},
			[]bool{true, true, true}, []string{"nats 2 ms (0.50×)", "etcd 25 µs (0.80×)", ""}},
		{"tie is met; a miss is not", row("lehr", 2, 30, 3), []Row{row("nats", 2, 30, 0)},
			[]bool{true, true, false}, []string{"(1.00×)", "(1.00×)", "missed = 3"}},
		{"a zero figure has no ratio", row("lehr", 2, 0, 0), []Row{row("nats", 2, 0, 0)},
			[]bool{true, true, true}, []string{"(1.00×)", "(-)", ""}},
	} {
		ts := fairRaceTargets(100, tc.lehr, tc.peers)
		if len(ts) != len(tc.met) {
			t.Errorf("%s: got %d targets, want %d: %+v", tc.name, len(ts), len(tc.met), ts)
			continue
		}
		for i, tg := range ts {
			if tg.Met != tc.met[i] {
				t.Errorf("%s: target %q met = %v, want %v (%s)", tc.name, tg.Goal, tg.Met, tc.met[i], tg.Got)
			}
			if !strings.Contains(tg.Got, tc.got[i]) {
				t.Errorf("%s: target %q got %q, want it to contain %q", tc.name, tg.Goal, tg.Got, tc.got[i])
			}
		}
	}
}

// TestPeerProcessesPinned starts each peer as a real server process on one
// CPU and three watchers in a subscriber process on another, checks each
// runs where it was put, and that every watcher sees a change once.
func TestPeerProcessesPinned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts etcd and nats-server")
	}
	allowed, err := cpupin.Allowed(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	serverCPU, subCPU := allowed[:1], allowed[len(allowed)-1:]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, binDir := t.TempDir(), t.TempDir()
	for _, sys := range []string{"etcd", "nats"} {
		t.Run(sys, func(t *testing.T) {
			var pr peer
			var proc *daemon
			switch sys {
			case "etcd":
				bin, err := buildMain(ctx, binDir, "etcd", etcdMainPackage)
				if err != nil {
					t.Fatal(err)
				}
				p, err := startEtcdProc(ctx, filepath.Join(dir, sys), bin, serverCPU)
				if err != nil {
					t.Fatal(err)
				}
				pr, proc = p, p.proc
			case "nats":
				bin, err := buildMain(ctx, binDir, "nats-server", natsMainPackage)
				if err != nil {
					t.Fatal(err)
				}
				p, err := startNATSProc(ctx, filepath.Join(dir, sys), bin, serverCPU)
				if err != nil {
					t.Fatal(err)
				}
				pr, proc = p, p.proc
			}
			defer pr.close()
			if got := pinnedTo(t, proc.pid()); !slices.Equal(got, serverCPU) {
				t.Errorf("%s server runs on %v, want %v", sys, got, serverCPU)
			}
			const n = 3
			col := newCollector(n)
			wc := watchConfigOf(pr, "/bench/pinned/", 1)
			sw, conn, err := startSwarm(ctx, swarmConfig{N: n, Watch: &wc, CPUs: subCPU}, func(ev swarmEvent) {
				col.record(ev.I, ev.Version, ev.T)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sw.quit()
			if conn.Connected != n || conn.Failed != 0 {
				t.Fatalf("subscribers: %d connected, %d failed (%s), want %d connected", conn.Connected, conn.Failed, conn.Err, n)
			}
			if got := pinnedTo(t, sw.pid); !slices.Equal(got, subCPU) {
				t.Errorf("%s subscribers run on %v, want %v", sys, got, subCPU)
			}
			vals := newValueSource(64)
			// Until one change reaches all three (etcd registers a watch
			// after its client returns), then one more, seen once by each.
			var seq uint64
			wait.For(t, "a change at every watcher", func() bool {
				val := vals.next()
				if err := pr.put(ctx, "/bench/pinned/k", val); err != nil {
					t.Fatal(err)
				}
				ok, _ := col.wait(ctx, seqOf(val), 2*time.Second)
				return ok
			})
			val := vals.next()
			seq = seqOf(val)
			t0 := time.Now()
			if err := pr.put(ctx, "/bench/pinned/k", val); err != nil {
				t.Fatal(err)
			}
			if ok, err := col.wait(ctx, seq, time.Minute); !ok || err != nil {
				t.Fatalf("change %d not at every watcher (err %v)", seq, err)
			}
			if lat, missed, dups := col.result(seq, t0); len(lat) != n || missed != 0 || dups != 0 {
				t.Errorf("change %d: %d latencies, %d missed, %d duplicated; want %d, 0, 0", seq, len(lat), missed, dups, n)
			}
		})
	}
}

// pinnedTo is the CPUs process pid may run on, read once it has exec'd
// past taskset.
func pinnedTo(t *testing.T, pid int) cpupin.Set {
	t.Helper()
	wait.For(t, "the process to exec past taskset", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.TrimSpace(string(b)) != "taskset"
	})
	got, err := cpupin.Allowed(pid)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRaceKeepLogs(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd.log"), []byte("etcd said"), 0o644); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("no quorum")
	r := &race{e: &Env{Profile: Full, OutDir: out}}
	err := r.keepLogs(dir, "etcd", 10000, cause)
	if !errors.Is(err, cause) {
		t.Errorf("keepLogs error %v does not wrap %v", err, cause)
	}
	kept := filepath.Join(out, "fairrace-full-etcd-N10000-etcd.log")
	if b, rerr := os.ReadFile(kept); rerr != nil || string(b) != "etcd said" {
		t.Errorf("kept log %s: %q, %v; want %q", kept, b, rerr, "etcd said")
	}
	if !strings.Contains(err.Error(), kept) {
		t.Errorf("error %q does not name %s", err, kept)
	}
	// Without an artefact directory the error is the cause.
	r.e.OutDir = ""
	if err := r.keepLogs(dir, "etcd", 1, cause); err != cause {
		t.Errorf("keepLogs without OutDir = %v, want %v", err, cause)
	}
}
