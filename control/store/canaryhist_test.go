package store

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// A namespace's canary history on etcd: every byte is charged to its
// domain and credited back when it shrinks or goes; a write needs the
// leadership, the namespace and the history as read; the history of a
// deleted namespace goes by PruneCanaryHistories, and only that one.
func TestCanaryHistory(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "shop")
	const ns, other = "shop/web", "shop/api"
	commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t)})
	commit(t, s, Commit{Namespace: other, Create: true, Content: snap(t)})
	used := func() int64 {
		t.Helper()
		b, _, err := s.DomainUsage(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := used()
	lead, err := s.cli.Put(ctx, s.lay.prefix+"test-leader", "me")
	if err != nil {
		t.Fatal(err)
	}
	g := Guard{Key: s.lay.prefix + "test-leader", Rev: lead.Header.Revision}
	rec := func(n int) *lehrpb.CanaryHistory {
		h := &lehrpb.CanaryCheckHistory{Check: "latency", AfterIntervals: 30}
		for range n {
			h.Samples = append(h.Samples, &lehrpb.CanaryCheckSample{Effect: 0.01, LevelVariance: 0.002, SpreadVariance: 0.03, Df: 19})
		}
		return &lehrpb.CanaryHistory{Namespace: ns, LearnedVersion: 7, Checks: []*lehrpb.CanaryCheckHistory{h}}
	}
	size := func(r *lehrpb.CanaryHistory) int64 {
		r = proto.CloneOf(r)
		r.StoredBytes = 0
		return int64(len(s.lay.canaryHist(ns)) + proto.Size(r))
	}
	old, err := s.CanaryHistory(ctx, ns)
	if err != nil || old.ModRevision != 0 || len(old.Record.GetChecks()) != 0 {
		t.Fatalf("CanaryHistory before any = %+v, %v; want an empty one", old, err)
	}
	h1, err := s.PutCanaryHistory(ctx, g, ns, rec(3), old)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := used()-before, size(rec(3)); got != want {
		t.Errorf("charged %d bytes; want %d", got, want)
	}
	if _, err := s.PutCanaryHistory(ctx, g, ns, rec(4), old); !errors.Is(err, ErrConflict) {
		t.Errorf("a write on a stale read: %v; want ErrConflict", err)
	}
	if _, err := s.PutCanaryHistory(ctx, Guard{Key: g.Key, Rev: g.Rev + 1000}, ns, rec(4), h1); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a write without the leadership: %v; want ErrNotLeader", err)
	}
	got, err := s.CanaryHistory(ctx, ns)
	if err != nil || got.ModRevision != h1.ModRevision || len(got.Record.GetChecks()[0].GetSamples()) != 3 || got.Bytes != size(rec(3)) || got.Record.GetStoredBytes() != got.Bytes {
		t.Fatalf("CanaryHistory = %+v, %v; want the 3 samples written, %d bytes", got, err, size(rec(3)))
	}
	// Shrinking credits; deleting (nil) credits all.
	h2, err := s.PutCanaryHistory(ctx, g, ns, rec(1), got)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := used()-before, size(rec(1)); got != want {
		t.Errorf("after shrinking, charged %d bytes; want %d", got, want)
	}
	if _, err := s.PutCanaryHistory(ctx, g, ns, nil, h2); err != nil {
		t.Fatal(err)
	}
	if got := used() - before; got != 0 {
		t.Errorf("after deleting, charged %d bytes; want 0", got)
	}
	// A namespace that does not exist has no history written.
	var nf *NotFoundError
	if _, err := s.PutCanaryHistory(ctx, g, "shop/none", rec(1), StoredCanaryHistory{}); !errors.As(err, &nf) {
		t.Errorf("a history of a namespace that does not exist: %v; want NotFound", err)
	}
	// Pruning: the deleted namespace's history goes, credited; the other stays.
	for _, n := range []string{ns, other} {
		o, err := s.CanaryHistory(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutCanaryHistory(ctx, g, n, rec(2), o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteNamespace(ctx, ns, DeleteOptions{RequestID: "d1"}); err != nil {
		t.Fatal(err)
	}
	afterDelete := used()
	if n, err := s.PruneCanaryHistories(ctx, g); err != nil || n != 1 {
		t.Fatalf("PruneCanaryHistories = %d, %v; want 1", n, err)
	}
	if got, want := afterDelete-used(), size(rec(2)); got != want {
		t.Errorf("pruning credited %d bytes; want %d", got, want)
	}
	if h, err := s.CanaryHistory(ctx, other); err != nil || h.ModRevision == 0 {
		t.Errorf("the live namespace's history: %+v, %v; want kept", h, err)
	}
}
