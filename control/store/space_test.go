package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// smallEtcd starts an etcd of its own with a backend quota of quota
// bytes, and a Store on it whose space monitor runs until the test ends.
func smallEtcd(t *testing.T, quota int64, opts ...func(*Options)) (*Store, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: t.TempDir(), NoSync: true, Logger: quietLogger(),
		QuotaBackendBytes: quota, AutoCompaction: -1})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	cli := srv.InProcessClient()
	mcli, err := embedetcd.NewClient(ctx, srv.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mcli.Close() })
	o := Options{Prefix: testPrefix(t), Logger: quietLogger(), Maintenance: mcli, Space: SpaceOptions{Interval: 20 * time.Millisecond}}
	for _, f := range opts {
		f(&o)
	}
	s := New(cli, o)
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.RunSpaceMonitor(mctx) }()
	t.Cleanup(func() { stop(); <-done })
	wait.For(t, "the store to read etcd's space", func() bool { return s.Space().Known })
	return s, cli
}

// TestStoreKeepsItsReserve: with a small quota, one domain floods until
// the store refuses it at its high-water mark — cleanly, a *SpaceError
// naming its fair share, never etcd's "database space exceeded" — while
// another domain, within its fair share, goes on publishing up to the hard
// mark and is refused there; rollbacks and goal moves still succeed; once
// the flood's history is compacted, control gives the space back by itself
// (etcd compaction, defragmentation) and publishes resume.
func TestStoreKeepsItsReserve(t *testing.T) {
	const quota = 96 << 20
	s, _ := smallEtcd(t, quota)
	ctx := testCtx(t)
	if st := s.Space(); st.Quota != quota || st.HighWater != quota-minReserve {
		t.Fatalf("space %+v: want the quota etcd reports (%d) and %d bytes kept back", st, quota, minReserve)
	}
	mustDomain(t, s, "flood")
	mustDomain(t, s, "victim")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	snapshot := &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}
	good := commit(t, s, Commit{Namespace: "victim/app", Create: true, Content: snap(t, "k", "good"), Info: snapshot})
	bad := commit(t, s, Commit{Namespace: "victim/app", Rebase: true, Content: snap(t, "k", "bad"), Info: snapshot, Goals: GoalsNone})

	var se *SpaceError
	for i := 0; se == nil; i++ {
		_, err := s.Commit(ctx, Commit{Namespace: "flood/big", Create: true, Rebase: true, Content: randomSnap(t, 4, 256<<10), Info: snapshot})
		switch {
		case errors.As(err, &se):
		case err != nil:
			t.Fatalf("flood commit %d: %v (want success or a SpaceError)", i, err)
		case i > 400:
			t.Fatalf("400 MiB committed into a %d-byte store without a SpaceError", quota)
		}
	}
	if !errors.Is(se, ErrStoreFull) || se.Used+se.Adding <= se.HighWater || se.Alarm || se.FairShare != se.HighWater/2 || se.DomainBytes <= se.FairShare {
		t.Fatalf("refusal %+v: want used+adding above the high-water mark, the flood over its fair share (half the mark: two domains), no alarm", se)
	}
	// The other domain is within its fair share: it publishes on, into the
	// first half of the reserve, until the hard mark.
	published := 0
	for se = nil; se == nil; published++ {
		_, err := s.Commit(ctx, Commit{Namespace: "victim/app", Rebase: true, Content: randomSnap(t, 1, 256<<10), Info: snapshot, Goals: GoalsNone})
		switch {
		case errors.As(err, &se):
		case err != nil:
			t.Fatalf("victim commit %d above the high-water mark: %v", published, err)
		case published > 400:
			t.Fatal("100 MiB more committed without reaching the hard mark")
		}
	}
	if published < 10 || se.FairShare != 0 || se.Used+se.Adding <= s.Space().HardMark() {
		t.Fatalf("the victim published %d versions of 256 KiB above the high-water mark, then %+v: want at least 10, then refused at the hard mark", published-1, se)
	}

	// The safety path: the victim's rollback of its bad version, and a
	// goal move.
	_, old, err := s.Content(ctx, "victim/app", good.GetSeq())
	if err != nil {
		t.Fatal(err)
	}
	rb, err := s.Commit(ctx, Commit{Namespace: "victim/app", Rebase: true, Content: old,
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: good.GetSeq()}})
	if err != nil {
		t.Fatalf("rollback above the high-water mark: %v", err)
	}
	if rb.GetSeq() <= bad.GetSeq() || rb.GetRollbackOf() != good.GetSeq() {
		t.Errorf("rollback %v: want a version after %d rolling back to %d", rb, bad.GetSeq(), good.GetSeq())
	}
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: "victim/app", Version: rb.GetSeq(), Checksum: rb.GetChecksum()}); err != nil {
		t.Fatalf("goal move above the high-water mark: %v", err)
	}

	// Free the flood's history: the monitor compacts and defragments etcd
	// and content is admitted again.
	if _, err := s.CompactHistory(ctx, "flood/big", 1); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the store to give space back", func() error {
		if st := s.Space(); st.DBSize >= st.HighWater*3/4 {
			return fmt.Errorf("etcd's database is %d bytes (%d in use), want under %d", st.DBSize, st.DBSizeInUse, st.HighWater*3/4)
		}
		return nil
	})
	if _, err := s.Commit(ctx, Commit{Namespace: "flood/big", Rebase: true, Content: randomSnap(t, 4, 256<<10), Info: snapshot}); err != nil {
		t.Fatalf("the flooder's publish after its history was compacted: %v", err)
	}
	if _, err := s.Commit(ctx, Commit{Namespace: "victim/app", Rebase: true, Content: snap(t, "k", "after"), Info: snapshot}); err != nil {
		t.Fatalf("publish after the flood was compacted: %v", err)
	}
}

// TestStoreRecoversFromNoSpace: when etcd raises its NOSPACE alarm anyway
// (here: someone wrote around Lehr), writes are refused as a SpaceError,
// not an internal error, and once space is free the store disarms the
// alarm itself and publishes resume.
func TestStoreRecoversFromNoSpace(t *testing.T) {
	const quota = 32 << 20
	s, cli := smallEtcd(t, quota)
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	snapshot := &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}
	commit(t, s, Commit{Namespace: "d/n", Create: true, Content: snap(t, "k", "v1"), Info: snapshot})

	// Fill etcd directly until it refuses.
	junk := strings.Repeat("x", 512<<10)
	for i := 0; ; i++ {
		_, err := cli.Put(ctx, fmt.Sprintf("/junk/%04d", i), junk)
		if IsNoSpace(err) {
			break
		}
		if err != nil || i > 200 {
			t.Fatalf("filling etcd, put %d: %v", i, err)
		}
	}
	wait.For(t, "the store to see the NOSPACE alarm", func() bool { return s.Space().Alarm })
	var se *SpaceError
	_, err := s.Commit(ctx, Commit{Namespace: "d/n", Rebase: true, Content: snap(t, "k", "v2"), Info: snapshot})
	if !errors.As(err, &se) || !se.Alarm {
		t.Fatalf("commit under the NOSPACE alarm: %v, want a SpaceError with Alarm", err)
	}

	// Free the space (deletes work under the alarm): the store compacts,
	// defragments and disarms by itself.
	if _, err := cli.Delete(ctx, "/junk/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete the junk: %v", err)
	}
	wait.For(t, "the store to disarm the NOSPACE alarm", func() bool { return !s.Space().Alarm })
	if _, err := s.Commit(ctx, Commit{Namespace: "d/n", Rebase: true, Content: snap(t, "k", "v3"), Info: snapshot}); err != nil {
		t.Fatalf("commit after recovery: %v", err)
	}
}

// Issue 27: a defragmentation space does not demand (after a history
// compaction, far below the high-water mark) waits while callers are busy
// (SpaceOptions.Quiet), since it stalls every request to the member; the
// revision compaction does not wait. Once they are quiet it runs.
func TestDefragmentationWaitsForQuiet(t *testing.T) {
	var quiet atomic.Bool
	var mu sync.Mutex
	events := map[string]int{}
	count := func(e string) int { mu.Lock(); defer mu.Unlock(); return events[e] }
	s, _ := smallEtcd(t, 512<<20, func(o *Options) {
		o.Space.Quiet = quiet.Load
		o.OnSpaceEvent = func(e string) { mu.Lock(); events[e]++; mu.Unlock() }
	})
	st := fragment(t, s, count)
	if n := count("defragment"); n != 0 || st.DBSize-st.DBSizeInUse < st.DBSize/10 {
		t.Fatalf("%d defragmentation(s) while callers were busy, %d of %d bytes free; want none, with a tenth or more free", n, st.DBSize-st.DBSizeInUse, st.DBSize)
	}
	if st.DefragAtStart {
		t.Errorf("Space().DefragAtStart without SpaceOptions.DefragAtStart")
	}
	quiet.Store(true)
	wait.For(t, "the defragmentation once callers are quiet", func() bool { return count("defragment") == 1 })
	wait.Until(t, "etcd's file back to what it holds", func() error {
		if st := s.Space(); st.DBSize-st.DBSizeInUse >= st.DBSize/10 {
			return fmt.Errorf("%d of %d bytes free", st.DBSize-st.DBSizeInUse, st.DBSize)
		}
		return nil
	})
}

// fragment commits 24 snapshots of 1 MiB to a namespace and compacts its
// history to one version, which asks for etcd's revision compaction;
// it returns the space fifty readings after that compaction.
func fragment(t *testing.T, s *Store, count func(event string) int) SpaceStatus {
	t.Helper()
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	snapshot := &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}
	for i := range 24 {
		if _, err := s.Commit(ctx, Commit{Namespace: "d/n", Create: i == 0, Rebase: true, Content: randomSnap(t, 4, 256<<10), Info: snapshot}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CompactHistory(ctx, "d/n", 1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "etcd's revisions compacted", func() bool { return count("compact") > 0 })
	for range 50 {
		at := s.Space().ReadAt
		wait.For(t, "the next reading of etcd's space", func() bool { return s.Space().ReadAt.After(at) })
	}
	return s.Space()
}

// TestDefragmentationLeftToTheNextStart: on a member that gives its free
// pages back at its next start (an embedded etcd), a defragmentation space
// does not demand never runs online — where every call arriving during it
// waits it out — even with callers idle; the space status says it is left
// to the next start.
func TestDefragmentationLeftToTheNextStart(t *testing.T) {
	var mu sync.Mutex
	events := map[string]int{}
	count := func(e string) int { mu.Lock(); defer mu.Unlock(); return events[e] }
	s, _ := smallEtcd(t, 512<<20, func(o *Options) {
		o.Space.DefragAtStart = true
		o.OnSpaceEvent = func(e string) { mu.Lock(); events[e]++; mu.Unlock() }
	})
	st := fragment(t, s, count)
	if n := count("defragment"); n != 0 || st.DBSize-st.DBSizeInUse < st.DBSize/10 {
		t.Errorf("%d online defragmentation(s), %d of %d bytes free; want none, with a tenth or more free", n, st.DBSize-st.DBSizeInUse, st.DBSize)
	}
	if !st.DefragAtStart {
		t.Errorf("Space().DefragAtStart = false with a tenth free, want the defragmentation left to the next start")
	}
}
