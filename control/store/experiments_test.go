package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestExperimentsLifecycle(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "payments")
	const ns = "payments/fw"
	exp := func(n string) *lehrpb.PolicyExperiment { return &lehrpb.PolicyExperiment{Name: n, Etag: n} }

	if _, err := s.CreateExperiment(ctx, ns, "a", exp("a"), 2); !errors.As(err, new(*NotFoundError)) {
		t.Fatalf("create under a missing namespace: %v; want *NotFoundError", err)
	}
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Content: snap(t)})
	a, err := s.CreateExperiment(ctx, ns, "a", exp("a"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateExperiment(ctx, ns, "a", exp("a"), 2); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("create twice: %v; want ErrAlreadyExists", err)
	}
	if _, err := s.CreateExperiment(ctx, ns, "b", exp("b"), 2); err != nil {
		t.Fatal(err)
	}
	var ce *ExperimentCapError
	if _, err := s.CreateExperiment(ctx, ns, "c", exp("c"), 2); !errors.As(err, &ce) || ce.Cap != 2 {
		t.Errorf("create over the cap: %v; want *ExperimentCapError with cap 2", err)
	}

	// A change guarded by a stale mod revision is refused.
	a2, err := s.PutExperiment(ctx, ns, "a", exp("a2"), a.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutExperiment(ctx, ns, "a", exp("a3"), a.ModRevision); !errors.Is(err, ErrConflict) {
		t.Errorf("put at a stale revision: %v; want ErrConflict", err)
	}
	if err := s.DeleteExperiment(ctx, ns, "a", a.ModRevision); !errors.Is(err, ErrConflict) {
		t.Errorf("delete at a stale revision: %v; want ErrConflict", err)
	}
	got, err := s.Experiment(ctx, ns, "a")
	if err != nil || got.GetEtag() != "a2" || got.ModRevision != a2.ModRevision {
		t.Errorf("Experiment = %v, %v; want a2 at %d", got, err, a2.ModRevision)
	}
	st, err := s.Experiments(ctx, ns, ns+"--preview")
	if err != nil || len(st.Experiments) != 2 || st.Experiments[0].ID != "a" || st.Experiments[1].ID != "b" || st.PreviewLatest != 0 {
		t.Errorf("Experiments = %+v, %v; want a and b, no preview version", st, err)
	}
	if err := s.DeleteExperiment(ctx, ns, "a", a2.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Experiment(ctx, ns, "a"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("read after delete: %v; want *NotFoundError", err)
	}
	if err := s.DeleteExperiment(ctx, ns, "a", a2.ModRevision); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("delete twice: %v; want *NotFoundError", err)
	}
}

// TestExperimentCapUnderRace: concurrent creates never exceed the cap.
func TestExperimentCapUnderRace(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "payments")
	const ns = "payments/fw"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Content: snap(t)})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("e%d", i)
			_, err := s.CreateExperiment(ctx, ns, id, &lehrpb.PolicyExperiment{Name: id}, 3)
			if err != nil && !errors.As(err, new(*ExperimentCapError)) {
				t.Errorf("create %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	st, err := s.Experiments(ctx, ns, ns+"--preview")
	if err != nil || len(st.Experiments) != 3 {
		t.Errorf("after 8 racing creates with cap 3: %d experiments, %v", len(st.Experiments), err)
	}
}

// TestCommitDeletesExperimentAtomically: a version committed with an
// experiment deletes it in the same transaction, and a stale or missing
// experiment commits nothing.
func TestCommitDeletesExperimentAtomically(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "payments")
	const ns = "payments/fw"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Content: snap(t)})
	e, err := s.CreateExperiment(ctx, ns, "x", &lehrpb.PolicyExperiment{Name: "x"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	stale := &ExperimentRef{ID: "x", ModRevision: e.ModRevision - 1}
	if _, err := s.Commit(ctx, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "r", "1"), Experiment: stale}); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit with a stale experiment: %v; want ErrConflict", err)
	}
	if head, _ := s.GetNamespace(ctx, ns); head.GetLatestVersion() != 1 {
		t.Fatalf("a refused commit moved the namespace to %d", head.GetLatestVersion())
	}
	if _, err := s.Experiment(ctx, ns, "x"); err != nil {
		t.Fatalf("a refused commit touched the experiment: %v", err)
	}
	info, err := s.Commit(ctx, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "r", "1"), Experiment: &ExperimentRef{ID: "x", ModRevision: e.ModRevision}})
	if err != nil || info.GetSeq() != 2 {
		t.Fatalf("commit: %v, %v", info, err)
	}
	if _, err := s.Experiment(ctx, ns, "x"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("experiment after its commit: %v; want *NotFoundError", err)
	}
	_, err = s.Commit(ctx, Commit{Namespace: ns, ExpectedLatest: 2, Content: snap(t, "r", "2"), Experiment: &ExperimentRef{ID: "x", ModRevision: e.ModRevision}})
	if nf := new(NotFoundError); !errors.As(err, &nf) || nf.What != "experiment" {
		t.Errorf("second commit of the same experiment: %v; want *NotFoundError for the experiment", err)
	}
}

// TestDeletePolicyCascades: a DeletePolicy commit deletes every experiment
// in its own transaction, experiments created concurrently with it never
// outlive it, and the next commit makes the policy live again.
func TestDeletePolicyCascades(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "payments")
	const ns = "payments/fw"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Content: snap(t, "k", "v")})
	for _, id := range []string{"a", "b"} {
		if _, err := s.CreateExperiment(ctx, ns, id, &lehrpb.PolicyExperiment{Name: id}, 5); err != nil {
			t.Fatal(err)
		}
	}
	// Creates racing the deletion: each either lands before it (and is
	// deleted by it) or is refused after it.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			id := fmt.Sprintf("race%d", i)
			_, err := s.CreateExperiment(ctx, ns, id, &lehrpb.PolicyExperiment{Name: id}, 5)
			if err != nil && !errors.As(err, new(*NotFoundError)) && !errors.As(err, new(*ExperimentCapError)) {
				t.Errorf("create %s: %v", id, err)
			}
		})
	}
	var deleted []string
	info := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t), DeletePolicy: true, Deleted: &deleted})
	wg.Wait()
	if len(deleted) < 2 || deleted[0] != "a" || deleted[1] != "b" {
		t.Errorf("deleted %v; want a, b and whichever racing creates landed first", deleted)
	}
	st, err := s.Experiments(ctx, ns, ns+"--preview")
	if err != nil || len(st.Experiments) != 0 {
		t.Errorf("experiments after the deletion: %+v, %v; want none", st.Experiments, err)
	}
	head, err := s.GetNamespace(ctx, ns)
	if err != nil || head.GetDeleteTime() == nil || head.GetLatestVersion() != info.GetSeq() || head.GetPropertyCount() != 0 {
		t.Fatalf("head %v, %v; want deleted at version %d with no rules", head, err, info.GetSeq())
	}
	if _, err := s.CreateExperiment(ctx, ns, "c", &lehrpb.PolicyExperiment{Name: "c"}, 5); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("create under the deleted policy: %v; want *NotFoundError", err)
	}
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: info.GetSeq(), Content: snap(t, "k", "v")})
	if head, err := s.GetNamespace(ctx, ns); err != nil || head.GetDeleteTime() != nil {
		t.Errorf("head after a publish: %v, %v; want live again (no delete_time)", head, err)
	}
	if _, err := s.CreateExperiment(ctx, ns, "c", &lehrpb.PolicyExperiment{Name: "c"}, 5); err != nil {
		t.Errorf("create after the policy is live again: %v", err)
	}
}
