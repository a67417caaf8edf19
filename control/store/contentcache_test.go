package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Content of a version this store committed (or read before) comes from
// memory after one read of its record; without the cache the manifest and
// blobs are read too. Either way the content is the same.
func TestContentCache(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bytes    int64
		maxReads int64
	}{
		{"cached", 0, 1},
		{"no cache", -1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int64
			s := newTestStore(t, Options{ContentCacheBytes: tc.bytes, OnRoundTrip: func(op string, _ time.Duration, _ error) {
				if op == "get" || op == "txn" {
					reads.Add(1)
				}
			}})
			ctx := testCtx(t)
			mustDomain(t, s, "d")
			want := snap(t, "a", "1", "b", "2")
			v := commit(t, s, Commit{Namespace: "d/x", Create: true, Content: want})
			reads.Store(0)
			info, got, err := s.Content(ctx, "d/x", v.GetSeq())
			if err != nil || info.GetChecksum() != want.Checksum() || got.Checksum() != want.Checksum() {
				t.Fatalf("Content = %v, %v, %v; want version 1 with checksum %s", info, got.Checksum(), err, want.Checksum())
			}
			n := reads.Load()
			if tc.bytes >= 0 && n > tc.maxReads {
				t.Errorf("%d etcd reads for a committed version's content; want at most %d (its record)", n, tc.maxReads)
			}
			if tc.bytes < 0 && n < 2 {
				t.Errorf("%d etcd reads without the cache; the manifest and blobs were not read", n)
			}

			// CachedContent reads nothing when the content is in memory,
			// and never a blob.
			reads.Store(0)
			cinfo, csnap, ok := s.CachedContent(ctx, "d/x", content.Ref{Seq: v.GetSeq(), Checksum: v.GetChecksum()})
			if n := reads.Load(); ok != (tc.bytes >= 0) || ok && (n != 0 || !proto.Equal(cinfo, v) || csnap.Checksum() != want.Checksum()) {
				t.Errorf("CachedContent = %v, %v, %v after %d etcd reads; want the committed version (and no read) only with the cache", cinfo, csnap.Checksum(), ok, n)
			}
			if _, _, ok := s.CachedContent(ctx, "d/x", content.Ref{Seq: v.GetSeq(), Checksum: snap(t, "a", "other").Checksum()}); ok {
				t.Error("CachedContent with another checksum than the version's: ok")
			}
			if n := reads.Load(); n > 2 {
				t.Errorf("CachedContent read etcd %d times; want at most one record read per miss", n)
			}
		})
	}
}

// A small change is one durable etcd write — its blobs go in the version's
// own transaction; a large one stages its blobs first. Each write
// transaction is one etcd revision.
func TestSmallCommitIsOneTransaction(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	revision := func() int64 {
		resp, err := s.cli.Get(ctx, "rev-probe")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	big := make([]byte, maxInlineBytes)
	for _, tc := range []struct {
		name  string
		value string
		want  int64
	}{
		{"small", "1", 1},
		{"large", string(big), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "d/" + tc.name
			commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "0")})
			before := revision()
			v := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", tc.value)})
			if got := revision() - before; got != tc.want {
				t.Errorf("%d write transactions for a %d-byte change; want %d", got, len(tc.value), tc.want)
			}
			if _, got, err := s.Content(ctx, ns, v.GetSeq()); err != nil || got.Checksum() != v.GetChecksum() {
				t.Errorf("Content: %v, %v", got, err)
			}
		})
	}
}

// A reader that saw the record of a version this process is committing
// waits for the commit to put its content (the goal watch's event can
// overtake the commit's return): await returns once every commit of that
// number in flight is done, or its context ends.
func TestContentCacheAwaitsCommits(t *testing.T) {
	c := newContentCache(1 << 20)
	s := snap(t, "a", "1")
	info := &lehrpb.VersionInfo{Namespace: "d/x", Seq: 1, Checksum: s.Checksum()}
	awaited := func(ctx context.Context) <-chan struct{} {
		ch := make(chan struct{})
		go func() { c.await(ctx, "d/x", 1); close(ch) }()
		return ch
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("await did not return %s", what)
		}
	}
	wait(awaited(context.Background()), "with no commit in flight")

	done1, done2 := c.commit("d/x", 1), c.commit("d/x", 1) // rivals of one number
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := awaited(ctx)
	cancel()
	wait(gaveUp, "when its context ended")

	ch := awaited(context.Background())
	c.put("d/x", info, s, nil)
	done1()
	done1() // a second call changes nothing
	select {
	case <-ch:
		t.Fatal("await returned while a rival commit of the number is still in flight")
	default:
	}
	done2()
	wait(ch, "after every commit was done")
	if _, got, ok := c.get("d/x", content.Ref{Seq: 1, Checksum: s.Checksum()}); !ok || got.Checksum() != s.Checksum() {
		t.Errorf("get after the commit: ok %v", ok)
	}
}

// A commit on top of a version this process committed reads nothing of
// that parent (its manifest is kept with its content): one read of the
// head and one write, whatever the namespace's size; a store that did not
// commit the parent reads its record and chunks, and writes the same.
func TestCommitOnOwnParentIsOneReadOneWrite(t *testing.T) {
	ctx := testCtx(t)
	var rounds []string
	s := newTestStore(t, Options{OnRoundTrip: func(op string, _ time.Duration, _ error) { rounds = append(rounds, op) }})
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	kv := []string{}
	for i := range 300 { // several manifest chunks
		kv = append(kv, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i))
	}
	commit(t, s, Commit{Namespace: "d/n", Create: true, Content: snap(t, kv...), Goals: GoalsAllZones})
	kv[1] = "changed"
	rounds = nil
	v2 := commit(t, s, Commit{Namespace: "d/n", ExpectedLatest: 1, Content: snap(t, kv...), Goals: GoalsAllZones})
	if want := []string{"txn", "txn"}; fmt.Sprint(rounds) != fmt.Sprint(want) {
		t.Errorf("commit on this store's own parent made etcd requests %v; want %v (read, then write)", rounds, want)
	}

	// Another store (another control, or this one restarted) reads the
	// parent's record and the chunk that changed, and commits the same.
	var other []string
	s2 := New(s.cli, Options{Prefix: s.opts.Prefix, Logger: quietLogger(), OnRoundTrip: func(op string, _ time.Duration, _ error) { other = append(other, op) }})
	kv[3] = "changed too"
	v3, err := s2.Commit(ctx, Commit{Namespace: "d/n", ExpectedLatest: 2, Content: snap(t, kv...), Goals: GoalsAllZones})
	if err != nil {
		t.Fatal(err)
	}
	if len(other) <= len(rounds) {
		t.Errorf("a store without the parent made %v; want more than %v (the parent's record and chunks)", other, rounds)
	}
	for _, st := range []*Store{s, New(s.cli, Options{Prefix: s.opts.Prefix, Logger: quietLogger()})} {
		for _, v := range []*lehrpb.VersionInfo{v2, v3} {
			if _, got, err := st.Content(ctx, "d/n", v.GetSeq()); err != nil || got.Checksum() != v.GetChecksum() {
				t.Errorf("Content(%d): %v, %v", v.GetSeq(), got.Checksum(), err)
			}
		}
	}
}

// DomainAndNamespace reads both in one request, with or without a quorum
// round (SingleMember), and sees what was just written either way.
func TestDomainAndNamespace(t *testing.T) {
	ctx := testCtx(t)
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			var rounds int
			s := newTestStore(t, Options{SingleMember: single, OnRoundTrip: func(string, time.Duration, error) { rounds++ }})
			if _, _, err := s.DomainAndNamespace(ctx, "d/n"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("no domain: %v, want not found", err)
			}
			mustDomain(t, s, "d")
			d, ns, err := s.DomainAndNamespace(ctx, "d/n")
			if err != nil || d.GetName() != "d" || ns != nil {
				t.Fatalf("domain, no namespace: %v, %v, %v", d, ns, err)
			}
			v := commit(t, s, Commit{Namespace: "d/n", Create: true, Content: snap(t, "k", "v")})
			rounds = 0
			d, ns, err = s.DomainAndNamespace(ctx, "d/n")
			if err != nil || d.GetName() != "d" || ns.GetLatestVersion() != v.GetSeq() {
				t.Fatalf("after a commit: %v, %v, %v; want version %d", d, ns, err, v.GetSeq())
			}
			if rounds != 1 {
				t.Errorf("%d etcd requests, want 1", rounds)
			}
		})
	}
}
