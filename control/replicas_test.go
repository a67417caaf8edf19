package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/storeid"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// controlStatus asks one replica for its status, with the store id its
// response header carries.
func controlStatus(t *testing.T, cl lehrpb.ControlClient) (*lehrpb.ControlStatus, string, error) {
	t.Helper()
	var md metadata.MD
	st, err := cl.GetControlStatus(testCtx(t), &lehrpb.GetControlStatusRequest{}, grpc.Header(&md))
	if v := md.Get(storeid.Header); len(v) > 0 {
		return st, v[0], err
	}
	return st, "", err
}

// addresses lists the replicas of st.
func addresses(st *lehrpb.ControlStatus) []string {
	var out []string
	for _, r := range st.GetReplicas() {
		out = append(out, r.GetAddress())
	}
	return out
}

// Issue 29, items 6 and 7: two replicas on one external etcd show one
// store, both replicas and the one strategist leader, whichever is asked;
// when the leader stops, the other names itself leader and the stopped
// one is gone. A replica started on an etcd of its own (no
// --etcd-endpoints) serves another store, says so in every response's
// header, and a client pinned to the cluster's store refuses it.
func TestControlStatusAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	opts := control.Options{EtcdEndpoints: cluster.Endpoints(), Rollouts: true, RolloutInterval: 50 * time.Millisecond}
	a := controltest.StartControl(t, opts)
	b := controltest.StartControl(t, opts)
	replicas := map[string]*controltest.Server{a.Addr: a, b.Addr: b}

	var sa, sb *lehrpb.ControlStatus
	var ida, idb string
	wait.Until(t, "both replicas to list both, with a leader", func() error {
		var errA, errB error
		sa, ida, errA = controlStatus(t, a.Client)
		sb, idb, errB = controlStatus(t, b.Client)
		if err := errors.Join(errA, errB); err != nil {
			return err
		}
		if len(sa.GetReplicas()) != 2 || len(sb.GetReplicas()) != 2 || sa.GetStrategistLeader() == "" || sb.GetStrategistLeader() == "" {
			return fmt.Errorf("a lists %v led by %q, b lists %v led by %q", addresses(sa), sa.GetStrategistLeader(), addresses(sb), sb.GetStrategistLeader())
		}
		return nil
	})
	want := []string{a.Addr, b.Addr}
	slices.Sort(want)
	for _, c := range []struct {
		name string
		st   *lehrpb.ControlStatus
		hdr  string
		self string
	}{{"a", sa, ida, a.Addr}, {"b", sb, idb, b.Addr}} {
		if got := addresses(c.st); !slices.Equal(got, want) {
			t.Errorf("%s lists replicas %v, want %v", c.name, got, want)
		}
		if c.st.GetReplica() != c.self || c.st.GetEmbeddedEtcd() || !slices.Equal(c.st.GetEtcdEndpoints(), cluster.Endpoints()) {
			t.Errorf("%s says it is %q, embedded etcd %v, endpoints %v; want %s on %v", c.name, c.st.GetReplica(), c.st.GetEmbeddedEtcd(), c.st.GetEtcdEndpoints(), c.self, cluster.Endpoints())
		}
		if c.hdr != c.st.GetStore().GetId() {
			t.Errorf("%s's header says store %q, its status %q", c.name, c.hdr, c.st.GetStore().GetId())
		}
		if e := c.st.GetEtcd(); len(e.GetMembers()) != 1 || e.GetLeader() == "" || e.GetClusterId() == "" {
			t.Errorf("%s's etcd summary %v; want one member, its leader and the cluster id", c.name, e)
		}
		for _, r := range c.st.GetReplicas() {
			if r.GetVersion() == "" || r.GetStartTime() == nil || r.GetLastSeenTime() == nil || r.GetEmbeddedEtcd() {
				t.Errorf("%s lists %v; want a version, a start, a last renewal and an external etcd", c.name, r)
			}
		}
	}
	if sa.GetStore().GetId() == "" || sa.GetStore().GetId() != sb.GetStore().GetId() || sa.GetStore().GetCreateTime() == nil {
		t.Fatalf("stores %v and %v; want one identity, shared", sa.GetStore(), sb.GetStore())
	}
	leader := sa.GetStrategistLeader()
	if sb.GetStrategistLeader() != leader || replicas[leader] == nil {
		t.Fatalf("a says %q leads, b says %q; want one of %v, the same", leader, sb.GetStrategistLeader(), want)
	}

	// Failover: stop the leader; the other leads and lists only itself.
	replicas[leader].Stop()
	delete(replicas, leader)
	var survivor *controltest.Server
	for _, s := range replicas {
		survivor = s
	}
	wait.Until(t, "the survivor to lead, alone", func() error {
		st, _, err := controlStatus(t, survivor.Client)
		if err != nil {
			return err
		}
		if st.GetStrategistLeader() != survivor.Addr || !slices.Equal(addresses(st), []string{survivor.Addr}) {
			return fmt.Errorf("leader %q, replicas %v", st.GetStrategistLeader(), addresses(st))
		}
		return nil
	})

	// The misconfigured replica: an etcd of its own, so a store of its
	// own, empty.
	lone := controltest.StartControl(t, control.Options{Rollouts: true})
	sl, idl, err := controlStatus(t, lone.Client)
	if err != nil {
		t.Fatal(err)
	}
	if sl.GetStore().GetId() == sa.GetStore().GetId() || idl != sl.GetStore().GetId() || !sl.GetEmbeddedEtcd() {
		t.Errorf("the lone replica serves store %q (header %q, embedded %v); want a store of its own, embedded", sl.GetStore().GetId(), idl, sl.GetEmbeddedEtcd())
	}
	// Registration runs beside serving, so the first answer may predate it.
	wait.Until(t, "the lone replica to list itself alone", func() error {
		st, _, err := controlStatus(t, lone.Client)
		if err != nil {
			return err
		}
		if got := addresses(st); !slices.Equal(got, []string{lone.Addr}) {
			return fmt.Errorf("it lists %v", got)
		}
		return nil
	})

	// A client pinned to the cluster's store refuses the lone replica.
	var mu sync.Mutex
	var refused []*storeid.MismatchError
	pin := &storeid.Pin{OnMismatch: func(e *storeid.MismatchError) { mu.Lock(); refused = append(refused, e); mu.Unlock() }}
	pinned := func(addr string) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(pin.Unary), grpc.WithChainStreamInterceptor(pin.Stream)))
	}
	if _, err := pinned(survivor.Addr).ListZones(ctx, &lehrpb.ListZonesRequest{}); err != nil {
		t.Fatal(err)
	}
	toLone := pinned(lone.Addr)
	_, err = toLone.ListZones(ctx, &lehrpb.ListZonesRequest{})
	var merr *storeid.MismatchError
	if !errors.As(err, &merr) || merr.Pinned != sa.GetStore().GetId() || merr.Got != sl.GetStore().GetId() || merr.Replica != lone.Addr {
		t.Fatalf("ListZones on the lone replica through the pin: %v; want a mismatch naming both stores and %s", err, lone.Addr)
	}
	w, err := toLone.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: "zone-a", CreateZone: true})
	if err == nil {
		_, err = w.Recv()
	}
	if !errors.Is(err, storeid.ErrMismatch) {
		t.Errorf("WatchGoals on the lone replica through the pin: %v; want the mismatch", err)
	}
	mu.Lock()
	if len(refused) != 2 {
		t.Errorf("%d refusals reported, want 2", len(refused))
	}
	mu.Unlock()
}

// A replica that starts on its embedded etcd with nothing in it — what a
// replica of a cluster does when its --etcd-endpoints were left out —
// warns, naming the directory and the store, and saying what replicas of
// a cluster need. Its next start does not.
func TestNewEmbeddedStoreWarns(t *testing.T) {
	dir := t.TempDir()
	start := func() []string {
		rec := &records{}
		c, err := control.New(control.Options{DataDir: dir, Listen: "127.0.0.1:0", MetricsListen: "off", NoSync: true, Logger: slog.New(rec)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(context.Background()) }()
		select {
		case <-c.Ready():
		case err := <-done:
			t.Fatalf("control stopped: %v", err)
		case <-time.After(controltest.StartTimeout):
			t.Fatal("control not ready")
		}
		c.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return rec.warnings()
	}
	first := start()
	var warned string
	for _, w := range first {
		if strings.Contains(w, "new, empty store") {
			warned = w
		}
	}
	for _, want := range []string{"created a new, empty store in " + filepath.Join(dir, "etcd") + " with id ", "--etcd-endpoints", "LEHR_ETCD_ENDPOINTS"} {
		if !strings.Contains(warned, want) {
			t.Errorf("first start warned %q; want it to say %q", first, want)
		}
	}
	for _, w := range start() {
		if strings.Contains(w, "empty store") {
			t.Errorf("second start warned %q; want no warning of an empty store", w)
		}
	}
}

// records is a slog.Handler keeping every record's message.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelWarn {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// warnings returns the messages of the warnings and errors recorded.
func (r *records) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}
