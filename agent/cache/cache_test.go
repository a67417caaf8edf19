package cache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/update"
	"lehr.dev/lehr/proto/lehrpb"
)

func open(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func prop(k, v string) content.Property { return content.Property{Key: k, Value: []byte(v)} }

func snap(t testing.TB, ps ...content.Property) content.Snapshot {
	t.Helper()
	s, err := content.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// meta is what an update states about the version it produces.
type meta struct {
	Version  uint64
	Checksum string
	Kind     lehrpb.NamespaceKind
	Info     *lehrpb.VersionInfo
}

func metaOf(v uint64, s content.Snapshot) meta {
	return meta{Version: v, Checksum: s.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Info: &lehrpb.VersionInfo{Seq: v, Checksum: s.Checksum(), Author: "test", Message: fmt.Sprintf("v%d", v)}}
}

func metaOfVersion(v content.Version) meta {
	return meta{Version: v.Seq, Checksum: v.Checksum, Kind: v.Kind, Info: v.Info}
}

// testUpdate is a snapshot, or a patch against version base.
type testUpdate struct {
	patch   bool
	snap    content.Snapshot
	p       content.Patch
	base    uint64
	baseSum string // "": the checksum the cache holds for base
}

func snapshotU(s content.Snapshot) testUpdate { return testUpdate{snap: s} }

func patchU(base uint64, p content.Patch) testUpdate {
	return testUpdate{patch: true, p: p, base: base}
}

// apply applies u, stating m, as the wire delivers it: an Update whose
// patch base checksum, unless set, is the one the cache holds for base
// (what a distributor that knows the agent's version sends).
func apply(c *Cache, ns string, m meta, u testUpdate) (content.Snapshot, error) {
	w := &lehrpb.Update{Namespace: ns, Kind: m.Kind, Version: m.Version, Checksum: m.Checksum, Info: m.Info}
	if u.patch {
		w.BaseVersion, w.BaseChecksum = u.base, u.baseSum
		if w.BaseChecksum == "" {
			w.BaseChecksum = "sha256:" + strings.Repeat("0", 64)
			list, _ := c.List()
			for _, e := range list {
				if e.Namespace == ns && e.Ref.Seq == u.base {
					w.BaseChecksum = e.Ref.Checksum
				}
			}
		}
		w.Set, w.Delete = content.ToProto(u.p.Set), u.p.Delete
	} else {
		w.Snapshot = true
		w.Set = content.ToProto(u.snap.Props())
	}
	v, err := c.Apply(w)
	return v.Content, err
}

// applySnap applies s as version v and fails the test on error.
func applySnap(t testing.TB, c *Cache, ns string, v uint64, s content.Snapshot) {
	t.Helper()
	got, err := apply(c, ns, metaOf(v, s), snapshotU(s))
	if err != nil {
		t.Fatalf("Apply snapshot %s@%d: %v", ns, v, err)
	}
	if !got.Equal(s) {
		t.Fatalf("Apply snapshot returned %v, want %v", got.Keys(), s.Keys())
	}
}

var cmpOpts = cmp.Options{
	protocmp.Transform(),
	cmp.Comparer(func(a, b content.Snapshot) bool { return a.Equal(b) }),
}

// wantCached checks Get against the expected version and content.
func wantCached(t testing.TB, c *Cache, ns string, v uint64, s content.Snapshot) {
	t.Helper()
	cv, err := c.Get(ns)
	if err != nil {
		t.Fatalf("Get(%s): %v", ns, err)
	}
	got := cv.Content
	if diff := cmp.Diff(metaOf(v, s), metaOfVersion(cv), cmpOpts); diff != "" {
		t.Errorf("Get(%s) meta (-want +got):\n%s", ns, diff)
	}
	if !got.Equal(s) {
		t.Errorf("Get(%s) content = %v, want %v", ns, got.Props(), s.Props())
	}
}

func TestSnapshotThenPatch(t *testing.T) {
	c := open(t, t.TempDir())
	const ns = "pay/rules"
	v1 := snap(t, prop("a", "1"), prop("b", "2"), content.Property{Key: "c/json", ContentType: "application/json", Value: []byte(`{}`)})
	applySnap(t, c, ns, 1, v1)
	wantCached(t, c, ns, 1, v1)

	p := content.Patch{Set: []content.Property{prop("b", "two"), prop("d", "4")}, Delete: []string{"a"}}
	v2, err := v1.Apply(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := apply(c, ns, metaOf(2, v2), patchU(1, p))
	if err != nil {
		t.Fatalf("Apply patch: %v", err)
	}
	if !got.Equal(v2) {
		t.Errorf("Apply patch returned %v, want %v", got.Props(), v2.Props())
	}
	wantCached(t, c, ns, 2, v2)

	// A newer snapshot replaces everything, including keys it does not have.
	v3 := snap(t, prop("z", "only"))
	applySnap(t, c, ns, 3, v3)
	wantCached(t, c, ns, 3, v3)
	// Re-applying the same version is stale: nothing is rewritten.
	if _, err := apply(c, ns, metaOf(3, v3), snapshotU(v3)); !errors.Is(err, update.ErrStale) {
		t.Errorf("re-applying version 3: err = %v, want update.ErrStale", err)
	}
	wantCached(t, c, ns, 3, v3)
	// The old generations are gone from disk.
	if n := countKeys(t, c, nsPropPrefix(ns)); n != 1 {
		t.Errorf("%d property keys stored for %s, want 1", n, ns)
	}

	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Entry{{ns, content.Ref{Seq: 3, Checksum: v3.Checksum()}}}, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	st := c.Stats()
	if st.Snapshots != 2 || st.Patches != 1 {
		t.Errorf("Stats = %+v, want 2 snapshots and 1 patch", st)
	}
}

func countKeys(t testing.TB, c *Cache, prefix []byte) int {
	t.Helper()
	var n int
	err := c.db.View(func(txn *badger.Txn) error {
		keys, err := listKeys(txn, prefix)
		n = len(keys)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRefusedUpdatesChangeNothing(t *testing.T) {
	const ns = "pay/rules"
	v1 := snap(t, prop("a", "1"), prop("b", "2"))
	good := content.Patch{Set: []content.Property{prop("a", "x")}}
	v2, _ := v1.Apply(good)
	wrongSum := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name string
		ns   string
		m    meta
		u    testUpdate
		want error
	}{
		{"patch wrong checksum", ns, meta{Version: 2, Checksum: wrongSum}, patchU(1, good), update.ErrChecksumMismatch},
		{"patch checksum of base", ns, meta{Version: 2, Checksum: v1.Checksum()}, patchU(1, good), update.ErrChecksumMismatch},
		{"snapshot wrong checksum", ns, meta{Version: 2, Checksum: wrongSum}, snapshotU(v2), update.ErrChecksumMismatch},
		{"patch whose base has not arrived", ns, metaOf(3, v2), patchU(2, good), update.ErrGap},
		{"patch on another base checksum", ns, metaOf(2, v2), testUpdate{patch: true, p: good, base: 1, baseSum: wrongSum}, update.ErrBaseMismatch},
		{"snapshot of the cached version", ns, metaOf(1, v1), snapshotU(v1), update.ErrStale},
		{"snapshot older", ns, metaOf(0, v2), snapshotU(v2), update.ErrStale},
		{"patch deletes missing key", ns, metaOf(2, v1), patchU(1, content.Patch{Delete: []string{"nope"}}), update.ErrPatchConflict},
		{"patch bad key", ns, metaOf(2, v1), patchU(1, content.Patch{Set: []content.Property{prop("../x", "")}}), ErrInvalid},
		{"patch unknown namespace", "pay/other", metaOf(2, v2), patchU(1, good), update.ErrGap},
		{"bad namespace", "../../etc", metaOf(2, v2), snapshotU(v2), ErrInvalid},
		{"malformed checksum", ns, meta{Version: 2, Checksum: "md5:1"}, snapshotU(v2), ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := open(t, t.TempDir())
			applySnap(t, c, ns, 1, v1)
			_, err := apply(c, tt.ns, tt.m, tt.u)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply: err = %v, want %v", err, tt.want)
			}
			wantCached(t, c, ns, 1, v1)
			if n := countKeys(t, c, []byte(propPrefix)); n != 2 {
				t.Errorf("%d property keys stored after a refused update, want 2", n)
			}
		})
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	v1 := snap(t, prop("a", "1"), content.Property{Key: "big", Value: bytes.Repeat([]byte("v"), 8<<10)})
	applySnap(t, c, "a/one", 4, v1)
	p := content.Patch{Set: []content.Property{prop("b", "2")}}
	v2, _ := v1.Apply(p)
	if _, err := apply(c, "a/one", metaOf(5, v2), patchU(4, p)); err != nil {
		t.Fatal(err)
	}
	applySnap(t, c, "b/two", 1, snap(t))
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := c.Get("a/one"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: err = %v, want ErrClosed", err)
	}

	c = open(t, dir)
	wantCached(t, c, "a/one", 5, v2)
	wantCached(t, c, "b/two", 1, snap(t))
	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{"a/one", content.Ref{Seq: 5, Checksum: v2.Checksum()}}, {"b/two", content.Ref{Seq: 1, Checksum: snap(t).Checksum()}}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List after reopen (-want +got):\n%s", diff)
	}
}

// randomSnap returns n properties of size bytes of random data.
func randomSnap(t testing.TB, rng *rand.Rand, n, size int) content.Snapshot {
	ps := make([]content.Property, n)
	for i := range ps {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		ps[i] = content.Property{Key: fmt.Sprintf("blob/%04d", i), ContentType: "application/octet-stream", Value: v}
	}
	return snap(t, ps...)
}

// TestPatchOfLargeNamespaceWritesLittle asserts, with Badger's own commit
// timestamps, that a one-key patch of a 6 MiB namespace writes two small
// entries (the property and the meta).
func TestPatchOfLargeNamespaceWritesLittle(t *testing.T) {
	c := open(t, t.TempDir())
	rng := rand.New(rand.NewPCG(3, 4))
	const ns = "big/ns"
	v1 := randomSnap(t, rng, 96, 64<<10) // 6 MiB
	if v1.Size() < 5<<20 {
		t.Fatalf("namespace is %d bytes, want at least 5 MiB", v1.Size())
	}
	applySnap(t, c, ns, 1, v1)

	rt := c.db.NewTransaction(false)
	before := rt.ReadTs()
	rt.Discard()
	statsBefore := c.Stats()

	p := content.Patch{Set: []content.Property{prop("blob/0042", "small now")}}
	v2, _ := v1.Apply(p)
	if _, err := apply(c, ns, metaOf(2, v2), patchU(1, p)); err != nil {
		t.Fatal(err)
	}

	var entries int
	var size int64
	var written []string
	err := c.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.AllVersions = true
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if item.Version() > before {
				entries++
				size += int64(len(item.Key())) + int64(item.ValueSize())
				written = append(written, string(item.Key()))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("patch wrote %d entries, %d bytes: %q", entries, size, written)
	if entries != 2 || size > 1024 {
		t.Errorf("one-key patch of a %d-byte namespace wrote %d entries, %d bytes; want 2 entries under 1 KiB",
			v1.Size(), entries, size)
	}
	st := c.Stats()
	if keys := st.KeysWritten - statsBefore.KeysWritten; keys != 2 {
		t.Errorf("Stats: patch wrote %d keys, want 2", keys)
	}
	if b := st.BytesWritten - statsBefore.BytesWritten; b > 1024 {
		t.Errorf("Stats: patch wrote %d bytes, want under 1 KiB", b)
	}
	wantCached(t, c, ns, 2, v2)
	sz, err := c.Size()
	if err != nil || sz < 5<<20 {
		t.Errorf("Size = %d, %v; want at least the 5 MiB stored", sz, err)
	}
}

// TestStagedSnapshot applies snapshots too large for one Badger
// transaction: they take the staged path and stay atomic and verifiable.
func TestStagedSnapshot(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	const ns = "many/keys"
	mk := func(n int, tag string) content.Snapshot {
		ps := make([]content.Property, n)
		for i := range ps {
			ps[i] = prop(fmt.Sprintf("k/%05d", i), tag+strings.Repeat("x", 100))
		}
		return snap(t, ps...)
	}
	v1 := mk(12000, "one")
	applySnap(t, c, ns, 1, v1)
	if st := c.Stats(); st.Staged != 1 {
		t.Fatalf("Stats.Staged = %d after a 12000-key snapshot, want 1 (did it fit one transaction?)", st.Staged)
	}
	wantCached(t, c, ns, 1, v1)

	v2 := mk(11000, "two")
	applySnap(t, c, ns, 2, v2)
	wantCached(t, c, ns, 2, v2)
	if n := countKeys(t, c, nsPropPrefix(ns)); n != 11000 {
		t.Errorf("%d property keys after replacing a staged snapshot, want 11000", n)
	}
	// A patch on top uses the generation the staged write created.
	p := content.Patch{Delete: []string{"k/00000"}, Set: []content.Property{prop("k/new", "n")}}
	v3, _ := v2.Apply(p)
	if _, err := apply(c, ns, metaOf(3, v3), patchU(2, p)); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, ns, 3, v3)
	if st := c.Stats(); st.Staged != 2 {
		t.Errorf("Stats.Staged = %d, want 2", st.Staged)
	}
}

// TestSweepAfterCrash simulates a crash in the middle of a staged update
// (a generation written but the meta not flipped) and of a drop (properties
// without meta): the cached version stays readable and Open removes the
// leftovers; the next snapshot reuses the generation cleanly.
func TestSweepAfterCrash(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "crash/ns"
	v1 := snap(t, prop("a", "1"), prop("b", "2"))
	applySnap(t, c, ns, 1, v1)
	err = c.db.Update(func(txn *badger.Txn) error {
		// Half of generation 2 of ns, staged before a crash.
		for _, p := range []content.Property{prop("a", "new"), prop("stale", "x")} {
			if err := txn.Set(propKey(ns, 2, p.Key), encodeValue(p)); err != nil {
				return err
			}
		}
		// Properties of a dropped namespace.
		return txn.Set(propKey("gone/ns", 1, "k"), encodeValue(prop("k", "v")))
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, ns, 1, v1) // invisible before the sweep, too
	c.Close()

	c = open(t, dir)
	if n := countKeys(t, c, []byte(propPrefix)); n != 2 {
		t.Errorf("%d property keys after sweep, want the 2 of version 1", n)
	}
	wantCached(t, c, ns, 1, v1)
	v2 := snap(t, prop("a", "2"))
	applySnap(t, c, ns, 2, v2)
	wantCached(t, c, ns, 2, v2)
}

// TestBitRot damages stored data directly through Badger: reads report
// ErrCorrupt (never wrong content), patches refuse the damaged base, and a
// drop plus a snapshot repair it.
func TestBitRot(t *testing.T) {
	c := open(t, t.TempDir())
	const ns = "rot/ns"
	v1 := snap(t, prop("a", "1"), content.Property{Key: "big", Value: bytes.Repeat([]byte("v"), 4<<10)})
	applySnap(t, c, ns, 1, v1)
	rec := func() record {
		var r record
		if err := c.db.View(func(txn *badger.Txn) error { var err error; r, err = getRecord(txn, ns); return err }); err != nil {
			t.Fatal(err)
		}
		return r
	}()
	corruptWith := func(k, v []byte) {
		t.Helper()
		if err := c.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) }); err != nil {
			t.Fatal(err)
		}
	}

	damaged := bytes.Repeat([]byte("v"), 4<<10)
	damaged[100] = 'w'
	corruptWith(propKey(ns, rec.gen, "big"), encodeValue(content.Property{Value: damaged}))
	if _, err := c.Get(ns); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get after bit rot: err = %v, want ErrCorrupt", err)
	}
	p := content.Patch{Set: []content.Property{prop("a", "2")}}
	v2, _ := v1.Apply(p)
	if _, err := apply(c, ns, metaOf(2, v2), patchU(1, p)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("patch on a corrupt base: err = %v, want ErrCorrupt", err)
	}
	if err := c.Drop(ns); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ns); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Drop: err = %v, want ErrNotFound", err)
	}
	applySnap(t, c, ns, 2, v2)
	wantCached(t, c, ns, 2, v2)

	// An extra key that no update wrote (count mismatch), then an
	// undecodable value, then a damaged meta record.
	rec = record{gen: 1}
	if err := c.db.View(func(txn *badger.Txn) error { var err error; rec, err = getRecord(txn, ns); return err }); err != nil {
		t.Fatal(err)
	}
	corruptWith(propKey(ns, rec.gen, "extra"), encodeValue(prop("extra", "")))
	if _, err := c.Get(ns); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get with an extra key: err = %v, want ErrCorrupt", err)
	}
	// The agent drops a corrupt namespace and fetches a snapshot of it.
	if err := c.Drop(ns); err != nil {
		t.Fatal(err)
	}
	applySnap(t, c, ns, 2, v2)
	wantCached(t, c, ns, 2, v2)

	corruptWith(metaKey(ns), []byte{recordFormat, 0xff})
	if _, err := c.Get(ns); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get with a damaged meta: err = %v, want ErrCorrupt", err)
	}
	list, err := c.List()
	if err != nil || len(list) != 0 {
		t.Errorf("List with a damaged meta = %v, %v; want no entries", list, err)
	}
	v3 := snap(t, prop("fresh", "1"))
	applySnap(t, c, ns, 3, v3)
	wantCached(t, c, ns, 3, v3)
	if n := countKeys(t, c, nsPropPrefix(ns)); n != 1 {
		t.Errorf("%d property keys after repairing a damaged meta, want 1", n)
	}
	if st := c.Stats(); st.Corruptions < 4 {
		t.Errorf("Stats.Corruptions = %d, want at least 4", st.Corruptions)
	}
}

func TestList100(t *testing.T) {
	c := open(t, t.TempDir())
	var want []Entry
	for i := range 100 {
		ns := fmt.Sprintf("d%d/ns-%03d", i%7, i)
		s := snap(t, prop("k", fmt.Sprint(i)))
		applySnap(t, c, ns, uint64(i+1), s)
		want = append(want, Entry{ns, content.Ref{Seq: uint64(i + 1), Checksum: s.Checksum()}})
	}
	// Namespaces whose names share prefixes must not leak into each other.
	applySnap(t, c, "d0/ns-000.x", 9, snap(t))
	want = append(want, Entry{"d0/ns-000.x", content.Ref{Seq: 9, Checksum: snap(t).Checksum()}})
	if err := c.Drop("d1/ns-001"); err != nil {
		t.Fatal(err)
	}
	want = slicesDelete(want, "d1/ns-001")

	got, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	sortEntries(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	wantCached(t, c, "d0/ns-000", 1, snap(t, prop("k", "0")))
}

func slicesDelete(es []Entry, ns string) []Entry {
	out := es[:0]
	for _, e := range es {
		if e.Namespace != ns {
			out = append(out, e)
		}
	}
	return out
}

func sortEntries(es []Entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Namespace < es[j-1].Namespace; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

func TestConcurrentApply(t *testing.T) {
	c := open(t, t.TempDir())
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	finals := make([]content.Snapshot, workers)
	for w := range workers {
		wg.Go(func() {
			ns := fmt.Sprintf("w%d/ns", w)
			cur := snap(t, prop("base", fmt.Sprint(w)))
			if _, err := apply(c, ns, metaOf(1, cur), snapshotU(cur)); err != nil {
				t.Errorf("%s: %v", ns, err)
				return
			}
			for r := 2; r <= rounds; r++ {
				p := content.Patch{Set: []content.Property{prop(fmt.Sprintf("k%d", r%5), fmt.Sprintf("%d-%d", w, r))}}
				next, err := cur.Apply(p)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := apply(c, ns, metaOf(uint64(r), next), patchU(uint64(r-1), p)); err != nil {
					t.Errorf("%s round %d: %v", ns, r, err)
					return
				}
				cur = next
				if _, err := c.Get(ns); err != nil {
					t.Errorf("%s: Get: %v", ns, err)
				}
				if _, err := c.List(); err != nil {
					t.Errorf("List: %v", err)
				}
			}
			finals[w] = cur
		})
	}
	// Concurrent patches of one namespace: serialised, exactly one wins per base.
	shared := snap(t, prop("s", "0"))
	applySnap(t, c, "shared/ns", 1, shared)
	var wins sync.WaitGroup
	results := make([]error, 4)
	for i := range results {
		wins.Go(func() {
			p := content.Patch{Set: []content.Property{prop("s", fmt.Sprint(i+1))}}
			next, _ := shared.Apply(p)
			_, results[i] = apply(c, "shared/ns", metaOf(2, next), patchU(1, p))
		})
	}
	wg.Wait()
	wins.Wait()
	ok := 0
	for _, err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, update.ErrBaseMismatch):
			t.Errorf("concurrent patch of one namespace: err = %v, want nil or ErrBaseMismatch", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of 4 concurrent patches on the same base succeeded, want exactly 1", ok)
	}
	for w := range workers {
		if finals[w].Len() > 0 {
			wantCached(t, c, fmt.Sprintf("w%d/ns", w), rounds, finals[w])
		}
	}
}

// TestIdleFootprint logs the memory an open, idle cache costs, measured in
// a fresh child process so other tests do not blur it. It is a figure for
// the docs and for regressions noticed by eye, not an assertion.
func TestIdleFootprint(t *testing.T) {
	if os.Getenv("LEHR_CACHE_FOOTPRINT_CHILD") == "1" {
		footprintChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleFootprint$", "-test.v")
	cmd.Env = append(os.Environ(), "LEHR_CACHE_FOOTPRINT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "footprint:") {
			t.Log(strings.TrimSpace(l[strings.Index(l, "footprint:"):]))
		}
	}
}

func footprintChild(t *testing.T) {
	rss := func() float64 {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return -1
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
				return kb / 1024
			}
		}
		return -1
	}
	heap := func() float64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc) / (1 << 20)
	}
	h0, r0 := heap(), rss()
	c := open(t, t.TempDir())
	for i := range 20 {
		applySnap(t, c, fmt.Sprintf("d/ns-%d", i), 1, snap(t, prop("k", strings.Repeat("v", 2048))))
	}
	h1, r1 := heap(), rss()
	t.Logf("footprint: idle cache with 20 small namespaces: Go heap %+.1f MiB (%.1f -> %.1f), process RSS %+.1f MiB (%.1f -> %.1f)",
		h1-h0, h0, h1, r1-r0, r0, r1)
}

// TestSizeOfEmptyCache: Size counts the space the cache uses, not the
// apparent sizes of Badger's sparsely preallocated files (over 100 MiB).
func TestSizeOfEmptyCache(t *testing.T) {
	c := open(t, t.TempDir())
	sz, err := c.Size()
	if err != nil {
		t.Fatalf("Size: %v", err)
	}
	if sz > 16<<20 {
		t.Errorf("Size of an empty cache = %d bytes, want under 16 MiB (allocated space, not apparent size)", sz)
	}
}

// A snapshot of the cached version with another checksum is a repair
// (e.g. control's store was restored from a backup and version 2 is other
// content now): it replaces the cached copy, where an equal one is stale.
func TestSameVersionOtherChecksumIsARepair(t *testing.T) {
	c := open(t, t.TempDir())
	const ns = "pay/rules"
	mine := snap(t, prop("a", "mine"))
	theirs := snap(t, prop("a", "control's"))
	applySnap(t, c, ns, 2, mine)
	applySnap(t, c, ns, 2, theirs)
	wantCached(t, c, ns, 2, theirs)
	if n := countKeys(t, c, nsPropPrefix(ns)); n != 1 {
		t.Errorf("%d property keys stored for %s after the repair, want 1", n, ns)
	}
	// A patch cannot repair: it is refused and changes nothing.
	if _, err := apply(c, ns, metaOf(2, mine), patchU(1, content.Patch{})); !errors.Is(err, update.ErrBaseMismatch) {
		t.Errorf("patch to the cached version with another checksum: err = %v, want update.ErrBaseMismatch", err)
	}
	wantCached(t, c, ns, 2, theirs)
}

// Open tells a damaged database (which the agent moves aside) from one in
// use by another process (which it must not touch): a table whose bytes
// were flipped makes Badger panic while reading it, a manifest fails its
// checksum; both are ErrDamaged, and a second Open of a live cache is
// ErrInUse (issue 8, defect 11).
func TestOpenClassifiesFailures(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	applySnap(t, c, "d/n", 1, snap(t, prop("a", strings.Repeat("x", 3000)), prop("b", "1")))
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrInUse) {
		t.Errorf("second Open of a live cache = %v, want ErrInUse", err)
	}
	c.Close()
	for _, name := range []string{"MANIFEST", "000001.sst"} {
		d := t.TempDir()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == name {
				for i := 20; i < len(b) && i < 400; i++ {
					b[i] ^= 0xff
				}
			}
			if err := os.WriteFile(filepath.Join(d, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c, err := Open(Options{Dir: d})
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("Open with a damaged %s = %v, want ErrDamaged", name, err)
		}
		moved, err := Quarantine(d, time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
		if err != nil || !strings.HasSuffix(moved, ".damaged-20261123T100000Z") {
			t.Errorf("Quarantine = %q, %v", moved, err)
		}
		if c, err := Open(Options{Dir: d}); err != nil {
			t.Errorf("Open after Quarantine: %v", err)
		} else {
			c.Close()
		}
	}
}
