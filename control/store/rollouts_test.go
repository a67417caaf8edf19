package store

import (
	"errors"
	"testing"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// TestWatchRolloutInputs checks that every change the strategist acts on
// reaches it, named as it should be: the watch in place first, then a
// new domain, a namespace's new head and a zone's report.
func TestWatchRolloutInputs(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	inputs := s.WatchRolloutInputs(ctx)
	next := func(what string) RolloutInput {
		t.Helper()
		select {
		case in, ok := <-inputs:
			if !ok {
				t.Fatalf("waiting for %s: the channel closed", what)
			}
			return in
		case <-time.After(30 * time.Second):
			t.Fatalf("waiting for %s: nothing in 30 s", what)
		}
		return RolloutInput{}
	}
	if got := next("the watch in place"); got != (RolloutInput{Resync: true}) {
		t.Fatalf("first input = %+v, want a resync", got)
	}
	steps := []struct {
		name string
		do   func() error
		want RolloutInput
	}{
		{"a new domain", func() error {
			_, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "payments"})
			return err
		}, RolloutInput{Domain: "payments"}},
		{"a new version", func() error {
			_, err := s.Commit(ctx, Commit{Namespace: "payments/rules", Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "a", "1")})
			return err
		}, RolloutInput{Domain: "payments"}},
		{"a distributor's report", func() error {
			_, err := s.PutZoneStatus(ctx, "z1", report("dist-a", 1, "payments/rules", 1, 1), 30*time.Second, ReportLease{})
			return err
		}, RolloutInput{Zone: "z1"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		// A step may change several keys of one kind (a commit writes
		// the head once); the first input after it must be the one.
		if got := next(st.name); got != st.want {
			t.Errorf("after %s: input %+v, want %+v", st.name, got, st.want)
		}
	}
}

// TestPutRolloutKeepsTheLatestIntent checks that a rollout step decided
// on a namespace's head does not move goals over a version committed
// since — an operator's rollback that moved every zone at once — and
// that a step which moves goals must say which head it decided on.
func TestPutRolloutKeepsTheLatestIntent(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "victim")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	const ns = "victim/app"
	v1 := commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "good")})
	v2 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", "bad"), Goals: GoalsNone})
	_, headRev, err := s.HeadsOf(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	r := &lehrpb.Rollout{Id: RolloutID(ns, 2), Namespace: ns, Version: 2, State: lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED}
	step := RolloutStep{Rollout: r, Goals: []*lehrpb.GoalState{{Zone: "z", Namespace: ns, Version: 2, Checksum: v2.GetChecksum()}}}

	if err := s.PutRollout(ctx, Guard{}, step); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutRollout moving goals without HeadRev: %v, want ErrInvalid", err)
	}

	// The operator rolls back (every zone at once) after the step was
	// decided, before it is written.
	v3 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 2, Content: snap(t, "k", "good"),
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: v1.GetSeq()}})
	step.HeadRev = headRev
	var ce *ConflictError
	if err := s.PutRollout(ctx, Guard{}, step); !errors.As(err, &ce) || ce.Current != v3.GetSeq() {
		t.Fatalf("PutRollout decided before the rollback: %v, want a *ConflictError naming version %d", err, v3.GetSeq())
	}
	goals, _, err := s.Goals(ctx, "z", ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(goals) != 1 || goals[0].GetVersion() != v3.GetSeq() {
		t.Fatalf("zone z's goal after the refused step: %v, want the rollback's version %d", goals, v3.GetSeq())
	}
	if _, err := s.Rollout(ctx, ns, 2); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused step's rollout record: %v, want it not written", err)
	}

	// Decided on the head as it is now, the step is written.
	_, headRev, err = s.HeadsOf(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	step.HeadRev = headRev
	step.Goals[0].Version, step.Goals[0].Checksum = v3.GetSeq(), v3.GetChecksum()
	if err := s.PutRollout(ctx, Guard{}, step); err != nil {
		t.Fatalf("PutRollout on the current head: %v", err)
	}
}
