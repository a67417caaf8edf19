package strategist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Global blasts started by their publish (control/service, blast.go) and
// the strategist that takes them over from there.

// publishAtCommit commits v to ns (which exists) as the service does
// under policy: a global blast starts its rollout in the commit
// (rollout.AtPublish), anything else is left to the strategist.
func publishAtCommit(ctx context.Context, st *store.Store, ns, v string, policy *lehrpb.RolloutPolicy) (*lehrpb.VersionInfo, *store.StartedRollout, error) {
	snap, err := content.New([]content.Property{{Key: "k", ContentType: "text/plain", Value: []byte(v)}})
	if err != nil {
		return nil, nil, err
	}
	h, err := st.GetNamespace(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	at := &store.RolloutAtCommit{Decide: func(in store.CommitRollout) (*store.StartedRollout, error) {
		d, ok, err := rollout.AtPublish(rollout.PublishInput{Info: in.Info, Zones: in.Zones, Policy: policy,
			Source: lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, Generation: 1, Read: in.Read, Now: in.Now})
		if err != nil || !ok {
			return nil, err
		}
		return d.Records(), nil
	}}
	info, err := st.Commit(ctx, store.Commit{Namespace: ns, ExpectedLatest: h.GetLatestVersion(), Content: snap, Goals: store.GoalsNone,
		Rollout: at, Info: &lehrpb.VersionInfo{Author: "alice", Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}})
	return info, at.Started, err
}

func (r *strategistRig) events(ns string, v uint64) []string {
	r.t.Helper()
	evs, err := r.st.RolloutEvents(r.ctx, ns, v)
	if err != nil {
		r.t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.GetKind())
	}
	return kinds
}

// TestRoundStepsARolloutStartedAtPublish: a global blast's publish moved
// every zone and started the rollout; the strategist starts no other,
// moves no goal before the end, and steps it to success as it would have
// stepped its own.
func TestRoundStepsARolloutStartedAtPublish(t *testing.T) {
	r := newStrategistRig(t, rollout.GlobalBlast(), "y", "z")
	mustDomain(r)
	const ns = "pay/app"
	r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	v2, started, err := publishAtCommit(r.ctx, r.st, ns, "2", rollout.GlobalBlast())
	if err != nil || started == nil {
		t.Fatalf("publish: %v, started %v", err, started)
	}
	if r.goal("y", ns) != v2.GetSeq() || r.goal("z", ns) != v2.GetSeq() {
		t.Fatalf("goals after the publish: y %d, z %d; want %d", r.goal("y", ns), r.goal("z", ns), v2.GetSeq())
	}
	for range 3 {
		r.round()
		r.clock.advance(time.Second)
	}
	if got := r.rollout(ns, v2.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Fatalf("rollout %v (%s); want SUCCEEDED", got.GetState(), got.GetReason())
	}
	// No distributor has reported in either zone: the stage skips them.
	if got, want := r.events(ns, v2.GetSeq()), []string{"started", "stage", rollout.PublishedEventKind, "skipped", "applied", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// hookStore runs before ahead of every PutRollout.
type hookStore struct {
	Store
	before func(step store.RolloutStep)
}

func (h *hookStore) PutRollout(ctx context.Context, g store.Guard, step store.RolloutStep) error {
	if h.before != nil {
		h.before(step)
	}
	return h.Store.PutRollout(ctx, g, step)
}

// TestAStaleStepDoesNotUndoAPublish: the strategist decides on a rollout
// (here, an operator's pause), and before it writes, a global blast's
// publish supersedes that rollout in its own transaction. The step,
// decided on the old head, is refused; the rollout stays superseded (it
// once went back to the state the step decided — paused, and stuck so,
// for only the latest rollout is stepped).
func TestAStaleStepDoesNotUndoAPublish(t *testing.T) {
	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
	}}
	r := newStrategistRig(t, staged, "z")
	mustDomain(r)
	const ns = "pay/app"
	r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	v2 := r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	r.round()
	if got := r.rollout(ns, v2.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		t.Fatalf("version 2's rollout %v; want it running", got.GetState())
	}
	if err := r.st.QueueRolloutCommand(r.ctx, ns, v2.GetSeq(), &lehrpb.RolloutCommand{RolloutId: store.RolloutID(ns, v2.GetSeq()),
		Action: lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, Author: "bob"}); err != nil {
		t.Fatal(err)
	}
	var v3 *lehrpb.VersionInfo
	hs := &hookStore{Store: r.st}
	hs.before = func(step store.RolloutStep) {
		if v3 != nil || step.Done == nil {
			return
		}
		var err error
		if v3, _, err = publishAtCommit(r.ctx, r.st, ns, "3", rollout.GlobalBlast()); err != nil {
			t.Errorf("publish: %v", err)
		}
	}
	r.s.opts.Store = hs
	if err := r.s.Round(r.ctx, store.Guard{}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the round that paused version 2's rollout after the publish: %v; want a conflict", err)
	}
	if v3 == nil {
		t.Fatal("the round carried out no command")
	}
	for range 3 {
		r.round()
		r.clock.advance(time.Second)
	}
	if got := r.rollout(ns, v2.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED {
		t.Errorf("version 2's rollout %v (%s); want SUPERSEDED", got.GetState(), got.GetReason())
	}
	// The pause, carried out on the superseded rollout, is ignored.
	if got := r.events(ns, v2.GetSeq()); !slices.Equal(got[len(got)-2:], []string{"superseded", "ignored"}) {
		t.Errorf("version 2's events %v; want them to end superseded, ignored", got)
	}
	if got := r.rollout(ns, v3.GetSeq()); got.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED || got.GetBaseVersion() != 1 {
		t.Errorf("version 3's rollout %v from base %d; want SUCCEEDED from 1", got.GetState(), got.GetBaseVersion())
	}
}

// TestFailoverAfterLeaderDiesWithoutResigning measures what a leader that
// dies without resigning (SIGKILL, a lost machine) costs delivery: the
// other replica leads once the dead one's election lease (5 s TTL, kept
// alive every third of it) expires, so a staged rollout published
// meanwhile waits 3.3 to 5 s (and etcd's lease check, 0.5 s) for its
// first goal move; a global blast, whose publish moves every zone, waits
// for nothing.
func TestFailoverAfterLeaderDiesWithoutResigning(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out an election lease")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/test/%s/%d/", t.Name(), time.Now().UnixNano())
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
	}}
	policies := map[string]*lehrpb.RolloutPolicy{"pay/staged": staged, "pay/blast": rollout.GlobalBlast()}
	type replica struct {
		cli  *clientv3.Client
		st   *store.Store
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *replica {
		cli, err := embedetcd.NewClient(ctx, etcdClient.Endpoints())
		if err != nil {
			t.Fatal(err)
		}
		st := store.New(cli, store.Options{Prefix: prefix, Logger: quiet})
		s, err := New(Options{Store: st, Client: cli, ElectionKey: prefix + "strategist", ID: id, Interval: 50 * time.Millisecond, Logger: quiet,
			Policy: func(_ context.Context, ns string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
				return policies[ns], lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE, 1, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := &replica{cli: cli, st: st, stop: stop, done: make(chan struct{})}
		go func() { defer close(r.done); _ = s.Run(rctx) }()
		t.Cleanup(func() { stop(); <-r.done; cli.Close() })
		return r
	}
	leader := func() string {
		resp, err := etcdClient.Get(ctx, prefix+"strategist/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	waitFor := func(what string, cond func() bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(t0)
	}

	a := start("a")
	waitFor("a to lead", func() bool { return leader() == "a" })
	st := a.st
	if _, err := st.CreateDomain(ctx, &lehrpb.Domain{Name: "pay"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	for ns := range policies {
		snap, _ := content.New([]content.Property{{Key: "k", ContentType: "text/plain", Value: []byte("1")}})
		if _, err := st.Commit(ctx, store.Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap,
			Info: &lehrpb.VersionInfo{Author: "alice"}}); err != nil {
			t.Fatal(err)
		}
	}
	b := start("b")
	obs := store.New(etcdClient, store.Options{Prefix: prefix, Logger: quiet})
	goal := func(ns string) uint64 {
		gs, _, err := obs.Goals(ctx, "z", ns)
		if err != nil || len(gs) == 0 {
			return 0
		}
		return gs[0].GetVersion()
	}

	// Kill a: its etcd client goes first, so it cannot resign or revoke
	// its lease; then its goroutines.
	// At a random point of its lease's keep-alive period (5 s / 3).
	time.Sleep(500*time.Millisecond + rand.N(1700*time.Millisecond))
	killed := time.Now()
	a.cli.Close()
	a.stop()
	published := time.Now()
	if _, _, err := publishAtCommit(ctx, b.st, "pay/blast", "2", rollout.GlobalBlast()); err != nil {
		t.Fatal(err)
	}
	blast := waitFor("the blast's goal", func() bool { return goal("pay/blast") == 2 }) + time.Since(published)
	published = time.Now()
	if _, _, err := publishAtCommit(ctx, b.st, "pay/staged", "2", staged); err != nil {
		t.Fatal(err)
	}
	waitFor("b to lead", func() bool { return leader() == "b" })
	led := time.Since(killed)
	waitFor("the staged rollout's goal", func() bool { return goal("pay/staged") == 2 })
	stagedWait, stagedAt := time.Since(published), time.Since(killed)
	t.Logf("the leader died without resigning; the other replica led %v later. "+
		"A global blast published then had its goals %v after its publish; a staged rollout published then had its first goal %v after its publish (%v after the death)",
		led.Round(time.Millisecond), blast.Round(time.Millisecond), stagedWait.Round(time.Millisecond), stagedAt.Round(time.Millisecond))
	if blast > time.Second {
		t.Errorf("the global blast's goals moved %v after its publish; want at once", blast)
	}
	if led < 2*time.Second || led > 10*time.Second {
		t.Errorf("the other replica led %v after the leader died; want the rest of its 5 s lease", led)
	}
}
