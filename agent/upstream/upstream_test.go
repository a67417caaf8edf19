package upstream_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

const zone = "zone-a"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// pki issues test certificates.
type hostPKI struct {
	dir string
	ca  *pki.CA
}

func newPKI(t *testing.T) *hostPKI {
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &hostPKI{dir: dir, ca: ca}
}

func (p *hostPKI) tls(t *testing.T, name string, kind pki.Kind) *tls.Config {
	id := tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: name}.URI()
	if kind == pki.Client {
		id = tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: name}.URI()
	}
	c, k, err := p.ca.IssueURIFiles(filepath.Join(p.dir, "leaf"), name, kind, nil, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(p.dir, "ca", pki.CACertFile)
	var tc *tls.Config
	if kind == pki.Server {
		tc, err = tlsconfig.Server(c, k, caFile)
	} else {
		tc, err = tlsconfig.Client(c, k, caFile, "127.0.0.1")
	}
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// dist is a real distributor fan-out fed from an in-memory version cache.
type dist struct {
	srv    *fanout.Server
	vers   *versions.Cache
	cancel context.CancelFunc
	done   chan error
}

func startDist(t *testing.T, p *hostPKI, id string) *dist {
	return startDistOn(t, p.tls(t, "distributor", pki.Server), id, "127.0.0.1:0")
}

// startDistOn starts a distributor fan-out with the given certificate on
// addr; mods change its options.
func startDistOn(t *testing.T, tc *tls.Config, id, addr string, mods ...func(*fanout.Options)) *dist {
	vers := versions.New(versions.Options{Logger: quiet()})
	opts := fanout.Options{
		Listen: addr, TLS: tc, Zone: zone,
		DistributorID: id, Versions: vers, Logger: quiet(),
	}
	for _, m := range mods {
		m(&opts)
	}
	srv, err := fanout.Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &dist{srv: srv, vers: vers, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- srv.Serve(ctx) }()
	t.Cleanup(d.stop)
	return d
}

func (d *dist) stop() {
	d.srv.Close()
	d.cancel()
	<-d.done
	d.done <- nil // later stops return at once
}

func (d *dist) setGoal(t *testing.T, v *content.Version) {
	if err := d.vers.Put(v); err != nil {
		t.Fatal(err)
	}
	d.vers.Pin(v.Namespace, v.Seq)
	d.srv.SetGoal(fanout.Goal{Stable: v})
}

func version(ns string, seq uint64, props map[string]string) *content.Version {
	var ps []content.Property
	for k, v := range props {
		ps = append(ps, content.Property{Key: k, Value: []byte(v)})
	}
	snap, _ := content.New(ps)
	return &content.Version{
		Namespace: ns, Seq: seq, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Info: &lehrpb.VersionInfo{Namespace: ns, Seq: seq, Checksum: snap.Checksum()}, Content: snap,
	}
}

// memHandler holds namespaces in memory, deciding and applying updates
// with internal/update as the agent does, and records every applied
// version.
type memHandler struct {
	mu      sync.Mutex
	held    map[string]held
	applied map[string][]uint64
	seen    map[string]int        // updates received per namespace
	report  func() *lehrpb.Report // nil: no reports
}

type held struct {
	ref  content.Ref
	snap content.Snapshot
}

func newMem() *memHandler {
	return &memHandler{held: map[string]held{}, applied: map[string][]uint64{}, seen: map[string]int{}}
}

func (h *memHandler) Held(ns string) content.Ref {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[ns].ref
}

func (h *memHandler) Apply(_ context.Context, u *lehrpb.Update) upstream.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := u.GetNamespace()
	h.seen[ns]++
	cur := h.held[ns]
	// The agent's decision, with the agent's code.
	err := update.Check(cur.ref, u)
	var snap content.Snapshot
	if err == nil {
		snap, err = update.Apply(cur.snap, u)
	}
	if err != nil {
		res := upstream.Result{Held: cur.ref, Err: err}
		res.Outcome, res.Reason = upstream.OutcomeOf(err)
		return res
	}
	got := content.Ref{Seq: u.GetVersion(), Checksum: u.GetChecksum()}
	h.held[ns] = held{ref: got, snap: snap}
	h.applied[ns] = append(h.applied[ns], u.GetVersion())
	return upstream.Result{Outcome: upstream.Applied, Held: got}
}

// Signals keeps none: the in-memory handler has no local signals.
func (*memHandler) Signals(*lehrpb.SignalsWanted) *lehrpb.NamespaceSignals { return nil }

func (h *memHandler) Report() *lehrpb.Report {
	if h.report == nil {
		return nil
	}
	return h.report()
}

func (h *memHandler) get(ns string) held {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[ns]
}

func (h *memHandler) appliedVersions(ns string) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint64(nil), h.applied[ns]...)
}

func (h *memHandler) seenCount(ns string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[ns]
}

// corrupt forgets ns, as if the cache had found its copy corrupt.
func (h *memHandler) forget(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, ns)
}

type client struct {
	c      *upstream.Client
	set    *metrics.Set
	cancel context.CancelFunc
	done   chan struct{}
}

func startClient(t *testing.T, p *hostPKI, h upstream.Handler, addrs ...string) *client {
	cl := newClient(t, p, h, nil, addrs...)
	cl.start(t)
	return cl
}

// newClient returns a client of the distributors at addrs, not yet
// running, with the test defaults changed by mod (nil: none).
func newClient(t *testing.T, p *hostPKI, h upstream.Handler, mod func(*upstream.Options), addrs ...string) *client {
	set := metrics.NewSet()
	opts := upstream.Options{
		Distributors: addrs, TLS: p.tls(t, "host-1", pki.Client), HostID: "host-1", Zone: zone,
		Handler: h, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Metrics: set, Logger: quiet(),
	}
	if mod != nil {
		mod(&opts)
	}
	c, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &client{c: c, set: set, done: make(chan struct{})}
}

// start runs the client until the test ends.
func (cl *client) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cl.cancel = cancel
	go func() {
		defer close(cl.done)
		if err := cl.c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(cl.stop)
}

func (c *client) stop() {
	c.cancel()
	<-c.done
}

func waitHeld(t *testing.T, h *memHandler, v *content.Version) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%s@%d", v.Namespace, v.Seq), func() bool {
		x := h.get(v.Namespace)
		return x.ref == v.Ref() && x.snap.Equal(v.Content)
	})
}

func counter(set *metrics.Set, name string) uint64 {
	return set.GetOrCreateCounter(name).Get()
}

func TestSubscribePatchAndCheapReconnect(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	v1 := version("app/cfg", 1, map[string]string{"a": "1", "b": "2"})
	d.setGoal(t, v1)

	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	wait.For(t, "connected status", func() bool { return cl.c.Status().Connected })
	if st := cl.c.Status(); st.Distributor != d.srv.Addr().String() || st.DistributorID != "d1" {
		t.Errorf("Status = %+v, want distributor %s id d1", st, d.srv.Addr())
	}

	v2 := version("app/cfg", 2, map[string]string{"a": "1", "b": "3"})
	d.setGoal(t, v2)
	waitHeld(t, h, v2)
	if got := counter(cl.set, `lehr_agent_bytes_received_total{kind="patch"}`); got == 0 {
		t.Errorf("patch bytes = 0 after a patch")
	}

	// Reconnect with the same intact state: nothing more is sent.
	cl.stop()
	before := d.srv.Stats()
	cl2 := startClient(t, p, h, d.srv.Addr().String())
	cl2.c.Subscribe("app/cfg")
	v3 := version("app/cfg", 3, map[string]string{"a": "9", "b": "3"})
	d.setGoal(t, v3)
	waitHeld(t, h, v3)
	after := d.srv.Stats()
	if after.SnapshotBytes != before.SnapshotBytes {
		t.Errorf("snapshot bytes grew from %d to %d on a reconnect with an intact cache", before.SnapshotBytes, after.SnapshotBytes)
	}
	if got := counter(cl2.set, `lehr_agent_bytes_received_total{kind="snapshot"}`); got != 0 {
		t.Errorf("client received %d snapshot bytes after reconnecting with an intact cache, want 0", got)
	}
}

// TestReconnectResumesTLSSession: the agent keeps its TLS session across
// reconnects, so reconnecting to a restarted distributor (the reconnect
// storm's case) resumes it instead of a full handshake with certificates.
func TestReconnectResumesTLSSession(t *testing.T) {
	p := newPKI(t)
	tc := p.tls(t, "distributor", pki.Server)
	first := startDistOn(t, tc, "d1", "127.0.0.1:0")
	addr := first.srv.Addr().String()
	v1 := version("app/cfg", 1, map[string]string{"a": "1"})
	first.setGoal(t, v1)
	h := newMem()
	cl := startClient(t, p, h, addr)
	cl.c.Subscribe("app/cfg")
	// The session ticket comes right after the handshake, before the
	// update.
	waitHeld(t, h, v1)
	if st := first.srv.Stats(); st.Handshakes != 1 || st.ResumedHandshakes != 0 {
		t.Fatalf("first connection: %d full and %d resumed handshakes, want 1 full", st.Handshakes, st.ResumedHandshakes)
	}

	first.stop()
	restarted := startDistOn(t, tc, "d1", addr)
	v2 := version("app/cfg", 2, map[string]string{"a": "2"})
	restarted.setGoal(t, v2)
	waitHeld(t, h, v2)
	if st := restarted.srv.Stats(); st.Handshakes != 0 || st.ResumedHandshakes != 1 {
		t.Errorf("reconnect to the restarted distributor: %d full and %d resumed handshakes, want 1 resumed", st.Handshakes, st.ResumedHandshakes)
	}
}

func TestResyncAfterForgettingFetchesSnapshot(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	v1 := version("app/cfg", 1, map[string]string{"a": "1"})
	d.setGoal(t, v1)
	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, v1)

	h.forget("app/cfg")
	cl.c.Resync("app/cfg", lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT, "test")
	waitHeld(t, h, v1)
	if got := d.srv.Stats().Resyncs; got == 0 {
		t.Errorf("distributor counted no Resync")
	}
}

func TestPatchOnWrongBaseIsRejectedAndHealed(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	v1 := version("app/cfg", 1, map[string]string{"a": "1"})
	d.setGoal(t, v1)
	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, v1)

	// Damage the held content behind the checksum's back: the next patch
	// applies to the wrong base, fails its checksum and a snapshot heals.
	h.mu.Lock()
	bad, _ := content.New([]content.Property{{Key: "a", Value: []byte("rotten")}})
	x := h.held["app/cfg"]
	x.snap = bad
	h.held["app/cfg"] = x
	h.mu.Unlock()

	v2 := version("app/cfg", 2, map[string]string{"a": "1", "b": "2"})
	d.setGoal(t, v2)
	waitHeld(t, h, v2)
	if got := d.srv.Stats().Refusals; got == 0 {
		t.Errorf("distributor counted no refused update")
	}
}

func TestFailoverToSecondDistributor(t *testing.T) {
	p := newPKI(t)
	d1 := startDist(t, p, "d1")
	d2 := startDist(t, p, "d2")
	props := map[string]string{}
	for i := range 20 {
		props[fmt.Sprintf("k%02d", i)] = "value-of-some-length"
	}
	v1 := version("app/cfg", 1, props)
	d1.setGoal(t, v1)
	d2.setGoal(t, v1)
	h := newMem()
	cl := startClient(t, p, h, d1.srv.Addr().String(), d2.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	wait.For(t, "connected to d1", func() bool { return cl.c.Status().DistributorID == "d1" })

	d1.stop()
	wait.For(t, "failover to d2", func() bool { return cl.c.Status().DistributorID == "d2" })
	props["k00"] = "changed"
	v2 := version("app/cfg", 2, props)
	d2.setGoal(t, v2)
	waitHeld(t, h, v2)
	if got := counter(cl.set, "lehr_agent_failovers_total"); got != 1 {
		t.Errorf("failovers = %d, want 1", got)
	}
	if got := d2.srv.Stats().SnapshotBytes; got != 0 {
		t.Errorf("d2 sent %d snapshot bytes to an agent holding the previous version, want 0 (patch only)", got)
	}
}

func TestUnsubscribedNamespaceIsNeverRequested(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	wanted := version("app/wanted", 1, map[string]string{"a": "1"})
	other := version("app/other", 1, map[string]string{"a": "1"})
	d.setGoal(t, wanted)
	d.setGoal(t, other)
	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/wanted")
	waitHeld(t, h, wanted)
	d.setGoal(t, version("app/other", 2, map[string]string{"a": "2"}))
	w2 := version("app/wanted", 2, map[string]string{"a": "2"})
	d.setGoal(t, w2)
	waitHeld(t, h, w2)
	if n := h.seenCount("app/other"); n != 0 {
		t.Errorf("received %d updates of a namespace never subscribed to", n)
	}

	// Unsubscribing stops the flow too.
	cl.c.Unsubscribe("app/wanted")
	wait.For(t, "unsubscribe reaches the distributor", func() bool { return d.srv.Lag("app/wanted") == 0 && len(cl.c.Subscriptions()) == 0 })
}

func TestBurstEndsAtLatestInOrder(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	props := map[string]string{"a": "0"}
	d.setGoal(t, version("app/cfg", 1, props))
	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	wait.For(t, "first version", func() bool { return h.get("app/cfg").ref.Seq == 1 })
	var last *content.Version
	for i := 2; i <= 101; i++ {
		props[fmt.Sprintf("k%d", i%7)] = fmt.Sprint(i)
		last = version("app/cfg", uint64(i), props)
		d.setGoal(t, last)
	}
	waitHeld(t, h, last)
	got := h.appliedVersions("app/cfg")
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("applied versions out of order: %v", got)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	p := newPKI(t)
	good := upstream.Options{Distributors: []string{"127.0.0.1:1"}, TLS: p.tls(t, "h", pki.Client), HostID: "h", Zone: zone, Handler: newMem()}
	tests := []struct {
		name string
		mod  func(o *upstream.Options)
	}{
		{"no distributors", func(o *upstream.Options) { o.Distributors = nil }},
		{"empty distributor", func(o *upstream.Options) { o.Distributors = []string{""} }},
		{"no TLS", func(o *upstream.Options) { o.TLS = nil }},
		{"no host", func(o *upstream.Options) { o.HostID = "" }},
		{"no zone", func(o *upstream.Options) { o.Zone = "" }},
		{"no handler", func(o *upstream.Options) { o.Handler = nil }},
	}
	for _, tc := range tests {
		o := good
		tc.mod(&o)
		if _, err := upstream.New(o); err == nil {
			t.Errorf("%s: New succeeded, want an error", tc.name)
		}
	}
	if _, err := upstream.New(good); err != nil {
		t.Errorf("New(good): %v", err)
	}
}

// An agent that lost its connection waits within the redial spread its
// distributor advised before it redials, so that the agents a restart
// drops come back at the rate the distributor can admit them.
func TestRedialWaitsWithinTheAdvisedSpread(t *testing.T) {
	p := newPKI(t)
	const spread = 10 * time.Minute
	// One agent at 1/600 agents per second: a spread of 10 minutes.
	d := startDistOn(t, p.tls(t, "distributor", pki.Server), "d1", "127.0.0.1:0", func(o *fanout.Options) { o.RedialRate = 1.0 / 600 })
	v1 := version("app/cfg", 1, map[string]string{"k": "v"})
	d.setGoal(t, v1)
	h := newMem()
	cl := startClient(t, p, h, d.srv.Addr().String())
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	if got := cl.c.Status().RedialSpread; got != spread {
		t.Fatalf("RedialSpread = %v after Welcome, want %v", got, spread)
	}
	lost := time.Now()
	d.stop()
	wait.For(t, "a redial scheduled", func() bool { return !cl.c.Status().NextAttempt.IsZero() })
	if in := cl.c.Status().NextAttempt.Sub(lost); in > spread+time.Minute {
		t.Errorf("next attempt in %v, want within the spread of %v", in, spread)
	}
	if err := cl.c.Status().LastDisconnect; !upstream.DistributorWide(err) {
		t.Errorf("a distributor's shutdown ended the connection with %v: not distributor-wide", err)
	}

	const minBackoff = 70 * time.Millisecond
	shutdown := &wire.GoodbyeError{Code: wire.CodeShuttingDown}
	for _, tc := range []struct {
		name   string
		cause  error
		spread time.Duration
		max    time.Duration
	}{
		{"no spread", shutdown, 0, minBackoff},
		{"negative spread", shutdown, -time.Second, minBackoff},
		{"shutdown", shutdown, time.Second, time.Second - 1},
		{"stateless reset", &quic.StatelessResetError{}, time.Second, time.Second - 1},
		{"closed: shutting down", &quic.ApplicationError{Remote: true, ErrorCode: wire.CodeShuttingDown}, time.Second, time.Second - 1},
		// This connection alone ended: redial at once.
		{"replaced", &wire.GoodbyeError{Code: wire.CodeReplaced}, time.Minute, minBackoff},
		{"silent", &wire.SilenceError{After: time.Second}, time.Minute, minBackoff},
		{"idle timeout", &quic.IdleTimeoutError{}, time.Minute, minBackoff},
		{"closed by the agent", &quic.ApplicationError{Remote: false, ErrorCode: wire.CodeShuttingDown}, time.Minute, minBackoff},
	} {
		for range 100 {
			if got := upstream.RedialDelay(tc.cause, tc.spread, minBackoff); got < 0 || got > tc.max {
				t.Fatalf("%s: RedialDelay = %v, want within [0, %v]", tc.name, got, tc.max)
			}
		}
	}
}
