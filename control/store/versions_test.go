package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestCommitRoundTrip(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now})
	ctx := testCtx(t)
	mustDomain(t, s, "payments")

	v1 := snap(t, "a", "1", "b/c", `{"x":2}`)
	info := commit(t, s, Commit{
		Namespace: "payments/rules", Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Content: v1,
		Info:    &lehrpb.VersionInfo{Author: "alice", Message: "first", Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, TransportIdentity: "127.0.0.1"},
	})
	want := &lehrpb.VersionInfo{
		Namespace: "payments/rules", Seq: 1, Checksum: v1.Checksum(), Author: "alice", Message: "first",
		CreateTime: info.GetCreateTime(), Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT,
		SizeBytes: v1.Size(), PropertyCount: 2, TransportIdentity: "127.0.0.1",
	}
	if diff := cmp.Diff(want, info, protocmp.Transform()); diff != "" {
		t.Errorf("Commit info mismatch (-want +got):\n%s", diff)
	}
	if got := info.GetCreateTime().AsTime(); !got.Equal(clock.Now()) {
		t.Errorf("create_time = %v, want the injected clock's %v", got, clock.Now())
	}
	readBack(t, s, "payments/rules", 1, v1)
	readBack(t, s, "payments/rules", 0, v1)

	v2 := snap(t, "a", "1", "b/c", `{"x":3}`, "d", "")
	info2 := commit(t, s, Commit{Namespace: "payments/rules", ExpectedLatest: 1, Content: v2})
	if info2.GetSeq() != 2 || info2.GetParent() != 1 {
		t.Errorf("second commit: seq %d parent %d, want 2 and 1", info2.GetSeq(), info2.GetParent())
	}
	readBack(t, s, "payments/rules", 0, v2)
	readBack(t, s, "payments/rules", 1, v1)

	head, err := s.GetNamespace(ctx, "payments/rules")
	if err != nil {
		t.Fatalf("GetNamespace: %v", err)
	}
	if head.GetLatestVersion() != 2 || head.GetLatestChecksum() != v2.Checksum() || head.GetOldestVersion() != 1 ||
		head.GetPropertyCount() != 3 || head.GetSizeBytes() != v2.Size() || head.GetKind() != lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG {
		t.Errorf("head = %v, want latest 2, checksum of v2, oldest 1, 3 properties, size %d, kind config", head, v2.Size())
	}
	got, err := s.Version(ctx, "payments/rules", 1)
	if err != nil {
		t.Fatalf("Version(1): %v", err)
	}
	if diff := cmp.Diff(info, got, protocmp.Transform()); diff != "" {
		t.Errorf("Version(1) mismatch (-want +got):\n%s", diff)
	}

	// Empty content is a version too.
	empty := commit(t, s, Commit{Namespace: "payments/rules", ExpectedLatest: 2, Content: content.Snapshot{}})
	readBack(t, s, "payments/rules", empty.GetSeq(), content.Snapshot{})

	// History, newest first, paged with before.
	hist, err := s.History(ctx, "payments/rules", 0, 2)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if got := seqs(hist); !cmp.Equal(got, []uint64{3, 2}) {
		t.Errorf("History(before 0, limit 2) = %v, want [3 2]", got)
	}
	hist, err = s.History(ctx, "payments/rules", 2, 10)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if got := seqs(hist); !cmp.Equal(got, []uint64{1}) {
		t.Errorf("History(before 2) = %v, want [1]", got)
	}
}

func seqs(vs []*lehrpb.VersionInfo) []uint64 {
	var out []uint64
	for _, v := range vs {
		out = append(out, v.GetSeq())
	}
	return out
}

func TestCommitErrors(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	commit(t, s, Commit{Namespace: "d/ns", Create: true, Content: snap(t, "k", "v")})

	tests := []struct {
		name  string
		c     Commit
		check func(error) bool
	}{
		{"namespace missing without Create", Commit{Namespace: "d/other", Content: snap(t)}, func(err error) bool {
			var nf *NotFoundError
			return errors.As(err, &nf) && nf.What == "namespace" && nf.Name == "d/other"
		}},
		{"domain missing", Commit{Namespace: "nodomain/x", Create: true, Content: snap(t)}, func(err error) bool {
			var nf *NotFoundError
			return errors.As(err, &nf) && nf.What == "domain" && nf.Name == "nodomain"
		}},
		{"stale expected", Commit{Namespace: "d/ns", ExpectedLatest: 0, Content: snap(t)}, func(err error) bool {
			var ce *ConflictError
			return errors.Is(err, ErrConflict) && errors.As(err, &ce) && ce.Current == 1 && ce.Expected == 0 && ce.Namespace == "d/ns"
		}},
		{"future expected", Commit{Namespace: "d/ns", ExpectedLatest: 7, Content: snap(t)}, func(err error) bool {
			var ce *ConflictError
			return errors.As(err, &ce) && ce.Current == 1 && ce.Expected == 7
		}},
		{"bad namespace name", Commit{Namespace: "d/../x", Content: snap(t)}, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"value too large", Commit{Namespace: "d/ns", ExpectedLatest: 1, Content: randomSnap(t, 1, MaxBlobBytes+1)}, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"bad goal policy", Commit{Namespace: "d/ns", ExpectedLatest: 1, Goals: 9}, func(err error) bool { return errors.Is(err, ErrInvalid) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Commit(ctx, tc.c)
			if err == nil || !tc.check(err) {
				t.Fatalf("Commit: got error %v, want a different one", err)
			}
		})
	}
	// None of them changed anything.
	head, err := s.GetNamespace(ctx, "d/ns")
	if err != nil || head.GetLatestVersion() != 1 {
		t.Errorf("after failed commits: head %v, err %v; want latest 1", head, err)
	}
	if _, err := s.GetNamespace(ctx, "d/other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetNamespace(d/other) = %v, want ErrNotFound", err)
	}
}

func TestPatchStoresOnlyChangedBlobs(t *testing.T) {
	s := newTestStore(t, Options{})
	mustDomain(t, s, "d")
	const ns = "d/patchy"
	var kv []string
	for i := range 300 {
		kv = append(kv, fmt.Sprintf("key/%03d", i), fmt.Sprintf("value %d", i))
	}
	v1 := snap(t, kv...)
	commit(t, s, Commit{Namespace: ns, Create: true, Content: v1})
	m, err := buildManifest(v1)
	if err != nil {
		t.Fatalf("buildManifest: %v", err)
	}
	if len(m.chunkHashes) < 2 {
		t.Fatalf("manifest of 300 keys has %d chunks; the test wants several", len(m.chunkHashes))
	}
	after1 := countBlobs(t, s, ns)
	if want := 300 + len(m.chunkHashes); after1 != want {
		t.Fatalf("after v1: %d blobs, want %d (300 values + %d chunks)", after1, want, len(m.chunkHashes))
	}

	kv[2*150+1] = "changed"
	v2 := snap(t, kv...)
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: v2})
	if got := countBlobs(t, s, ns) - after1; got != 2 {
		t.Errorf("patch of one value added %d blobs, want 2 (the value and its manifest chunk)", got)
	}
	readBack(t, s, ns, 2, v2)
	readBack(t, s, ns, 1, v1)

	// Adding a key rewrites one chunk too, not all chunks after it.
	before := countBlobs(t, s, ns)
	v3 := snap(t, append(kv, "key/100a", "inserted")...)
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 2, Content: v3})
	if got := countBlobs(t, s, ns) - before; got != 2 {
		t.Errorf("inserting one key added %d blobs, want 2", got)
	}
	readBack(t, s, ns, 3, v3)
}

func TestLargeContentIsChunked(t *testing.T) {
	s := newTestStore(t, Options{})
	mustDomain(t, s, "big")
	// 31 × 400 KiB > 12 MiB, against etcd's default 1.5 MiB request limit.
	v1 := randomSnap(t, 31, 400<<10)
	if v1.Size() < 12<<20 {
		t.Fatalf("content is %d bytes, want >= 12 MiB", v1.Size())
	}
	rounds := 0
	s.opts.OnRoundTrip = func(op string, d time.Duration, err error) { rounds++ }
	info := commit(t, s, Commit{Namespace: "big/blob", Create: true, Content: v1})
	if rounds < 10 {
		t.Errorf("12 MiB commit took %d etcd requests; want it split into many", rounds)
	}
	s.opts.OnRoundTrip = nil
	if info.GetChecksum() != v1.Checksum() || info.GetSizeBytes() != v1.Size() {
		t.Errorf("info checksum %s size %d, want %s %d", info.GetChecksum(), info.GetSizeBytes(), v1.Checksum(), v1.Size())
	}
	readBack(t, s, "big/blob", 1, v1)

	// A patch to one large value.
	props := append([]content.Property(nil), v1.Props()...)
	props[7].Value = append([]byte("new"), props[7].Value[3:]...)
	v2, err := content.New(props)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, Commit{Namespace: "big/blob", ExpectedLatest: 1, Content: v2})
	readBack(t, s, "big/blob", 2, v2)
}

func TestConcurrentCommitsOneWins(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	commit(t, s, Commit{Namespace: "d/race", Create: true, Content: snap(t, "k", "base")})
	for round := range 5 {
		base := uint64(round + 1)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		infos := make([]*lehrpb.VersionInfo, 2)
		for i := range 2 {
			wg.Go(func() {
				infos[i], errs[i] = s.Commit(ctx, Commit{
					Namespace: "d/race", ExpectedLatest: base,
					Content: snap(t, "k", fmt.Sprintf("writer %d round %d", i, round)),
				})
			})
		}
		wg.Wait()
		wins := 0
		for i := range 2 {
			var ce *ConflictError
			switch {
			case errs[i] == nil:
				wins++
				if infos[i].GetSeq() != base+1 {
					t.Errorf("round %d: winner got seq %d, want %d", round, infos[i].GetSeq(), base+1)
				}
			case errors.As(errs[i], &ce):
				if ce.Current != base+1 {
					t.Errorf("round %d: loser's conflict says current %d, want %d", round, ce.Current, base+1)
				}
			default:
				t.Fatalf("round %d: writer %d: %v", round, i, errs[i])
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, wins)
		}
	}
}

func TestIdempotentRequestID(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	c := Commit{Namespace: "d/idem", Create: true, Content: snap(t, "k", "v"), RequestID: "req-1"}
	first := commit(t, s, c)
	// A retry (same request id, same stated base) returns the same version.
	again := commit(t, s, c)
	if diff := cmp.Diff(first, again, protocmp.Transform()); diff != "" {
		t.Errorf("replay returned a different version (-first +replay):\n%s", diff)
	}
	head, err := s.GetNamespace(ctx, "d/idem")
	if err != nil || head.GetLatestVersion() != 1 {
		t.Fatalf("after replay: head %v, err %v; want latest 1", head, err)
	}
	// A different request id with the stale base is a conflict.
	c.RequestID = "req-2"
	if _, err := s.Commit(ctx, c); !errors.Is(err, ErrConflict) {
		t.Errorf("new request id on a stale base: %v, want ErrConflict", err)
	}
	// Once another version is on top, a replay still gets its own answer:
	// the version it committed (issue 8, defect 3).
	commit(t, s, Commit{Namespace: "d/idem", ExpectedLatest: 1, Content: snap(t, "k", "v2"), RequestID: "req-3"})
	c.RequestID = "req-1"
	replay := commit(t, s, c)
	if diff := cmp.Diff(first, replay, protocmp.Transform()); diff != "" {
		t.Errorf("replay of an overtaken request (-first +replay):\n%s", diff)
	}
}

// A producer whose publish committed but whose response was lost retries
// after another producer published on top. The retry answers its own
// version and commits nothing: before, it committed a third version with
// its content, silently reverting the other producer's acknowledged change
// everywhere; a patch retried the same way answered STALE_VERSION although
// it had committed (issue 8, defect 3).
func TestRetryAfterAnotherPublishIsAnsweredWithItsOwnVersion(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	const ns = "d/race"
	a := Commit{Namespace: ns, Create: true, Rebase: true, Content: snap(t, "k", "from A"), RequestID: "producer-a-1"}
	aInfo := commit(t, s, a) // committed; pretend A never saw the answer
	bInfo := commit(t, s, Commit{Namespace: ns, Rebase: true, Content: snap(t, "k", "from B"), RequestID: "producer-b-1"})

	retry := commit(t, s, a)
	if diff := cmp.Diff(aInfo, retry, protocmp.Transform()); diff != "" {
		t.Errorf("A's retry (-A's commit +retry):\n%s", diff)
	}
	head, err := s.GetNamespace(ctx, ns)
	if err != nil || head.GetLatestVersion() != bInfo.GetSeq() {
		t.Fatalf("after A's retry: head %v, err %v; want B's version %d still latest", head, err, bInfo.GetSeq())
	}
	readBack(t, s, ns, 0, snap(t, "k", "from B"))

	// The same for a patch on a stated base.
	p := Commit{Namespace: ns, ExpectedLatest: bInfo.GetSeq(), Content: snap(t, "k", "patched by A"), RequestID: "producer-a-2"}
	pInfo := commit(t, s, p)
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: pInfo.GetSeq(), Content: snap(t, "k", "B again"), RequestID: "producer-b-2"})
	pRetry, err := s.Commit(ctx, p)
	if err != nil {
		t.Fatalf("patch retry: %v; want its own version %d", err, pInfo.GetSeq())
	}
	if pRetry.GetSeq() != pInfo.GetSeq() {
		t.Errorf("patch retry answered version %d, want %d", pRetry.GetSeq(), pInfo.GetSeq())
	}

	// The records expire on their own: each is attached to a lease of
	// Retention.Requests plus at most the ten-minute bucket.
	resp, err := s.cli.Get(ctx, s.lay.request(ns, "producer-a-1"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("request record = %v, %v; want one key attached to a lease", resp, err)
	}
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if want := DefaultRequestRetention + requestBucket; err != nil || time.Duration(ttl.TTL)*time.Second > want || time.Duration(ttl.TTL)*time.Second < DefaultRequestRetention {
		t.Errorf("request lease TTL = %v s, %v; want between %v and %v", ttl.TTL, err, DefaultRequestRetention, want)
	}
}

func TestCorruptBlobIsDetected(t *testing.T) {
	// Without the content cache: what is read is etcd's copy (a store that
	// committed or read the version serves it from memory, as committed).
	s := newTestStore(t, Options{ContentCacheBytes: -1})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	v := snap(t, "a", "apple", "b", "banana")
	commit(t, s, Commit{Namespace: "d/rot", Create: true, Content: v})
	key := s.lay.blob("d/rot", blobHash([]byte("banana")))
	if _, err := s.cli.Put(ctx, key, "bananb"); err != nil {
		t.Fatalf("corrupt %s: %v", key, err)
	}
	if _, _, err := s.Content(ctx, "d/rot", 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Content after corrupting a value: %v, want ErrCorrupt", err)
	}
	if _, err := s.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Content(ctx, "d/rot", 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Content after deleting a value: %v, want ErrCorrupt", err)
	}

	// A record whose checksum does not match its (intact) blobs.
	commit(t, s, Commit{Namespace: "d/rot2", Create: true, Content: v})
	vkey := s.lay.version("d/rot2", 1)
	resp, err := s.cli.Get(ctx, vkey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get record: %v", err)
	}
	rec := new(lehrpb.VersionRecord)
	if err := decode(vkey, resp.Kvs[0].Value, rec); err != nil {
		t.Fatal(err)
	}
	rec.Info.Checksum = snap(t, "a", "other").Checksum()
	b, _ := encode(rec)
	if _, err := s.cli.Put(ctx, vkey, string(b)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Content(ctx, "d/rot2", 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Content with a wrong recorded checksum: %v, want ErrCorrupt", err)
	}
}

func TestVersionNotFound(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: "d/empty"}); err != nil {
		t.Fatal(err)
	}
	var nf *NotFoundError
	if _, _, err := s.Content(ctx, "d/empty", 0); !errors.As(err, &nf) || nf.What != "version" {
		t.Errorf("Content(latest) of an empty namespace: %v, want version not found", err)
	}
	if _, err := s.Version(ctx, "d/empty", 3); !errors.As(err, &nf) || nf.What != "version" || nf.Oldest != 0 {
		t.Errorf("Version(3): %v, want version not found without oldest", err)
	}
	if _, err := s.Version(ctx, "d/missing", 1); !errors.As(err, &nf) || nf.What != "namespace" {
		t.Errorf("Version of a missing namespace: %v, want namespace not found", err)
	}
	if _, err := s.History(ctx, "d/missing", 0, 10); !errors.As(err, &nf) || nf.What != "namespace" {
		t.Errorf("History of a missing namespace: %v, want namespace not found", err)
	}
	if h, err := s.History(ctx, "d/empty", 0, 10); err != nil || len(h) != 0 {
		t.Errorf("History of an empty namespace: %v, %v; want none", h, err)
	}
}

func TestOnRoundTripAndUnavailable(t *testing.T) {
	var mu sync.Mutex
	ops := map[string]int{}
	s := newTestStore(t, Options{OnRoundTrip: func(op string, d time.Duration, err error) {
		mu.Lock()
		ops[op]++
		mu.Unlock()
	}})
	mustDomain(t, s, "d")
	if _, err := s.GetDomain(testCtx(t), "d"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if ops["txn"] == 0 || ops["get"] == 0 {
		t.Errorf("OnRoundTrip saw %v, want txn and get calls", ops)
	}
	mu.Unlock()

	// An endpoint nobody listens on.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dead := New(cli, Options{Prefix: testPrefix(t), Logger: quietLogger()})
	ctx, cancel := testCtxTimeout(t, 500*time.Millisecond)
	defer cancel()
	_, err = dead.GetDomain(ctx, "d")
	if err == nil || !IsUnavailable(err) {
		t.Errorf("GetDomain against a dead endpoint: %v; IsUnavailable = false, want true", err)
	}
	for _, err := range []error{ErrConflict, &NotFoundError{What: "zone"}, ErrCorrupt, nil} {
		if IsUnavailable(err) {
			t.Errorf("IsUnavailable(%v) = true, want false", err)
		}
	}
}
