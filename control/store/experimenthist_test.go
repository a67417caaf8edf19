package store

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// An experiment's history on etcd: every byte of it is charged to its
// domain and credited back when it goes; a write needs the leadership,
// the experiment it is of (not one created again under its id) and the
// history as it was read; a history whose experiment is gone is deleted
// by PruneExperimentHistories, and only that one.
func TestExperimentHistory(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "shop")
	const ns = "shop/fw"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Content: snap(t)})
	x, err := s.CreateExperiment(ctx, ns, "x", &lehrpb.PolicyExperiment{Etag: "e1"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.CreateExperiment(ctx, ns, "y", &lehrpb.PolicyExperiment{Etag: "e1"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.AllExperiments(ctx)
	if err != nil || len(all) != 2 || all[0].Namespace != ns || all[0].ID != "x" || all[0].CreateRevision != x.CreateRevision || all[1].ID != "y" {
		t.Fatalf("AllExperiments = %+v, %v; want x and y of %s, x created at %d", all, err, ns, x.CreateRevision)
	}
	used := func() int64 {
		t.Helper()
		b, _, err := s.DomainUsage(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := used()
	// A leadership: a key of its own.
	lead, err := s.cli.Put(ctx, s.lay.prefix+"test-leader", "me")
	if err != nil {
		t.Fatal(err)
	}
	g := Guard{Key: s.lay.prefix + "test-leader", Rev: lead.Header.Revision}
	rec := func(rev int64, n int) *lehrpb.PolicyExperimentHistoryRecord {
		r := &lehrpb.PolicyExperimentHistoryRecord{ExperimentRevision: rev}
		for i := range n {
			r.Samples = append(r.Samples, &lehrpb.PolicyExperimentSample{SampleTime: timestamppb.New(time.Unix(1_800_000_000+60*int64(i), 0)), Evaluations: 100, Disagreements: 3})
		}
		return r
	}
	size := func(r *lehrpb.PolicyExperimentHistoryRecord) int64 {
		return int64(len(s.lay.experimentHist(ns, "x")) + proto.Size(r))
	}

	old, err := s.ExperimentHistory(ctx, ns, "x")
	if err != nil || old.ModRevision != 0 || len(old.Record.GetSamples()) != 0 {
		t.Fatalf("ExperimentHistory before any = %+v, %v; want an empty one", old, err)
	}
	h1, err := s.PutExperimentHistory(ctx, g, ns, "x", rec(x.CreateRevision, 1), old)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := used()-before, size(rec(x.CreateRevision, 1)); got != want || h1.Bytes != want {
		t.Errorf("after one sample the domain stores %d more bytes (the history says %d); want %d", got, h1.Bytes, want)
	}
	if _, err := s.PutExperimentHistory(ctx, g, ns, "x", rec(x.CreateRevision, 2), old); !errors.Is(err, ErrConflict) || errors.Is(err, ErrNotLeader) {
		t.Errorf("a put from a stale read: %v; want ErrConflict", err)
	}
	h2, err := s.PutExperimentHistory(ctx, g, ns, "x", rec(x.CreateRevision, 30), h1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := used()-before, size(rec(x.CreateRevision, 30)); got != want {
		t.Errorf("after 30 samples the domain stores %d more bytes; want %d", got, want)
	}
	if got, err := s.ExperimentHistory(ctx, ns, "x"); err != nil || !proto.Equal(got.Record, rec(x.CreateRevision, 30)) || got.ModRevision != h2.ModRevision || got.Bytes != h2.Bytes {
		t.Errorf("ExperimentHistory = %+v, %v; want what was put, %+v", got, err, h2)
	}
	if _, err := s.PutExperimentHistory(ctx, g, ns, "x", rec(x.CreateRevision+1, 1), h2); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("a put for another revision of x: %v; want *NotFoundError", err)
	}
	if _, err := s.PutExperimentHistory(ctx, Guard{Key: g.Key, Rev: g.Rev - 1}, ns, "x", rec(x.CreateRevision, 31), h2); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a put under a lost leadership: %v; want ErrNotLeader", err)
	}
	hy, err := s.PutExperimentHistory(ctx, g, ns, "y", rec(y.CreateRevision, 5), StoredHistory{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneExperimentHistories(ctx, g); n != 0 || err != nil {
		t.Errorf("prune with every experiment there: %d, %v; want 0", n, err)
	}

	// x goes: its history with the next prune, and its bytes with it.
	if err := s.DeleteExperiment(ctx, ns, "x", x.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneExperimentHistories(ctx, Guard{Key: g.Key, Rev: g.Rev - 1}); !errors.Is(err, ErrNotLeader) {
		t.Errorf("prune under a lost leadership: %v; want ErrNotLeader", err)
	}
	if n, err := s.PruneExperimentHistories(ctx, g); n != 1 || err != nil {
		t.Errorf("prune after x was deleted: %d, %v; want 1", n, err)
	}
	if got, want := used()-before, hy.Bytes; got != want {
		t.Errorf("after x's history went the domain stores %d more bytes than before any; want y's %d", got, want)
	}
	if got, err := s.ExperimentHistory(ctx, ns, "x"); err != nil || got.ModRevision != 0 {
		t.Errorf("x's history after the prune: %+v, %v; want none", got, err)
	}
	// x created again is another experiment: nothing of the old one's.
	x2, err := s.CreateExperiment(ctx, ns, "x", &lehrpb.PolicyExperiment{Etag: "e1"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if x2.CreateRevision == x.CreateRevision {
		t.Fatal("x created again at its old revision")
	}

	// The namespace goes: y's history with the next prune.
	if _, err := s.DeleteNamespace(ctx, ns, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneExperimentHistories(ctx, g); n != 1 || err != nil {
		t.Errorf("prune after the namespace was deleted: %d, %v; want 1", n, err)
	}
	resp, err := s.cli.Get(ctx, s.lay.experimentHistPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("histories left: %v, %v; want none", resp, err)
	}
	if got := used(); got != 0 {
		t.Errorf("the domain stores %d bytes with no namespace left; want 0", got)
	}
}
