package store

import (
	"errors"
	"fmt"
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
		}, RolloutInput{Domain: "payments", Namespace: "payments/rules"}},
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
// since — an operator's rollback that moved every zone at once — nor
// write its rollout over one, and that a step which moves goals must say
// which head it decided on.
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
	in, err := s.ReadRolloutInputs(ctx, "victim", nil)
	if err != nil {
		t.Fatal(err)
	}
	headRev := in.Rev
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
	if in, err = s.ReadRolloutInputs(ctx, "victim", []string{ns}); err != nil {
		t.Fatal(err)
	}
	step.HeadRev = in.Rev
	step.Goals[0].Version, step.Goals[0].Checksum = v3.GetSeq(), v3.GetChecksum()
	if err := s.PutRollout(ctx, Guard{}, step); err != nil {
		t.Fatalf("PutRollout on the current head: %v", err)
	}

	// A step that moves no goal is guarded by its head too: a commit
	// since may have written the namespace's rollouts (a global blast
	// superseding this one), which a step decided before must not undo.
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 3, Content: snap(t, "k", "newer"), Goals: GoalsNone})
	stale := RolloutStep{Rollout: &lehrpb.Rollout{Id: r.GetId(), Namespace: ns, Version: 2, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, Reason: "stale"},
		HeadRev: in.Rev}
	if err := s.PutRollout(ctx, Guard{}, stale); !errors.As(err, &ce) {
		t.Fatalf("PutRollout without goals decided before a commit: %v, want a *ConflictError", err)
	}
	if got, err := s.Rollout(ctx, ns, 2); err != nil || got.GetReason() == "stale" {
		t.Errorf("rollout after the refused step: %v, %v; want it unchanged", got, err)
	}
}

// TestReadRolloutInputs reads a domain's heads, rollouts and commands
// whole and by namespace — more namespaces than one transaction reads, so
// the later reads are at the first one's revision — and refuses a
// namespace of another domain.
func TestReadRolloutInputs(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "pay")
	mustDomain(t, s, "other")
	var all []string
	for i := range 40 {
		ns := fmt.Sprintf("pay/app%02d", i)
		all = append(all, ns)
		commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "1")})
	}
	commit(t, s, Commit{Namespace: "other/x", Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "1")})
	r := &lehrpb.Rollout{Id: RolloutID("pay/app39", 1), Namespace: "pay/app39", Version: 1, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING}
	if err := s.PutRollout(ctx, Guard{}, RolloutStep{Rollout: r}); err != nil {
		t.Fatal(err)
	}
	if err := s.QueueRolloutCommand(ctx, "pay/app39", 1, &lehrpb.RolloutCommand{RolloutId: r.GetId(), Action: lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		nss  []string
	}{{"the whole domain", nil}, {"40 namespaces by name", all}} {
		in, err := s.ReadRolloutInputs(ctx, "pay", tc.nss)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(in.Heads) != 40 || len(in.Rollouts) != 1 || len(in.Commands) != 1 || in.Rev == 0 {
			t.Errorf("%s: %d heads, %d rollouts, %d commands, revision %d; want 40, 1, 1, > 0", tc.name, len(in.Heads), len(in.Rollouts), len(in.Commands), in.Rev)
		}
		if c := in.Commands; len(c) == 1 && (c[0].Namespace != "pay/app39" || c[0].Version != 1) {
			t.Errorf("%s: command for %s@%d; want pay/app39@1", tc.name, c[0].Namespace, c[0].Version)
		}
	}
	if _, err := s.ReadRolloutInputs(ctx, "pay", []string{"other/x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a namespace of another domain: %v; want ErrInvalid", err)
	}
}
