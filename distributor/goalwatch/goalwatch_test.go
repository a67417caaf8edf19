package goalwatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/distributor/goalwatch"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

const zone = "zone-a"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, cl lehrpb.ControlClient, ns, value string) *lehrpb.VersionInfo {
	t.Helper()
	resp, err := cl.Publish(ctxT(t), &lehrpb.PublishRequest{Namespace: ns, Properties: []*lehrpb.Property{{Key: "k", Value: []byte(value)}}})
	if err != nil {
		t.Fatalf("Publish %s: %v", ns, err)
	}
	return resp.GetVersion()
}

func createDomain(t *testing.T, cl lehrpb.ControlClient, name string) {
	t.Helper()
	if _, err := cl.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: name}}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
}

// startWatcher runs a watcher against the control at addr until the test
// ends.
func startWatcher(t *testing.T, addr string, changed chan<- []string) *goalwatch.Watcher {
	t.Helper()
	return startWatcherLog(t, addr, changed, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// startWatcherLog is startWatcher with the watcher's logger.
func startWatcherLog(t *testing.T, addr string, changed chan<- []string, log *slog.Logger) *goalwatch.Watcher {
	t.Helper()
	conn := controltest.Dial(t, addr)
	w, err := goalwatch.New(goalwatch.Options{
		Zone:       zone,
		Client:     lehrpb.NewControlClient(conn),
		Logger:     log,
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
		CreateZone: true,
		OnChange: func(nss []string) {
			if changed != nil {
				changed <- nss
			}
		},
	})
	if err != nil {
		t.Fatalf("goalwatch.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-w.Synced():
	case <-time.After(60 * time.Second):
		t.Fatal("watcher never synced")
	}
	return w
}

func waitGoal(t *testing.T, w *goalwatch.Watcher, ns string, v *lehrpb.VersionInfo) {
	t.Helper()
	wait.Until(t, fmt.Sprintf("the goal of %s to be version %d", ns, v.GetSeq()), func() error {
		g, ok := w.Goal(ns)
		if ok && g.GetVersion() == v.GetSeq() && g.GetChecksum() == v.GetChecksum() {
			return nil
		}
		return fmt.Errorf("goal is %v", g)
	})
}

func TestInitialStateAndChanges(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	createDomain(t, srv.Client, "d")
	v1 := publish(t, srv.Client, "d/a", "1")
	changed := make(chan []string, 16)
	w := startWatcher(t, srv.Addr, changed)
	waitGoal(t, w, "d/a", v1)
	if got := <-changed; len(got) != 1 || got[0] != "d/a" {
		t.Errorf("first OnChange = %v, want [d/a]", got)
	}
	v2 := publish(t, srv.Client, "d/b", "x")
	waitGoal(t, w, "d/b", v2)
	if got := <-changed; len(got) != 1 || got[0] != "d/b" {
		t.Errorf("second OnChange = %v, want [d/b]", got)
	}
	if got := len(w.Goals()); got != 2 {
		t.Errorf("Goals() has %d namespaces, want 2", got)
	}
	// The zone was registered by the watch (create_zone).
	zs, err := srv.Client.ListZones(ctxT(t), &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(zs.GetZones()) != 1 || zs.GetZones()[0].GetName() != zone {
		t.Errorf("zones = %v, want [%s]", zs.GetZones(), zone)
	}
}

func TestResumeAfterControlRestart(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	createDomain(t, srv.Client, "d")
	v1 := publish(t, srv.Client, "d/a", "1")
	w := startWatcher(t, srv.Addr, nil)
	waitGoal(t, w, "d/a", v1)

	srv.Stop()
	wait.For(t, "the watcher to notice control stopped", func() bool { return !w.Connected() })
	// Static stability: the last known goals stay.
	waitGoal(t, w, "d/a", v1)

	srv2 := controltest.StartControl(t, control.Options{DataDir: srv.DataDir, Listen: srv.Addr})
	v2 := publish(t, srv2.Client, "d/a", "2")
	waitGoal(t, w, "d/a", v2)
	st := w.Stats()
	if st.Resumes < 1 || st.Restarts != 0 {
		t.Errorf("stats = %+v, want at least one resume and no restart", st)
	}
}

func TestOutOfRangeRestartsFromCurrentState(t *testing.T) {
	ctx := ctxT(t)
	etcd, err := embedetcd.Start(ctx, embedetcd.Options{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { etcd.Close() })
	// a serves the watcher; b publishes while a is down.
	a := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	b := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	createDomain(t, b.Client, "d")
	v1 := publish(t, b.Client, "d/a", "1")
	changed := make(chan []string, 16)
	w := startWatcher(t, a.Addr, changed)
	waitGoal(t, w, "d/a", v1)
	<-changed

	a.Stop()
	var last *lehrpb.VersionInfo
	for i := range 5 {
		last = publish(t, b.Client, "d/a", string(rune('a'+i)))
	}
	vb := publish(t, b.Client, "d/b", "new")
	cl, err := etcd.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatalf("compact: %v", err)
	}

	a2 := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints(), Listen: a.Addr})
	_ = a2
	waitGoal(t, w, "d/a", last)
	waitGoal(t, w, "d/b", vb)
	if st := w.Stats(); st.Restarts != 1 {
		t.Errorf("stats = %+v, want exactly one restart from the current state", st)
	}
	// The restart reports both namespaces that changed, once.
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case nss := <-changed:
			for _, ns := range nss {
				got[ns] = true
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("OnChange reported %v, want d/a and d/b", got)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := goalwatch.New(goalwatch.Options{Zone: "Bad Zone!", Client: nil}); err == nil {
		t.Error("New accepted an invalid zone")
	}
	if _, err := goalwatch.New(goalwatch.Options{Zone: zone}); err == nil {
		t.Error("New accepted a nil Client")
	}
}

// recorder is a slog.Handler that keeps every record's message and
// attributes.
type recorder struct {
	mu      sync.Mutex
	records []map[string]any
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]any{"msg": rec.Message, "level": rec.Level}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Resolve().Any()
		return true
	})
	r.mu.Lock()
	r.records = append(r.records, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) find(msg, ns string) (map[string]any, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.records {
		if m["msg"] == msg && m["namespace"] == ns {
			return m, true
		}
	}
	return nil, false
}

// TestGoalChangedIsLogged: each goal event after the initial state is
// logged at Debug as "goal changed" with the namespace, version, checksum
// and revision, which benchmarks use to time the control → distributor hop.
func TestGoalChangedIsLogged(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	createDomain(t, srv.Client, "d")
	rec := &recorder{}
	w := startWatcherLog(t, srv.Addr, nil, slog.New(rec))
	v := publish(t, srv.Client, "d/a", "1")
	waitGoal(t, w, "d/a", v)
	got, ok := rec.find("goal changed", "d/a")
	if !ok {
		t.Fatal(`no "goal changed" record for d/a`)
	}
	want := map[string]any{
		"msg": "goal changed", "level": slog.LevelDebug, "namespace": "d/a",
		"version": v.GetSeq(), "checksum": v.GetChecksum(), "deleted": false, "revision": w.Revision(),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("goal changed record (-want +got):\n%s", diff)
	}
}

// Without CreateZone, watching a zone control does not know ends Run with
// NotFound instead of retrying forever; with a known zone, OnMessage sees
// the initial state and then each change as it arrives.
func TestOnMessageAndUnknownZone(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	conn := controltest.Dial(t, srv.Addr)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	w, err := goalwatch.New(goalwatch.Options{Zone: "nowhere", Client: lehrpb.NewControlClient(conn), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctxT(t)); status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Fatalf("Run on an unknown zone = %v, want an error wrapping NotFound", err)
	}

	if _, err := cl.CreateZone(ctxT(t), &lehrpb.CreateZoneRequest{Name: "known"}); err != nil {
		t.Fatal(err)
	}
	createDomain(t, cl, "d")
	v1 := publish(t, cl, "d/a", "1")
	msgs := make(chan *lehrpb.WatchGoalsResponse, 16)
	w, err = goalwatch.New(goalwatch.Options{Zone: "known", Client: lehrpb.NewControlClient(conn), Logger: quiet,
		OnMessage: func(m *lehrpb.WatchGoalsResponse) { msgs <- m }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	first := <-msgs
	if !first.GetInitial() || !first.GetInitialComplete() || len(first.GetEvents()) != 1 || first.GetEvents()[0].GetGoal().GetVersion() != v1.GetSeq() {
		t.Fatalf("first message = %v, want the complete initial state with d/a@%d", first, v1.GetSeq())
	}
	v2 := publish(t, cl, "d/a", "2")
	next := <-msgs
	if next.GetInitial() || len(next.GetEvents()) != 1 || next.GetEvents()[0].GetGoal().GetVersion() != v2.GetSeq() {
		t.Fatalf("next message = %v, want the change to d/a@%d", next, v2.GetSeq())
	}
}

// A zone whose goals do not change while the rest of etcd does (zone status
// reports, other zones, compaction) keeps its resume revision current
// through etcd's progress notifications, so a reconnect after etcd
// compacted resumes instead of paying a full restart from the current
// state (issue 8, defect 9: quiet zones re-synced after every hourly
// compaction).
func TestQuietZoneResumesAfterCompaction(t *testing.T) {
	ctx := ctxT(t)
	etcd, err := embedetcd.Start(ctx, embedetcd.Options{Dir: t.TempDir(), NoSync: true,
		ProgressNotifyInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { etcd.Close() })
	a := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	createDomain(t, a.Client, "d")
	v1 := publish(t, a.Client, "d/a", "1")
	w := startWatcher(t, a.Addr, nil)
	waitGoal(t, w, "d/a", v1)

	// Unrelated writes move etcd's revision on; the zone stays quiet.
	cl, err := etcd.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rev int64
	for i := range 20 {
		resp, err := cl.Put(ctx, fmt.Sprintf("/unrelated/%d", i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	wait.For(t, "the watcher's revision to follow etcd's", func() bool { return w.Revision() >= rev })
	if _, err := cl.Compact(ctx, rev); err != nil {
		t.Fatalf("compact: %v", err)
	}

	a.Stop()
	a2 := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints(), Listen: a.Addr})
	v2 := publish(t, a2.Client, "d/a", "2")
	waitGoal(t, w, "d/a", v2)
	if st := w.Stats(); st.Restarts != 0 || st.Resumes < 1 {
		t.Errorf("stats = %+v, want a resume and no restart from the current state", st)
	}
}

// A watch resumed after control came back is connected as soon as control
// accepts it, though no goal changes (issue 29, item 5: the
// distributor's lehr_distributor_control_connected stayed 0 for 35 s after
// a working reconnect, until the next goal changed), and the log says so.
func TestResumedWatchIsConnectedAtOnce(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	createDomain(t, srv.Client, "d")
	v1 := publish(t, srv.Client, "d/a", "1")
	var logs syncBuffer
	w := startWatcherLog(t, srv.Addr, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	waitGoal(t, w, "d/a", v1)

	srv.Stop()
	wait.For(t, "the watcher to notice control stopped", func() bool { return !w.Connected() })
	controltest.StartControl(t, control.Options{DataDir: srv.DataDir, Listen: srv.Addr})
	wait.For(t, "the resumed watch to be connected, with no goal changed", w.Connected)
	if st := w.Stats(); st.Resumes < 1 {
		t.Errorf("stats = %+v, want a resume", st)
	}
	if !strings.Contains(logs.String(), "goal watch connected to control") || !strings.Contains(logs.String(), "resumed_from=") {
		t.Errorf("the log does not say the watch resumed:\n%s", logs.String())
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
