package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// blobKeys returns the hashes of every blob of ns.
func blobKeys(t *testing.T, s *Store, ns string) map[string]bool {
	t.Helper()
	resp, err := s.cli.Get(testCtx(t), s.lay.blobsPrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		out[s.lay.hashFromBlob(ns, string(kv.Key))] = true
	}
	return out
}

// wantBlobs computes, independently of the store's GC, the blobs the given
// snapshots need.
func wantBlobs(t *testing.T, snaps ...content.Snapshot) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, sn := range snaps {
		m, err := buildManifest(sn)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range m.chunkHashes {
			out[h] = true
		}
		for h := range m.values {
			out[h] = true
		}
	}
	return out
}

func TestCompaction(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now, Retention: Retention{KeepLast: 3, KeepFor: time.Hour}})
	ctx := testCtx(t)
	const ns = "d/hist"
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}

	// v1..v8 long ago, v9 and v10 recently. Each version shares "shared"
	// and has one value of its own.
	snaps := map[uint64]content.Snapshot{}
	for seq := uint64(1); seq <= 10; seq++ {
		if seq == 9 {
			clock.Advance(2 * time.Hour)
		}
		sn := snap(t, "shared", "always the same", "own", fmt.Sprintf("value of v%d", seq))
		snaps[seq] = sn
		commit(t, s, Commit{Namespace: ns, Create: seq == 1, ExpectedLatest: seq - 1, Content: sn, Goals: GoalsNone})
		clock.Advance(time.Minute)
	}
	// Zone z pins v2, and v4 as a rollout's candidate.
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: ns, Version: 2,
		Candidate: &lehrpb.CandidateGoal{Version: 4, Hosts: []string{"canary-1"}, Salt: "r"}}); err != nil {
		t.Fatal(err)
	}

	removed, err := s.Compact(ctx, ns)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	// Removable: older than an hour, not among the 3 newest (8, 9, 10),
	// not the goal of z (2) nor its candidate (4).
	if removed != 5 {
		t.Errorf("Compact removed %d versions, want 5 (1, 3, 5, 6, 7)", removed)
	}
	hist, err := s.History(ctx, ns, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(hist), []uint64{10, 9, 8, 4, 2}; !cmp.Equal(got, want) {
		t.Errorf("History after compaction = %v, want %v", got, want)
	}
	head, err := s.GetNamespace(ctx, ns)
	if err != nil || head.GetOldestVersion() != 2 {
		t.Errorf("head oldest_version = %d (err %v), want 2", head.GetOldestVersion(), err)
	}
	var nf *NotFoundError
	if _, _, err := s.Content(ctx, ns, 1); !errors.As(err, &nf) || nf.What != "version" || nf.Oldest != 2 {
		t.Errorf("Content(1) after compaction: %v, want version not found, oldest 2", err)
	}
	if _, _, err := s.Content(ctx, ns, 5); !errors.As(err, &nf) || nf.What != "version" {
		t.Errorf("Content(5) after compaction: %v, want version not found", err)
	}
	for _, seq := range []uint64{2, 4, 8, 9, 10} {
		readBack(t, s, ns, seq, snaps[seq])
	}
	want := wantBlobs(t, snaps[2], snaps[4], snaps[8], snaps[9], snaps[10])
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(blobKeys(t, s, ns)))); diff != "" {
		t.Errorf("blobs after GC (-want +got):\n%s", diff)
	}

	// A blob an in-flight publish just staged: unreferenced but newer than
	// the head, so GC must spare it. (Had compaction just rewritten the
	// head, the publish would fail its guard and stage again, so then the
	// blob may go.)
	inflight := []byte("staged by a publish that has not committed yet")
	if _, err := s.cli.Put(ctx, s.lay.blob(ns, blobHash(inflight)), string(inflight)); err != nil {
		t.Fatal(err)
	}
	// Nothing more to do.
	if n, err := s.Compact(ctx, ns); err != nil || n != 0 {
		t.Errorf("second Compact = %d, %v; want 0", n, err)
	}
	want[blobHash(inflight)] = true
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(blobKeys(t, s, ns)))); diff != "" {
		t.Errorf("blobs after GC with a staged blob (-want +got):\n%s", diff)
	}

	// Once the goal moves on and another version lands, v2 and the stale
	// staged blob go too.
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: ns, Version: 10}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	snaps[11] = snap(t, "shared", "always the same", "own", "value of v11")
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 10, Content: snaps[11], Goals: GoalsNone})
	removed, err = s.Compact(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 3 {
		t.Errorf("Compact removed %d, want 3 (v2, v4 and v8)", removed)
	}
	hist, _ = s.History(ctx, ns, 0, 100)
	if got, want := seqs(hist), []uint64{11, 10, 9}; !cmp.Equal(got, want) {
		t.Errorf("History = %v, want %v", got, want)
	}
	want = wantBlobs(t, snaps[9], snaps[10], snaps[11])
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(blobKeys(t, s, ns)))); diff != "" {
		t.Errorf("blobs after second GC (-want +got):\n%s", diff)
	}
	for _, seq := range []uint64{9, 10, 11} {
		readBack(t, s, ns, seq, snaps[seq])
	}
	// A commit sharing blobs with the compacted past still works.
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 11, Content: snaps[1]})
	readBack(t, s, ns, 12, snaps[1])
}

// TestCompactionKeepsRecentVersions: KeepFor protects versions beyond
// KeepLast, and the latest survives everything.
func TestCompactionKeepsRecentVersions(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now, Retention: Retention{KeepLast: 1, KeepFor: time.Hour}})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	for seq := uint64(1); seq <= 5; seq++ {
		commit(t, s, Commit{Namespace: "d/r", Create: seq == 1, ExpectedLatest: seq - 1, Content: snap(t, "k", fmt.Sprint(seq))})
	}
	if n, err := s.Compact(ctx, "d/r"); err != nil || n != 0 {
		t.Errorf("Compact of recent versions = %d, %v; want 0", n, err)
	}
	clock.Advance(24 * time.Hour)
	if n, err := s.Compact(ctx, "d/r"); err != nil || n != 4 {
		t.Errorf("Compact a day later = %d, %v; want 4", n, err)
	}
	readBack(t, s, "d/r", 0, snap(t, "k", "5"))
}

// TestCompactorRacesCommits runs the compactor against concurrent commits:
// every version that survives must still read back.
func TestCompactorRacesCommits(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now, Retention: Retention{KeepLast: 2, KeepFor: time.Nanosecond}})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	const ns = "d/racy"
	commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "a", "0", "b", "0")})
	done := make(chan error, 1)
	go func() {
		for i := range 40 {
			clock.Advance(time.Second)
			// Alternate values so later versions reuse blobs of compacted ones.
			sn := snap(t, "a", fmt.Sprint(i%3), "b", fmt.Sprint(i))
			if _, err := s.Commit(ctx, Commit{Namespace: ns, ExpectedLatest: uint64(i + 1), Content: sn}); err != nil {
				done <- err
				return
			}
			// The version just committed is the latest, which compaction
			// never removes: its blobs must all be there.
			_, got, err := s.Content(ctx, ns, uint64(i+2))
			if err != nil {
				done <- fmt.Errorf("read back v%d: %w", i+2, err)
				return
			}
			if !got.Equal(sn) {
				done <- fmt.Errorf("read back v%d: content differs", i+2)
				return
			}
		}
		done <- nil
	}()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			running = false
		default:
			if _, err := s.Compact(ctx, ns); err != nil && !errors.Is(err, ErrContention) {
				t.Fatalf("Compact: %v", err)
			}
		}
	}
	if _, err := s.Compact(ctx, ns); err != nil {
		t.Fatalf("final Compact: %v", err)
	}
	hist, err := s.History(ctx, ns, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(hist); !cmp.Equal(got, []uint64{41, 40}) {
		t.Errorf("History = %v, want [41 40]", got)
	}
	readBack(t, s, ns, 41, snap(t, "a", fmt.Sprint(39%3), "b", "39"))
	readBack(t, s, ns, 40, snap(t, "a", fmt.Sprint(38%3), "b", "38"))
}

// TestCompactorAsksForEtcdCompaction: a compactor pass that removed
// versions asks the space monitor to compact etcd's revisions at its next
// reading (issue 27: etcd's own compaction ran hourly, and first an hour
// after each start); a pass that removed nothing does not.
func TestCompactorAsksForEtcdCompaction(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now, Retention: Retention{KeepLast: 1, KeepFor: time.Hour}})
	mustDomain(t, s, "d")
	for seq := uint64(1); seq <= 3; seq++ {
		commit(t, s, Commit{Namespace: "d/r", Create: seq == 1, ExpectedLatest: seq - 1, Content: snap(t, "k", fmt.Sprint(seq))})
	}
	requested := func() bool {
		s.space.mu.Lock()
		defer s.space.mu.Unlock()
		return s.space.requested
	}
	s.compactAll(testCtx(t))
	if requested() {
		t.Errorf("a pass that removed nothing asked for etcd's compaction")
	}
	clock.Advance(24 * time.Hour)
	s.compactAll(testCtx(t))
	if !requested() {
		t.Errorf("a pass that removed 2 versions did not ask for etcd's compaction")
	}
}
