package devcluster_test

// End-to-end tests of issue 3's Verify list: real control on embedded etcd,
// real distributors over QUIC with mutual TLS, real agents with Badger and
// namespace files, and the real consumer library following those files with
// fsnotify. One cluster is shared by the subtests, which run in order and
// each use their own namespaces; subtests that stop daemons restart them
// before they end.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

const (
	zoneA, zoneB = "zone-a", "zone-b"
	domain       = "app"
	waitTimeout  = 60 * time.Second
)

func TestEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync:              true, // a test cluster need not survive a machine crash
		Dir:                 t.TempDir(),
		Zones:               []string{zoneA, zoneB},
		DistributorsPerZone: 2,
		AgentsPerZone:       2,
		Domains:             []string{domain},
		Logger:              controltest.Logger(t, slog.LevelError),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	e := &env{c: c, ctx: ctx}

	t.Run("PublishThenPatchReachesCallbacksInTwoZones", e.publishThenPatch)
	t.Run("NamespaceWithoutSubscriberIsNeverSent", e.noSubscriberNoSend)
	t.Run("RollbackIsANewVersionTheCallbackNames", e.rollbackCallback)
	t.Run("CallbackErrorIsReportedToAgent", e.callbackError)
	t.Run("BurstOf100Patches", e.burst)
	t.Run("OneKeyPatchToLargeNamespaceCostsThePatch", e.largeNamespacePatch)
	t.Run("DistributorKilledAgentsFailOver", e.distributorFailover)
	t.Run("ControlKilledKnownVersionsReachNewSubscribers", e.controlDown)
	t.Run("AgentRestartWithIntactCache", e.agentRestart)
	t.Run("CorruptCacheIsRefetchedAndNeverSeen", e.corruptCache)
}

type env struct {
	c   *devcluster.Cluster
	ctx context.Context
}

// consumerOf returns a consumer client of agent i of zone, closed when the
// test ends.
func (e *env) consumerOf(t *testing.T, zone string, i int) *consumer.Client {
	t.Helper()
	cl, err := e.c.Consumer(zone, i)
	if err != nil {
		t.Fatalf("Consumer(%s, %d): %v", zone, i, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (e *env) agent(t *testing.T, zone string, i int) *devcluster.AgentHandle {
	t.Helper()
	a, err := e.c.Agent(zone, i)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// recorder keeps every Change a subscription's callbacks receive.
type recorder struct {
	mu      sync.Mutex
	changes []consumer.Change
}

// record subscribes cl to ns and records its changes. It subscribes before
// anything is published to ns, so no change is missed.
func record(t *testing.T, ctx context.Context, cl *consumer.Client, ns string) (*consumer.Subscription, *recorder) {
	t.Helper()
	sub, err := cl.Subscribe(ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe %s: %v", ns, err)
	}
	r := &recorder{}
	sub.OnChange(func(ch consumer.Change) error {
		r.mu.Lock()
		r.changes = append(r.changes, ch)
		r.mu.Unlock()
		return nil
	})
	return sub, r
}

func (r *recorder) all() []consumer.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// waitChange waits for a change whose new view is version v and returns it.
func (r *recorder) waitChange(t *testing.T, who string, v uint64) consumer.Change {
	t.Helper()
	var got consumer.Change
	wait.For(t, fmt.Sprintf("%s: a callback with version %d", who, v), func() bool {
		for _, ch := range r.all() {
			if ch.New.Version() == v {
				got = ch
				return true
			}
		}
		return false
	})
	return got
}

func (e *env) publish(t *testing.T, ns string, kv ...string) *lehrpb.VersionInfo {
	t.Helper()
	v, err := e.c.Producer().Publish(e.ctx, ns, props(kv...), producer.WithMessage("e2e"))
	if err != nil {
		t.Fatalf("Publish %s: %v", ns, err)
	}
	return v
}

func (e *env) patch(t *testing.T, ns string, base uint64, p producer.Patch) *lehrpb.VersionInfo {
	t.Helper()
	v, err := e.c.Producer().Patch(e.ctx, ns, base, p)
	if err != nil {
		t.Fatalf("Patch %s@%d: %v", ns, base, err)
	}
	return v
}

func props(kv ...string) []producer.Property {
	var ps []producer.Property
	for i := 0; i+1 < len(kv); i += 2 {
		ps = append(ps, producer.Property{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return ps
}

// contentOf returns a view's properties as a map.
func contentOf(v *consumer.View) map[string]string {
	m := map[string]string{}
	for _, k := range v.Keys() {
		val, _ := v.Get(k)
		m[k] = string(val)
	}
	return m
}

// sumBytes sums the update bytes (snapshot and patch) sent by the
// distributors of zones.
func (e *env) sumBytes(zones ...string) (snapshot, patch uint64) {
	for _, z := range zones {
		for _, d := range e.c.Distributors(z) {
			st := d.Stats()
			snapshot += st.SnapshotBytes
			patch += st.PatchBytes
		}
	}
	return snapshot, patch
}

// agentsAt counts the agents the running distributors of zone report for
// ns, by version.
func (e *env) agentsAt(zone, ns string) map[uint64]int {
	out := map[uint64]int{}
	for _, d := range e.c.Distributors(zone) {
		_, counts := d.Convergence()
		for _, vc := range counts {
			if vc.Namespace == ns {
				out[vc.Version] += vc.Agents
			}
		}
	}
	return out
}

func (e *env) status(t *testing.T, a *devcluster.AgentHandle) *lehrpb.StatusResponse {
	t.Helper()
	st, err := a.Local().Status(e.ctx, &lehrpb.StatusRequest{})
	if err != nil {
		t.Fatalf("%s Status: %v", a.HostID, err)
	}
	return st
}

func nsStatus(st *lehrpb.StatusResponse, ns string) *lehrpb.NamespaceStatus {
	for _, s := range st.GetNamespaces() {
		if s.GetNamespace() == ns {
			return s
		}
	}
	return nil
}

// publishThenPatch: a publish reaches the callbacks of consumers in two
// zones with the right content; a patch then reaches them with exactly the
// changed keys and correct old and new views.
func (e *env) publishThenPatch(t *testing.T) {
	ns := domain + "/e2e"
	type member struct {
		who string
		rec *recorder
	}
	var ms []member
	for _, z := range []string{zoneA, zoneB} {
		_, r := record(t, e.ctx, e.consumerOf(t, z, 0), ns)
		ms = append(ms, member{who: z + "/0", rec: r})
	}
	v1 := e.publish(t, ns, "a", "1", "b", "2", "c", "3")
	want1 := map[string]string{"a": "1", "b": "2", "c": "3"}
	for _, m := range ms {
		ch := m.rec.waitChange(t, m.who, v1.GetSeq())
		if ch.Old.Version() != 0 {
			t.Errorf("%s: first change Old version = %d, want 0 (the empty view)", m.who, ch.Old.Version())
		}
		if diff := cmp.Diff(want1, contentOf(ch.New)); diff != "" {
			t.Errorf("%s: v%d content (-want +got):\n%s", m.who, v1.GetSeq(), diff)
		}
		if ch.New.Checksum() != v1.GetChecksum() {
			t.Errorf("%s: checksum %s, want %s", m.who, ch.New.Checksum(), v1.GetChecksum())
		}
		if diff := cmp.Diff([]string{"a", "b", "c"}, ch.Changed); diff != "" {
			t.Errorf("%s: first change Changed (-want +got):\n%s", m.who, diff)
		}
	}

	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("b", "two", "d", "4"), Delete: []string{"c"}})
	want2 := map[string]string{"a": "1", "b": "two", "d": "4"}
	for _, m := range ms {
		ch := m.rec.waitChange(t, m.who, v2.GetSeq())
		if ch.Old.Version() != v1.GetSeq() {
			t.Errorf("%s: patch change Old version = %d, want %d", m.who, ch.Old.Version(), v1.GetSeq())
		}
		if diff := cmp.Diff([]string{"b", "c", "d"}, ch.Changed); diff != "" {
			t.Errorf("%s: patch Changed (-want +got):\n%s", m.who, diff)
		}
		if diff := cmp.Diff(want1, contentOf(ch.Old)); diff != "" {
			t.Errorf("%s: patch Old view (-want +got):\n%s", m.who, diff)
		}
		if diff := cmp.Diff(want2, contentOf(ch.New)); diff != "" {
			t.Errorf("%s: patch New view (-want +got):\n%s", m.who, diff)
		}
		if n := len(m.rec.all()); n != 2 {
			t.Errorf("%s: %d callbacks, want 2", m.who, n)
		}
	}
}

// noSubscriberNoSend: a namespace consumed on one host only reaches that
// host: no other agent caches it or has its file, and the distributors
// count only that agent for it.
func (e *env) noSubscriberNoSend(t *testing.T) {
	ns := domain + "/only-a0"
	_, r := record(t, e.ctx, e.consumerOf(t, zoneA, 0), ns)
	v1 := e.publish(t, ns, "k", "v1")
	r.waitChange(t, "zone-a/0", v1.GetSeq())
	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("k", "v2")})
	r.waitChange(t, "zone-a/0", v2.GetSeq())
	wait.For(t, "zone-a distributors to count zone-a/0 at v2", func() bool {
		return cmp.Equal(map[uint64]int{v2.GetSeq(): 1}, e.agentsAt(zoneA, ns))
	})

	for _, z := range []string{zoneA, zoneB} {
		for i, a := range e.c.Agents(z) {
			if z == zoneA && i == 0 {
				continue
			}
			path, err := nsfile.Path(a.FilesDir(), ns)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s has a file for %s (stat: %v), want none: no consumer there", a.HostID, ns, err)
			}
			_, err = a.Local().Get(e.ctx, &lehrpb.AgentGetRequest{Namespace: ns})
			if status.Code(err) != codes.NotFound {
				t.Errorf("%s Get %s: %v, want NotFound: it must not be cached there", a.HostID, ns, err)
			}
			if s := nsStatus(e.status(t, a), ns); s != nil {
				t.Errorf("%s Status lists %s (%v), want nothing", a.HostID, ns, s)
			}
		}
	}
	if got := e.agentsAt(zoneA, ns); !cmp.Equal(map[uint64]int{v2.GetSeq(): 1}, got) {
		t.Errorf("zone-a convergence for %s = %v, want only zone-a/0 at v%d", ns, got, v2.GetSeq())
	}
	if got := e.agentsAt(zoneB, ns); len(got) != 0 {
		t.Errorf("zone-b convergence for %s = %v, want none", ns, got)
	}
}

// callbackError: an error returned by a consumer's callback reaches the
// agent, which counts it in Status.
func (e *env) callbackError(t *testing.T) {
	ns := domain + "/rejected"
	a := e.agent(t, zoneB, 1)
	sub, err := e.consumerOf(t, zoneB, 1).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	calls := make(chan uint64, 10)
	sub.OnChange(func(ch consumer.Change) error {
		calls <- ch.New.Version()
		return errors.New("e2e: this configuration is refused")
	})
	v1 := e.publish(t, ns, "limit", "-1")
	wait.For(t, "the agent to count the apply error", func() bool {
		s := nsStatus(e.status(t, a), ns)
		return s != nil && s.GetVersion() == v1.GetSeq() && s.GetApplyErrors() >= 1
	})
	s := nsStatus(e.status(t, a), ns)
	if s.GetApplyErrors() != 1 || s.GetApplied() != 0 {
		t.Errorf("Status of %s: applied %d, apply errors %d; want 0 and 1", ns, s.GetApplied(), s.GetApplyErrors())
	}
	select {
	case v := <-calls:
		if v != v1.GetSeq() {
			t.Errorf("callback got version %d, want %d", v, v1.GetSeq())
		}
	default:
		t.Error("the agent counts an apply error but the callback never ran")
	}
	if got := sub.View().Version(); got != v1.GetSeq() {
		t.Errorf("view version after a refused change = %d, want %d (the view moves on)", got, v1.GetSeq())
	}

	// The rejection travels up: agent report → distributor summary →
	// control's zone status, with the host named.
	var st *lehrpb.GetZoneStatusResponse
	wait.For(t, "zone status to show the rejection", func() bool {
		st, err = e.c.Producer().RPC().GetZoneStatus(e.ctx, &lehrpb.GetZoneStatusRequest{Zone: zoneB})
		if err != nil {
			return false
		}
		for _, h := range st.GetHealth() {
			if h.GetNamespace() == ns && h.GetVersion() == v1.GetSeq() && h.GetConsumersRejected() == 1 {
				return true
			}
		}
		return false
	})
	found := false
	for _, hr := range st.GetHosts() {
		if hr.GetHostId() == a.HostID && hr.GetReport().GetNamespace() == ns {
			found = true
			if r := hr.GetReport(); r.GetClientsRejected() != 1 || r.GetVersion() != v1.GetSeq() || r.GetAppliedTime() == nil {
				t.Errorf("host report of %s: %v; want version %d, 1 consumer rejecting, an applied time", a.HostID, r, v1.GetSeq())
			}
		}
	}
	if !found {
		t.Errorf("zone status names no host for %s; want %s (its consumer rejected the version): %v", ns, a.HostID, st.GetHosts())
	}
}

// burst: 100 patches in a row; every consumer ends at the latest version
// and its callbacks see versions strictly increasing, each with the content
// of that version.
func (e *env) burst(t *testing.T) {
	ns := domain + "/burst"
	type member struct {
		who string
		sub *consumer.Subscription
		rec *recorder
	}
	var ms []member
	for _, z := range []string{zoneA, zoneB} {
		for i := range e.c.Agents(z) {
			sub, r := record(t, e.ctx, e.consumerOf(t, z, i), ns)
			ms = append(ms, member{who: fmt.Sprintf("%s/%d", z, i), sub: sub, rec: r})
		}
	}
	v := e.publish(t, ns, "n", "0", "static", "s")
	first := v.GetSeq()
	for i := 1; i <= 100; i++ {
		v = e.patch(t, ns, v.GetSeq(), producer.Patch{Set: props("n", strconv.Itoa(i))})
	}
	last := v.GetSeq()
	for _, m := range ms {
		wait.For(t, m.who+" at the last version", func() bool { return m.sub.View().Version() == last })
		if got, _ := m.sub.View().Get("n"); string(got) != "100" {
			t.Errorf("%s: n = %q at the last version, want 100", m.who, got)
		}
		m.rec.waitChange(t, m.who, last)
		var prev uint64
		for _, ch := range m.rec.all() {
			cur := ch.New.Version()
			if cur <= prev {
				t.Errorf("%s: callback versions not increasing: %d after %d", m.who, cur, prev)
			}
			if ch.Old.Version() != prev {
				t.Errorf("%s: change to %d has Old %d, want the previous delivered %d", m.who, cur, ch.Old.Version(), prev)
			}
			want := map[string]string{"n": strconv.FormatUint(cur-first, 10), "static": "s"}
			if diff := cmp.Diff(want, contentOf(ch.New)); diff != "" {
				t.Errorf("%s: content of v%d (-want +got):\n%s", m.who, cur, diff)
			}
			prev = cur
		}
		t.Logf("%s: %d callbacks for 101 versions", m.who, len(m.rec.all()))
	}
}

// largeNamespacePatch: a one-key patch to a namespace over 5 MiB costs
// bytes proportional to the patch, not to the namespace.
func (e *env) largeNamespacePatch(t *testing.T) {
	ns := domain + "/big"
	const valueSize, nValues = 256 << 10, 21 // 5.25 MiB
	var kv []string
	for i := range nValues {
		val := bytes.Repeat([]byte{byte('a' + i%26)}, valueSize)
		copy(val, fmt.Sprintf("value %d;", i))
		kv = append(kv, fmt.Sprintf("blob/%02d", i), string(val))
	}
	subscribers := [][2]any{{zoneA, 0}, {zoneB, 0}}
	var subs []*consumer.Subscription
	for _, s := range subscribers {
		sub, err := e.consumerOf(t, s[0].(string), s[1].(int)).Subscribe(e.ctx, ns)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		subs = append(subs, sub)
	}
	v1 := e.publish(t, ns, kv...)
	for i, sub := range subs {
		wait.For(t, fmt.Sprintf("subscriber %d at v%d", i, v1.GetSeq()), func() bool { return sub.View().Version() == v1.GetSeq() })
	}
	if n := subs[0].View().Len(); n != nValues {
		t.Fatalf("view has %d properties, want %d", n, nValues)
	}
	// Every agent acknowledged v1 (convergence counts acks) before the
	// counters are read.
	for _, z := range []string{zoneA, zoneB} {
		wait.For(t, z+" convergence at v1", func() bool { return e.agentsAt(z, ns)[v1.GetSeq()] == 1 })
	}
	snap0, patch0 := e.sumBytes(zoneA, zoneB)

	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("blob/07", "small now")})
	for i, sub := range subs {
		wait.For(t, fmt.Sprintf("subscriber %d at v%d", i, v2.GetSeq()), func() bool { return sub.View().Version() == v2.GetSeq() })
		if got, _ := sub.View().Get("blob/07"); string(got) != "small now" {
			t.Errorf("subscriber %d: blob/07 = %.20q…, want %q", i, got, "small now")
		}
		if got, _ := sub.View().Get("blob/08"); len(got) != valueSize {
			t.Errorf("subscriber %d: blob/08 has %d bytes, want %d (untouched)", i, len(got), valueSize)
		}
	}
	snap1, patch1 := e.sumBytes(zoneA, zoneB)
	sent := (snap1 - snap0) + (patch1 - patch0)
	perAgent := sent / uint64(len(subscribers))
	t.Logf("one-key patch to a %d-byte namespace: %d bytes sent (%d snapshot, %d patch), %d per agent",
		valueSize*nValues, sent, snap1-snap0, patch1-patch0, perAgent)
	if snap1 != snap0 {
		t.Errorf("the patch caused %d snapshot bytes, want 0", snap1-snap0)
	}
	if patch1 == patch0 {
		t.Errorf("no patch bytes counted for the patch; the counters do not measure what was sent")
	}
	if perAgent >= 4<<10 {
		t.Errorf("one-key patch cost %d bytes per agent, want < 4096", perAgent)
	}
}

// distributorFailover: the distributor an agent is connected to is killed;
// the agent fails over to the other one of its zone and keeps converging.
func (e *env) distributorFailover(t *testing.T) {
	ns := domain + "/failover"
	a := e.agent(t, zoneA, 0)
	_, r := record(t, e.ctx, e.consumerOf(t, zoneA, 0), ns)
	v1 := e.publish(t, ns, "k", "before")
	r.waitChange(t, "zone-a/0", v1.GetSeq())

	var killed *devcluster.DistributorHandle
	wait.For(t, "zone-a/0 connected", func() bool { return e.status(t, a).GetConnected() })
	addr := e.status(t, a).GetDistributor()
	for _, d := range e.c.Distributors(zoneA) {
		if d.Addr() == addr {
			killed = d
		}
	}
	if killed == nil {
		t.Fatalf("zone-a/0 is connected to %q, which is none of the zone's distributors", addr)
	}
	if err := killed.Stop(); err != nil {
		t.Errorf("stop %s: %v", killed.ID, err)
	}
	t.Cleanup(func() {
		if !killed.Running() {
			if err := killed.Restart(context.Background()); err != nil {
				t.Errorf("restart %s: %v", killed.ID, err)
			}
		}
	})
	wait.For(t, "zone-a/0 to fail over", func() bool {
		st := e.status(t, a)
		return st.GetConnected() && st.GetDistributor() != addr
	})
	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("k", "after")})
	ch := r.waitChange(t, "zone-a/0", v2.GetSeq())
	if got, _ := ch.New.Get("k"); string(got) != "after" {
		t.Errorf("after failover k = %q, want %q", got, "after")
	}
	wait.For(t, "the surviving distributor to count zone-a/0 at v2", func() bool {
		return e.agentsAt(zoneA, ns)[v2.GetSeq()] == 1
	})

	// The killed distributor comes back on its address and serves again.
	if err := killed.Restart(e.ctx); err != nil {
		t.Fatalf("restart %s: %v", killed.ID, err)
	}
	if killed.Addr() != addr {
		t.Errorf("restarted %s listens on %s, want %s", killed.ID, killed.Addr(), addr)
	}
	wait.For(t, "the restarted distributor to know every goal", func() bool {
		st := killed.Stats()
		return st.Goals > 0 && st.Serving == st.Wanted
	})
}

// controlDown: with control stopped, a new subscriber to a namespace a
// distributor already holds (another of its agents uses it) still gets it.
// A distributor holds only what its agents subscribe to, so zone-b/1 is
// first moved to zone-b/0's distributor.
func (e *env) controlDown(t *testing.T) {
	ns := domain + "/static"
	v1 := e.publish(t, ns, "mode", "stable")
	warm, err := e.consumerOf(t, zoneB, 0).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	wait.For(t, "zone-b/0 to get "+ns, func() bool { return warm.View().Version() == v1.GetSeq() })
	a0, a1 := e.agent(t, zoneB, 0), e.agent(t, zoneB, 1)
	wait.For(t, "zone-b agents connected", func() bool { return e.status(t, a0).GetConnected() && e.status(t, a1).GetConnected() })
	holder := e.status(t, a0).GetDistributor()
	if other := e.status(t, a1).GetDistributor(); other != holder {
		for _, d := range e.c.Distributors(zoneB) {
			if d.Addr() != other {
				continue
			}
			if err := d.Stop(); err != nil {
				t.Errorf("stop %s: %v", d.ID, err)
			}
			t.Cleanup(func() {
				if !d.Running() {
					if err := d.Restart(context.Background()); err != nil {
						t.Errorf("restart %s: %v", d.ID, err)
					}
				}
			})
		}
		wait.For(t, "zone-b/1 to move to zone-b/0's distributor", func() bool {
			st := e.status(t, a1)
			return st.GetConnected() && st.GetDistributor() == holder
		})
	}
	for _, d := range e.c.Distributors(zoneB) {
		if d.Addr() == holder {
			wait.For(t, d.ID+" to hold "+ns, func() bool { return d.Stats().Serving > 0 })
		}
	}
	if err := e.c.StopControl(); err != nil {
		t.Errorf("StopControl: %v", err)
	}
	t.Cleanup(func() {
		if e.c.Control() == nil {
			if err := e.c.RestartControl(context.Background()); err != nil {
				t.Errorf("RestartControl: %v", err)
			}
		}
	})
	// A new subscriber on zone-b/1, which has never had ns: its
	// distributor serves it from memory.
	sub, err := e.consumerOf(t, zoneB, 1).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	wait.For(t, fmt.Sprintf("zone-b/1 to get %s with control down", ns), func() bool {
		return sub.View().Version() == v1.GetSeq()
	})
	if got, _ := sub.View().Get("mode"); string(got) != "stable" {
		t.Errorf("zone-b/1: mode = %q, want stable", got)
	}
	for _, d := range e.c.Distributors(zoneB) {
		if d.Running() {
			wait.For(t, d.ID+" to notice control is gone", func() bool { return !d.Stats().ControlConnected })
		}
	}

	// Control comes back; publishes flow again.
	if err := e.c.RestartControl(e.ctx); err != nil {
		t.Fatalf("RestartControl: %v", err)
	}
	sub, r := record(t, e.ctx, e.consumerOf(t, zoneA, 1), ns)
	wait.For(t, "zone-a/1 to get v1", func() bool { return sub.View().Version() == v1.GetSeq() })
	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("mode", "moving")})
	r.waitChange(t, "zone-a/1", v2.GetSeq())
}

// agentRestart: an agent restarted with an intact cache serves consumers
// from disk at once — before any distributor is reachable — and the resync
// that follows costs no snapshot bytes.
func (e *env) agentRestart(t *testing.T) {
	ns := domain + "/restart"
	a := e.agent(t, zoneA, 1)
	big := string(bytes.Repeat([]byte("x"), 64<<10))
	sub, r := record(t, e.ctx, e.consumerOf(t, zoneA, 1), ns)
	v1 := e.publish(t, ns, "k", "one", "big", big)
	r.waitChange(t, "zone-a/1", v1.GetSeq())
	want1 := contentOf(sub.View())

	if err := a.Stop(); err != nil {
		t.Fatalf("stop agent: %v", err)
	}
	t.Cleanup(func() {
		if !a.Running() {
			if err := a.Restart(context.Background()); err != nil {
				t.Errorf("restart %s: %v", a.HostID, err)
			}
		}
	})
	// A consumer starting while the agent is down reads the files.
	early, err := e.consumerOf(t, zoneA, 1).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe with the agent down: %v", err)
	}
	if v := early.View(); v.Version() != v1.GetSeq() || !cmp.Equal(want1, contentOf(v)) {
		t.Errorf("consumer started with the agent down sees v%d with %d keys, want v%d from the file", v.Version(), v.Len(), v1.GetSeq())
	}
	// A version published while the agent is down: the resync needs it.
	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("k", "two")})
	// With every distributor of the zone down, whatever the restarted
	// agent serves comes from its own disk.
	for _, d := range e.c.Distributors(zoneA) {
		if err := d.Stop(); err != nil {
			t.Errorf("stop %s: %v", d.ID, err)
		}
	}
	t.Cleanup(func() {
		for _, d := range e.c.Distributors(zoneA) {
			if !d.Running() {
				if err := d.Restart(context.Background()); err != nil {
					t.Errorf("restart %s: %v", d.ID, err)
				}
			}
		}
	})
	if err := a.Restart(e.ctx); err != nil {
		t.Fatalf("restart agent: %v", err)
	}
	got, err := a.Local().Get(e.ctx, &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get right after restart: %v", err)
	}
	if got.GetVersion().GetSeq() != v1.GetSeq() || got.GetVersion().GetChecksum() != v1.GetChecksum() {
		t.Errorf("Get after restart = v%d %s, want v%d %s", got.GetVersion().GetSeq(), got.GetVersion().GetChecksum(), v1.GetSeq(), v1.GetChecksum())
	}
	if st := e.status(t, a); st.GetConnected() {
		t.Fatalf("agent connected to %s while every distributor of its zone is stopped", st.GetDistributor())
	}
	// A consumer that starts now is served from disk at once.
	fresh, err := e.consumerOf(t, zoneA, 1).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe after restart: %v", err)
	}
	if v := fresh.View(); v.Version() != v1.GetSeq() || !cmp.Equal(want1, contentOf(v)) {
		t.Errorf("new consumer after restart sees v%d with %d keys, want v%d from disk", v.Version(), v.Len(), v1.GetSeq())
	}
	// The consumer that lived through the restart kept its view.
	if v := sub.View(); v.Version() != v1.GetSeq() || !cmp.Equal(want1, contentOf(v)) {
		t.Errorf("consumer view across the restart = v%d, want v%d unchanged", v.Version(), v1.GetSeq())
	}

	// Distributors back (new instances, counters at zero): the agent
	// catches up with a patch, never a snapshot.
	for _, d := range e.c.Distributors(zoneA) {
		if err := d.Restart(e.ctx); err != nil {
			t.Fatalf("restart %s: %v", d.ID, err)
		}
	}
	ch := r.waitChange(t, "zone-a/1", v2.GetSeq())
	if diff := cmp.Diff([]string{"k"}, ch.Changed); diff != "" {
		t.Errorf("resync change (-want +got):\n%s", diff)
	}
	wait.For(t, "fresh consumer at v2", func() bool { return fresh.View().Version() == v2.GetSeq() })
	wait.For(t, "consumer started with the agent down at v2", func() bool { return early.View().Version() == v2.GetSeq() })
	wait.For(t, "zone-a convergence at v2", func() bool { return e.agentsAt(zoneA, ns)[v2.GetSeq()] == 1 })
	snap, patch := e.sumBytes(zoneA)
	t.Logf("resync after the restart: %d snapshot bytes, %d patch bytes", snap, patch)
	if snap != 0 {
		t.Errorf("distributors sent %d snapshot bytes after the restart, want 0 (every cache was intact)", snap)
	}
	if patch == 0 {
		t.Errorf("distributors sent no patch bytes, yet the agent moved from v%d to v%d", v1.GetSeq(), v2.GetSeq())
	}
	for _, ch := range r.all() {
		if ch.New.Version() < ch.Old.Version() || ch.New.Version() == 0 {
			t.Errorf("consumer saw a change from v%d to v%d", ch.Old.Version(), ch.New.Version())
		}
	}
}

// corruptCache: a value damaged in the Badger cache while the agent is
// stopped is detected on restart, a fresh snapshot fetched, and no consumer
// ever sees the damaged content.
func (e *env) corruptCache(t *testing.T) {
	ns := domain + "/corrupt"
	a := e.agent(t, zoneB, 1)
	good := map[string]string{"a": "alpha", "b": "beta"}
	sub, r := record(t, e.ctx, e.consumerOf(t, zoneB, 1), ns)
	v1 := e.publish(t, ns, "a", "alpha", "b", "beta")
	r.waitChange(t, "zone-b/1", v1.GetSeq())

	if err := a.Stop(); err != nil {
		t.Fatalf("stop agent: %v", err)
	}
	t.Cleanup(func() {
		if !a.Running() {
			if err := a.Restart(context.Background()); err != nil {
				t.Errorf("restart %s: %v", a.HostID, err)
			}
		}
	})
	damage(t, a.CacheDir(), ns)
	snap0, _ := e.sumBytes(zoneB)

	// Watch the consumer's view for the rest of the test.
	stop := make(chan struct{})
	bad := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			v := sub.View()
			for k, val := range contentOf(v) {
				if val == "alphA" || val == "betA" {
					select {
					case bad <- fmt.Sprintf("view v%d has %s=%q", v.Version(), k, val):
					default:
					}
				}
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	if err := a.Restart(e.ctx); err != nil {
		t.Fatalf("restart agent: %v", err)
	}
	wait.For(t, "a fresh snapshot from zone-b's distributors", func() bool {
		snap, _ := e.sumBytes(zoneB)
		return snap > snap0
	})
	wait.For(t, "the agent to serve v1 again", func() bool {
		got, err := a.Local().Get(e.ctx, &lehrpb.AgentGetRequest{Namespace: ns})
		return err == nil && got.GetVersion().GetSeq() == v1.GetSeq()
	})
	got, err := a.Local().Get(e.ctx, &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	gotProps := map[string]string{}
	for _, p := range got.GetProperties() {
		gotProps[p.GetKey()] = string(p.GetValue())
	}
	if diff := cmp.Diff(good, gotProps); diff != "" {
		t.Errorf("agent Get after repair (-want +got):\n%s", diff)
	}
	// A consumer arriving now reads the good content.
	fresh, err := e.consumerOf(t, zoneB, 1).Subscribe(e.ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	wait.For(t, "the new consumer at v1", func() bool { return fresh.View().Version() == v1.GetSeq() })
	if diff := cmp.Diff(good, contentOf(fresh.View())); diff != "" {
		t.Errorf("new consumer after repair (-want +got):\n%s", diff)
	}
	// A patch applies on the repaired copy and reaches the old consumer.
	v2 := e.patch(t, ns, v1.GetSeq(), producer.Patch{Set: props("a", "alpha2")})
	ch := r.waitChange(t, "zone-b/1", v2.GetSeq())
	if diff := cmp.Diff(map[string]string{"a": "alpha2", "b": "beta"}, contentOf(ch.New)); diff != "" {
		t.Errorf("consumer after the patch (-want +got):\n%s", diff)
	}
	for _, ch := range r.all() {
		for _, v := range []*consumer.View{ch.Old, ch.New} {
			if x, _ := v.Get("a"); string(x) == "alphA" {
				t.Errorf("a callback saw the corrupt value in v%d", v.Version())
			}
			if x, _ := v.Get("b"); string(x) == "betA" {
				t.Errorf("a callback saw the corrupt value in v%d", v.Version())
			}
		}
	}
	select {
	case msg := <-bad:
		t.Errorf("the consumer saw corrupt content: %s", msg)
	default:
	}
}

// damage flips the case of the last byte of every cached value of ns in
// the Badger cache in dir, which must not be open.
func damage(t *testing.T, dir, ns string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatalf("open the agent's cache with Badger: %v", err)
	}
	defer db.Close()
	prefix := []byte("p/" + ns + "/")
	n := 0
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		type kv struct{ k, v []byte }
		var kvs []kv
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				it.Close()
				return err
			}
			v[len(v)-1] ^= 0x20
			kvs = append(kvs, kv{it.Item().KeyCopy(nil), v})
		}
		it.Close()
		for _, x := range kvs {
			if err := txn.Set(x.k, x.v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("damage the cache: %v", err)
	}
	if n == 0 {
		t.Fatalf("damage the cache: no value of %s under %q in %s", ns, prefix, filepath.Base(dir))
	}
}

// A rollback reaches consumers as a newer version with the old content, and
// the callback says it is a rollback and of which version; versions never
// go backwards.
func (e *env) rollbackCallback(t *testing.T) {
	ns := domain + "/rollback"
	_, rec := record(t, e.ctx, e.consumerOf(t, zoneA, 0), ns)
	v1 := e.publish(t, ns, "limit", "10")
	v2 := e.publish(t, ns, "limit", "0")
	rec.waitChange(t, "zone-a consumer", v2.GetSeq()) // else version 2 may be skipped
	rb, err := e.c.Producer().Rollback(e.ctx, ns, v1.GetSeq(), producer.WithMessage("bad limit"))
	if err != nil {
		t.Fatal(err)
	}
	ch := rec.waitChange(t, "zone-a consumer", rb.GetSeq())
	if !ch.Rollback() || ch.New.RollbackOf() != v1.GetSeq() {
		t.Errorf("rollback callback: Rollback() = %v, RollbackOf() = %d; want true and %d", ch.Rollback(), ch.New.RollbackOf(), v1.GetSeq())
	}
	if got := contentOf(ch.New); got["limit"] != "10" || ch.Old.Version() != 2 || !slices.Equal(ch.Changed, []string{"limit"}) {
		t.Errorf("rollback change: %v from version %d, changed %v; want limit=10 from version 2, changed [limit]", got, ch.Old.Version(), ch.Changed)
	}
	for _, c := range rec.all() {
		if c.New.Version() < rb.GetSeq() && c.Rollback() {
			t.Errorf("version %d's callback says rollback; only %d is one", c.New.Version(), rb.GetSeq())
		}
	}
}
