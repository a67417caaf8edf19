package strategist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// The strategist's glue — reading a domain, applying decisions — against
// a real etcd, driven round by round (Round) with a settable clock. The
// decisions themselves are package rollout's, tested there
// (control/rollout/scenario_test.go).

// etcdClient is one embedded etcd for the package's tests; each test
// uses a key prefix of its own.
var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(runWithEtcd(m))
}

func runWithEtcd(m *testing.M) int {
	dir, err := os.MkdirTemp("", "lehr-rollout-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, NoSync: true, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	defer srv.Close()
	if etcdClient, err = embedetcd.NewClient(ctx, srv.Endpoints()); err != nil {
		fmt.Fprintln(os.Stderr, "etcd client:", err)
		return 1
	}
	defer etcdClient.Close()
	return m.Run()
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// strategistRig is a store under a prefix of the test's own and a
// strategist on it with policy for every namespace.
type strategistRig struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	s     *Strategist
	clock *clock
}

func newStrategistRig(t *testing.T, policy *lehrpb.RolloutPolicy, zones ...string) *strategistRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	c := &clock{now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := store.New(etcdClient, store.Options{Prefix: "/test/" + t.Name() + "/", Now: c.Now, Logger: quiet})
	s, err := New(Options{
		Store: st, Client: etcdClient, Now: c.Now, Logger: quiet,
		Policy: func(context.Context, string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
			return policy, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, 1, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range zones {
		if _, err := st.CreateZone(ctx, z); err != nil {
			t.Fatal(err)
		}
	}
	return &strategistRig{t: t, ctx: ctx, st: st, s: s, clock: c}
}

// commit commits one property k=v to ns, as the service would under the
// strategist (store.GoalsNone, but every zone at once for a namespace's
// first version and for an operator's rollback).
func (r *strategistRig) commit(ns, v string, src lehrpb.VersionSource) *lehrpb.VersionInfo {
	r.t.Helper()
	snap, err := content.New([]content.Property{{Key: "k", ContentType: "text/plain", Value: []byte(v)}})
	if err != nil {
		r.t.Fatal(err)
	}
	h, err := r.st.GetNamespace(r.ctx, ns)
	var nf *store.NotFoundError
	create := false
	switch {
	case err == nil:
	case errors.As(err, &nf):
		create = true
	default:
		r.t.Fatal(err)
	}
	goals := store.GoalsNone
	if create || src == lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK {
		goals = store.GoalsAllZones
	}
	info, err := r.st.Commit(r.ctx, store.Commit{Namespace: ns, Create: create, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		ExpectedLatest: h.GetLatestVersion(), Content: snap, Goals: goals, Info: &lehrpb.VersionInfo{Author: "alice", Source: src}})
	if err != nil {
		r.t.Fatalf("commit %s=%s to %s: %v", "k", v, ns, err)
	}
	return info
}

func (r *strategistRig) round() {
	r.t.Helper()
	if err := r.s.Round(r.ctx, store.Guard{}); err != nil {
		r.t.Fatalf("Round: %v", err)
	}
}

func (r *strategistRig) goal(zone, ns string) uint64 {
	r.t.Helper()
	gs, _, err := r.st.Goals(r.ctx, zone, ns)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(gs) == 0 {
		return 0
	}
	return gs[0].GetVersion()
}

func (r *strategistRig) rollout(ns string, v uint64) *lehrpb.Rollout {
	r.t.Helper()
	ro, err := r.st.Rollout(r.ctx, ns, v)
	if err != nil {
		r.t.Fatal(err)
	}
	return ro
}

// TestRoundLeavesAnOperatorRollbackAlone: an operator rolls back while a
// rollout runs — the rollback version goes to every zone at once. The
// round that sees it supersedes the running rollout and does nothing more
// with it: it does not step it (once, it failed it as if it still ran,
// and a step that passed its stage moved every zone back to the version
// the operator rolled back).
func TestRoundLeavesAnOperatorRollbackAlone(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour), ApplyDeadline: durationpb.New(time.Minute)},
	}}
	r := newStrategistRig(t, policy, "z")
	mustDomain(r)
	const ns = "pay/app"
	r.commit(ns, "good", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	bad := r.commit(ns, "bad", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	r.round()
	if got := r.rollout(ns, bad.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING || r.goal("z", ns) != bad.GetSeq() {
		t.Fatalf("after the first round: rollout %v, zone z's goal %d; want it running and the goal at %d", got.GetState(), r.goal("z", ns), bad.GetSeq())
	}

	rb := r.commit(ns, "good", lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK)
	// Past the stage's apply deadline: a step of the bad version's
	// rollout would fail it now.
	r.clock.advance(2 * time.Minute)
	for i := range 2 {
		r.round()
		got := r.rollout(ns, bad.GetSeq())
		if got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED {
			t.Errorf("round %d after the rollback: the bad version's rollout is %v (%s); want SUPERSEDED", i+1, got.GetState(), got.GetReason())
		}
		if g := r.goal("z", ns); g != rb.GetSeq() {
			t.Fatalf("round %d after the rollback: zone z's goal is %d; want the rollback's %d", i+1, g, rb.GetSeq())
		}
	}
	if _, err := r.st.Rollout(r.ctx, ns, rb.GetSeq()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the rollback's rollout: %v; want none (it went to every zone at once)", err)
	}
}

func mustDomain(r *strategistRig) {
	r.t.Helper()
	if _, err := r.st.CreateDomain(r.ctx, &lehrpb.Domain{Name: "pay"}); err != nil {
		r.t.Fatal(err)
	}
}

// TestRoundDecidesOnTheNamespacesItIsGiven: a domain's loop reads and
// decides on the namespaces that changed and those in flight, not the
// whole domain; a round given one namespace starts that namespace's
// rollout and no other, and says it is in flight.
func TestRoundDecidesOnTheNamespacesItIsGiven(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
	}}
	r := newStrategistRig(t, policy, "z")
	mustDomain(r)
	for _, ns := range []string{"pay/a", "pay/b", "pay/c"} {
		r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
		r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	}
	res, err := r.s.domainRound(r.ctx, store.Guard{}, "pay", []string{"pay/a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || !res["pay/a"].inFlight || res["pay/a"].states[lehrpb.RolloutState_ROLLOUT_STATE_RUNNING] != 1 {
		t.Errorf("round of pay/a: %+v; want pay/a alone, one rollout running", res)
	}
	for ns, want := range map[string]uint64{"pay/a": 2, "pay/b": 1, "pay/c": 1} {
		if g := r.goal("z", ns); g != want {
			t.Errorf("zone z's goal of %s after a round of pay/a: %d; want %d", ns, g, want)
		}
	}
	// The whole domain: the others start too.
	if res, err = r.s.domainRound(r.ctx, store.Guard{}, "pay", nil); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"pay/a", "pay/b", "pay/c"} {
		if !res[ns].inFlight || r.goal("z", ns) != 2 {
			t.Errorf("after a round of the whole domain: %s in flight %v, goal %d; want in flight at 2", ns, res[ns].inFlight, r.goal("z", ns))
		}
	}
}

// TestDomainLoopBookkeeping: what a domain's loop reads next, and what it
// keeps between rounds.
func TestDomainLoopBookkeeping(t *testing.T) {
	l := newDomainLoop("pay")
	if _, full := l.take(); !full {
		t.Errorf("a new loop's first round: not full; want the whole domain read")
	}
	l.touch("pay/a")
	l.mark("pay/b")
	if dirty, full := l.take(); full || len(dirty) != 2 || !dirty["pay/a"] || !dirty["pay/b"] {
		t.Errorf("after touching pay/a and marking pay/b: %v, full %v; want both, not full", dirty, full)
	}
	select {
	case <-l.wake:
	default:
		t.Errorf("touch did not wake the loop")
	}
	l.touch("pay/a")
	l.touch("")
	if dirty, full := l.take(); !full || len(dirty) != 1 {
		// The namespaces marked before a full mark remain; a full read
		// covers them.
		t.Errorf("after touching pay/a then the domain: %v, full %v; want full", dirty, full)
	}

	var st domainState
	running := map[lehrpb.RolloutState]int{lehrpb.RolloutState_ROLLOUT_STATE_RUNNING: 1}
	done := map[lehrpb.RolloutState]int{lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED: 2}
	st.merge(map[string]nsResult{"pay/a": {inFlight: true, states: running}, "pay/b": {states: done}, "pay/c": {}}, nil, true)
	if len(st.inFlight) != 1 || !st.inFlight["pay/a"] || st.sum()[lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED] != 2 {
		t.Errorf("after a full round: in flight %v, states %v", st.inFlight, st.sum())
	}
	// A round of pay/a alone, which succeeded: pay/b's count stays.
	st.merge(map[string]nsResult{"pay/a": {states: map[lehrpb.RolloutState]int{lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED: 1}}}, []string{"pay/a"}, false)
	if len(st.inFlight) != 0 || st.sum()[lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED] != 3 || st.sum()[lehrpb.RolloutState_ROLLOUT_STATE_RUNNING] != 0 {
		t.Errorf("after pay/a's rollout succeeded: in flight %v, states %v; want none in flight, 3 succeeded", st.inFlight, st.sum())
	}
}

// countingStore counts the zone status reads the strategist makes.
type countingStore struct {
	Store
	mu     sync.Mutex
	status map[string]int
}

func (c *countingStore) ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error) {
	c.mu.Lock()
	c.status[zone]++
	c.mu.Unlock()
	return c.Store.ZoneStatus(ctx, zone)
}

// TestARoundReadsEachZonesStatusOnce: every rollout of a round decides on
// the same reports, so a round with many rollouts in flight reads each
// zone's status once, not once per rollout (1,000 baking rollouts made
// 1,000 etcd reads a second: bench/results/HISTORY.md, "Control's cost against
// the catalog").
func TestARoundReadsEachZonesStatusOnce(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
	}}
	r := newStrategistRig(t, policy, "y", "z")
	mustDomain(r)
	nss := []string{"pay/a", "pay/b", "pay/c", "pay/d"}
	for _, ns := range nss {
		r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
		r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	}
	cs := &countingStore{Store: r.st, status: map[string]int{}}
	r.s.opts.Store = cs
	r.round() // starts the rollouts
	r.clock.advance(time.Second)
	cs.status = map[string]int{}
	if _, err := r.s.domainRound(r.ctx, store.Guard{}, "pay", nss); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		if got := r.rollout(ns, 2); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
			t.Fatalf("%s's rollout is %v; want it running", ns, got.GetState())
		}
	}
	for _, z := range []string{"y", "z"} {
		if n := cs.status[z]; n != 1 {
			t.Errorf("a round with %d rollouts in flight read zone %s's status %d times; want once", len(nss), z, n)
		}
	}
}

// TestSilentZoneHoldsTheRollout: the scenario end to end on etcd —
// a zone whose distributors reported once (Zone.last_report_time) and
// whose reports then expired. The rollout does not pass or succeed on
// that silence, whatever the time; a zone no distributor ever reported in
// is still skipped (a zone created before its distributors exist must not
// hold every rollout).
func TestSilentZoneHoldsTheRollout(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, ApplyDeadline: durationpb.New(time.Minute)},
	}}
	for _, tc := range []struct {
		name     string
		reported bool
		want     lehrpb.RolloutState
	}{
		{"reported once, silent now", true, lehrpb.RolloutState_ROLLOUT_STATE_RUNNING},
		{"never reported", false, lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStrategistRig(t, policy, "z")
			mustDomain(r)
			if tc.reported {
				if err := r.st.MarkZoneReported(r.ctx, "z", r.clock.Now().Add(-time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			const ns = "pay/app"
			r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
			v2 := r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
			for range 10 {
				r.round()
				r.clock.advance(time.Minute)
			}
			got := r.rollout(ns, v2.GetSeq())
			if got.GetState() != tc.want {
				t.Fatalf("after 10 minutes: rollout %v (%s); want %v", got.GetState(), got.GetReason(), tc.want)
			}
			if tc.reported && !strings.Contains(got.GetReason(), "no live report from z") {
				t.Errorf("reason %q; want it to name the silent zone", got.GetReason())
			}
		})
	}
}

// A silent zone that is deleted (retired for good) holds nothing: the
// rollout goes on without it.
func TestDeletedSilentZoneHoldsNothing(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, ApplyDeadline: durationpb.New(time.Minute)},
	}}
	r := newStrategistRig(t, policy, "y", "z")
	mustDomain(r)
	if err := r.st.MarkZoneReported(r.ctx, "z", r.clock.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	const ns = "pay/app"
	r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	v2 := r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	for range 3 {
		r.round()
		r.clock.advance(time.Minute)
	}
	if got := r.rollout(ns, v2.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		t.Fatalf("with zone z silent: %v (%s); want it held", got.GetState(), got.GetReason())
	}
	if err := r.st.DeleteZone(r.ctx, "z", false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.round()
		r.clock.advance(time.Minute)
	}
	if got := r.rollout(ns, v2.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Errorf("after zone z was deleted: %v (%s); want SUCCEEDED", got.GetState(), got.GetReason())
	}
}
