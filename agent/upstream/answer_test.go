package upstream_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// rawDist is a distributor end written with the wire package alone, so a
// test can send exactly the updates it wants and read every frame the
// agent sends back.
type rawDist struct {
	t     *testing.T
	ln    *quic.Listener
	mu    sync.Mutex
	conn  *quic.Conn
	hello *lehrpb.Hello
	got   []proto.Message // frames from the agent after Hello
}

func startRawDist(t *testing.T, p *hostPKI) *rawDist {
	t.Helper()
	ln, err := quic.ListenAddr("127.0.0.1:0", wire.ServerTLSConfig(p.tls(t, "distributor", pki.Server)), wire.ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	d := &rawDist{t: t, ln: ln}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			ctl, hello, err := wire.AcceptControl(ctx, conn, wire.Limits{})
			if err != nil {
				conn.CloseWithError(wire.CodeFor(err), err.Error())
				continue
			}
			if err := ctl.Send(&lehrpb.Welcome{ProtocolVersion: wire.ProtocolVersion, DistributorId: "raw", Zone: hello.GetZone(),
				Capabilities: wire.CommonCapabilities(hello.GetCapabilities(), wire.Capabilities())}); err != nil {
				continue
			}
			d.mu.Lock()
			d.conn, d.hello = conn, hello
			d.mu.Unlock()
			wg.Go(func() {
				for {
					m, err := ctl.Recv()
					if err != nil {
						return
					}
					d.mu.Lock()
					d.got = append(d.got, m)
					d.mu.Unlock()
				}
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		d.mu.Lock()
		if d.conn != nil {
			d.conn.CloseWithError(wire.CodeNoError, "test over")
		}
		d.mu.Unlock()
		ln.Close()
		wg.Wait()
	})
	return d
}

func (d *rawDist) addr() string { return d.ln.Addr().String() }

// send writes u on its own update stream once an agent is connected.
func (d *rawDist) send(u *lehrpb.Update) {
	d.t.Helper()
	var conn *quic.Conn
	wait.For(d.t, "the agent to connect", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		conn = d.conn
		return conn != nil
	})
	frame, err := wire.AppendFrame(nil, u, wire.Limits{})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := wire.SendUpdate(context.Background(), conn, frame, 0); err != nil {
		d.t.Fatal(err)
	}
}

// ack returns the first Ack answering version v of ns, if one arrived.
func (d *rawDist) ack(ns string, v uint64) *lehrpb.Ack {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.got {
		if a, ok := m.(*lehrpb.Ack); ok && a.GetNamespace() == ns && a.GetUpdateVersion() == v {
			return a
		}
	}
	return nil
}

func (d *rawDist) resyncs(ns string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, m := range d.got {
		if r, ok := m.(*lehrpb.Resync); ok && r.GetNamespace() == ns {
			n++
		}
	}
	return n
}

func snapshotOf(t *testing.T, ns string, v uint64, props map[string]string) *lehrpb.Update {
	t.Helper()
	u, err := update.Build(nil, version(ns, v, props))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Every Update the agent reads is answered with an Ack naming it — one it
// applied, one it already holds, one for a namespace it does not (or no
// longer) subscribes to, and a patch whose base never arrives — so the
// distributor never waits for an answer that will not come (issue 8,
// defect 1).
func TestEveryUpdateIsAnswered(t *testing.T) {
	p := newPKI(t)
	d := startRawDist(t, p)
	h := newMem()
	cl := newClient(t, p, h, func(o *upstream.Options) { o.GapWait = 100 * time.Millisecond }, d.addr())
	c := cl.c
	c.Subscribe("app/sub")
	cl.start(t)

	want := func(what, ns string, v uint64, ok bool) *lehrpb.Ack {
		t.Helper()
		var a *lehrpb.Ack
		wait.Until(t, what, func() error {
			if a = d.ack(ns, v); a == nil {
				return fmt.Errorf("no Ack for %s@%d", ns, v)
			}
			return nil
		})
		if a.GetOk() != ok {
			t.Errorf("%s: Ack = %v, want ok=%v", what, a, ok)
		}
		return a
	}
	v1 := snapshotOf(t, "app/sub", 1, map[string]string{"a": "1"})
	d.send(v1)
	want("the applied snapshot's Ack", "app/sub", 1, true)

	// The same version again: already held, acknowledged as held.
	again := proto.Clone(v1).(*lehrpb.Update)
	d.send(again)
	wait.For(t, "the stale update's answer", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, m := range d.got {
			if a, ok := m.(*lehrpb.Ack); ok && a.GetUpdateVersion() == 1 {
				n++
			}
		}
		return n == 2
	})

	// A namespace the agent does not subscribe to.
	d.send(snapshotOf(t, "app/other", 4, map[string]string{"x": "1"}))
	a := want("the unsubscribed namespace's Ack", "app/other", 4, false)
	if a.GetError() == "" {
		t.Errorf("negative Ack %v says nothing", a)
	}

	// A patch whose base (version 5) never arrives: after GapWait it is
	// refused and a snapshot asked for.
	big := map[string]string{"a": "5", "b": "a value that makes a one-key patch smaller than the snapshot"}
	v7, err := update.Build(version("app/sub", 5, big), version("app/sub", 7, map[string]string{"a": "7", "b": big["b"]}))
	if err != nil || v7.GetSnapshot() {
		t.Fatalf("Build = %v, %v; want a patch", v7, err)
	}
	d.send(v7)
	want("the parked patch's Ack", "app/sub", 7, false)
	wait.For(t, "a Resync after the gap", func() bool { return d.resyncs("app/sub") > 0 })
	if got := h.get("app/sub"); got.ref.Seq != 1 {
		t.Errorf("agent holds app/sub@%d, want 1 (nothing else applied)", got.ref.Seq)
	}
}

// Hello stays within the control-frame limit however much the agent holds:
// it announces only what the agent subscribes to, and subscriptions beyond
// what one frame carries follow in Subscribe frames (issue 8, defect 5).
func TestHelloWithinLimits(t *testing.T) {
	p := newPKI(t)
	d := startRawDist(t, p)
	h := newMem()
	// 30,000 cached namespaces with long names (~3.6 MB of Hello if all were
	// announced) and 12,000 subscriptions.
	for i := range 30_000 {
		ns := fmt.Sprintf("domain-with-a-long-name/namespace-number-%06d", i)
		h.held[ns] = held{ref: content.Ref{Seq: 3, Checksum: content.Snapshot{}.Checksum()}}
	}
	var subs []string
	for i := range 12_000 {
		subs = append(subs, fmt.Sprintf("domain-with-a-long-name/namespace-number-%06d", i))
	}
	cl := newClient(t, p, h, nil, d.addr())
	cl.c.Subscribe(subs...)
	cl.start(t)

	wait.For(t, "every subscription to reach the distributor", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.hello == nil {
			return false
		}
		seen := map[string]bool{}
		for _, s := range d.hello.GetSubscriptions() {
			seen[s] = true
		}
		for _, m := range d.got {
			if s, ok := m.(*lehrpb.Subscribe); ok {
				for _, c := range s.GetNamespaces() {
					seen[c.GetNamespace()] = true
				}
			}
		}
		return len(seen) == len(subs)
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := proto.Size(d.hello); n > wire.DefaultMaxControlFrame {
		t.Errorf("Hello is %d bytes, over the %d-byte control-frame limit", n, wire.DefaultMaxControlFrame)
	}
	for _, c := range d.hello.GetCached() {
		if !slices.Contains(subs, c.GetNamespace()) {
			t.Fatalf("Hello announces %s, which the agent does not subscribe to", c.GetNamespace())
		}
	}
}

// A Report stays within the control-frame limit however many namespaces the
// agent subscribes to: one beyond a frame is sent as several Reports with the
// same time (issue 8, defect 5).
func TestReportWithinLimits(t *testing.T) {
	p := newPKI(t)
	d := startRawDist(t, p)
	h := newMem()
	// 12,000 namespaces with long names and checksums: ~1.3 MB in one Report.
	const n = 12_000
	sum := content.Snapshot{}.Checksum()
	h.report = func() *lehrpb.Report {
		r := &lehrpb.Report{}
		for i := range n {
			r.Namespaces = append(r.Namespaces, &lehrpb.NamespaceReport{
				Namespace: fmt.Sprintf("domain-with-a-long-name/namespace-number-%06d", i),
				Version:   7, Checksum: sum, Clients: 3, ClientsApplied: 3,
			})
		}
		return r
	}
	cl := newClient(t, p, h, func(o *upstream.Options) { o.ReportInterval = 50 * time.Millisecond }, d.addr())
	c := cl.c
	cl.start(t)

	// Every namespace reported under one time, with no reconnect meanwhile.
	var frames []*lehrpb.Report
	wait.For(t, "one whole report to reach the distributor", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		byTime := map[int64][]*lehrpb.Report{}
		covered := map[int64]int{}
		for _, m := range d.got {
			if r, ok := m.(*lehrpb.Report); ok {
				at := r.GetTime().AsTime().UnixNano()
				byTime[at] = append(byTime[at], r)
				covered[at] += len(r.GetNamespaces())
			}
		}
		for at, k := range covered {
			if k == n {
				frames = byTime[at]
				return true
			}
		}
		return false
	})
	if len(frames) < 2 {
		t.Errorf("the report came in %d frame(s), want it split", len(frames))
	}
	for _, r := range frames {
		if size := proto.Size(r); size > wire.DefaultMaxControlFrame {
			t.Errorf("a Report frame is %d bytes, over the %d-byte control-frame limit", size, wire.DefaultMaxControlFrame)
		}
	}
	if err := c.Status().LastDisconnect; err != nil {
		t.Errorf("the connection was lost (%v); no report may cost it", err)
	}
}
