package fanout_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
)

// BenchmarkDelivery pushes one-key patches of a 1 KiB value to 100
// agents in this process, one update at a time, and reports per delivery
// the heap allocations and the CPU of the whole process: the distributor
// and the agents both, so only a difference between two builds of the
// distributor says anything of it (the agents' share is the same in
// both). Allocations are counted exactly, CPU in the kernel's ticks.
//
//	go test ./distributor/fanout -run '^$' -bench Delivery -benchtime 200x -count 5
func BenchmarkDelivery(b *testing.B) {
	const agents = 100
	e := newEnv(b)
	ns := "d/app"
	p := props(10, "v")
	v := e.publish(ns, p)
	as := make([]*agenttest.Agent, agents)
	for i := range as {
		as[i] = e.dial(fmt.Sprintf("host-%03d", i), agenttest.Options{Subscriptions: []string{ns}})
	}
	wait := func(v uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, a := range as {
			if err := a.WaitVersion(ctx, ns, v); err != nil {
				b.Fatalf("agent %s never reached %d: %v", a.HostID(), v, err)
			}
		}
	}
	wait(v.Seq)
	value := strings.Repeat("x", 1<<10)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		p["k/000"] = fmt.Sprintf("%d-%s", i, value)
		wait(e.publish(ns, p).Seq)
	}
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	runtime.ReadMemStats(&m1)
	n := float64(b.N * agents)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/delivery")
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/delivery")
	b.ReportMetric(0, "ns/op")
}

// processCPU is this process's CPU time, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
