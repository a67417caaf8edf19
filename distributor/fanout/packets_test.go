package fanout_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/wire"
)

// packetCount is a qlog trace shared by every connection of one side that
// only counts: packets sent and the frames in them, by frame type. Enabling
// a trace makes quic-go build an event per packet, which costs CPU, so it
// is for counting, never for timing.
type packetCount struct {
	sent   atomic.Int64
	mu     sync.Mutex
	frames map[string]int64
}

func newPacketCount() *packetCount { return &packetCount{frames: map[string]int64{}} }

func (c *packetCount) config(base *quic.Config) *quic.Config {
	qc := base.Clone()
	qc.Tracer = func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return c }
	return qc
}

func (c *packetCount) AddProducer() qlogwriter.Recorder { return c }
func (c *packetCount) Close() error                     { return nil }

func (c *packetCount) RecordEvent(ev qlogwriter.Event) {
	p, ok := ev.(qlog.PacketSent)
	if !ok {
		return
	}
	c.sent.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range p.Frames {
		name := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", f.Frame), "*"), "Frame")
		c.frames[strings.TrimPrefix(strings.TrimPrefix(name, "qlog."), "wire.")]++
	}
}

// snapshot returns the packets sent and the frames by type so far.
func (c *packetCount) snapshot() (int64, map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent.Load(), maps.Clone(c.frames)
}

// BenchmarkPacketsPerUpdate pushes one-key patches to 20 agents, one
// update at a time, and reports the QUIC packets each side sends per
// delivered update: the per-connection work of a fan-out is mostly
// packets (a sendmsg each, on both sides). It logs the frames in them.
//
//	go test ./distributor/fanout -run '^$' -bench PacketsPerUpdate -benchtime 200x
func BenchmarkPacketsPerUpdate(b *testing.B) {
	const agents = 20
	dist, agent := newPacketCount(), newPacketCount()
	e := newEnv(b, func(o *fanout.Options) { o.QUIC = dist.config(wire.ServerQUICConfig()) })
	ns := "d/app"
	p := props(10, "v")
	v := e.publish(ns, p)
	as := make([]*agenttest.Agent, agents)
	for i := range as {
		as[i] = e.dial(fmt.Sprintf("host-%02d", i), agenttest.Options{Subscriptions: []string{ns}, QUIC: agent.config(wire.ClientQUICConfig())})
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
	time.Sleep(100 * time.Millisecond) // let the handshakes' last acknowledgements go
	d0, df0 := dist.snapshot()
	a0, af0 := agent.snapshot()
	b.ResetTimer()
	for i := range b.N {
		p["k/000"] = fmt.Sprintf("v-%d", i)
		wait(e.publish(ns, p).Seq)
	}
	b.StopTimer()
	d1, df1 := dist.snapshot()
	a1, af1 := agent.snapshot()
	n := float64(b.N * agents)
	b.ReportMetric(float64(d1-d0)/n, "dist-pkts/update")
	b.ReportMetric(float64(a1-a0)/n, "agent-pkts/update")
	b.ReportMetric(0, "ns/op")
	for _, side := range []struct {
		name   string
		before map[string]int64
		after  map[string]int64
	}{{"distributor", df0, df1}, {"agent", af0, af1}} {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(side.after)) {
			if d := side.after[k] - side.before[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(d)/n))
			}
		}
		b.Logf("%s frames per update: %s", side.name, strings.Join(parts, ", "))
	}
}
