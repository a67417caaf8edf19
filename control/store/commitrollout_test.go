package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"lehr.dev/lehr/proto/lehrpb"
)

// blastOf is a Decide that starts version info's rollout moving every
// zone, recording what it was given.
func blastOf(seen *[]CommitRollout) func(CommitRollout) (*StartedRollout, error) {
	return func(in CommitRollout) (*StartedRollout, error) {
		*seen = append(*seen, in)
		if _, _, err := in.Read(); err != nil {
			return nil, err
		}
		ns, seq := in.Info.GetNamespace(), in.Info.GetSeq()
		r := &lehrpb.Rollout{Id: RolloutID(ns, seq), Namespace: ns, Version: seq, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, EventCount: 1}
		out := &StartedRollout{Rollouts: []RolloutRecord{{Rollout: r, Events: []*lehrpb.RolloutEvent{{RolloutId: r.GetId(), Seq: 1, Kind: "started"}}}}}
		for _, z := range in.Zones {
			out.Goals = append(out.Goals, &lehrpb.GoalState{Zone: z, Namespace: ns, Version: seq, Reason: "blast"})
		}
		return out, nil
	}
}

// A commit with Rollout writes what its Decide decided — rollout records,
// their events, every zone's goal — with the version, having given it the
// zones, the policies and (read on demand) the goals and latest rollout
// as of its round.
func TestCommitStartsItsRollout(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "pay")
	for _, z := range []string{"z2", "z1"} {
		if _, err := s.CreateZone(ctx, z); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "pay/limits"
	v1 := commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "1")})
	if _, err := s.PutRolloutPolicy(ctx, "pay", &lehrpb.RolloutPolicyRecord{Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}}, 0); err != nil {
		t.Fatal(err)
	}

	// Deciding nothing leaves goals alone, as GoalsNone does.
	var seen []CommitRollout
	at := &RolloutAtCommit{Decide: func(in CommitRollout) (*StartedRollout, error) {
		seen = append(seen, in)
		return nil, nil
	}}
	v2 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", "2"), Goals: GoalsNone, Rollout: at})
	if at.Started != nil {
		t.Errorf("Started = %v after deciding nothing", at.Started)
	}
	if len(seen) != 1 || seen[0].Info.GetSeq() != v2.GetSeq() || !slices.Equal(seen[0].Zones, []string{"z1", "z2"}) ||
		seen[0].NamespacePolicy != nil || !seen[0].DomainPolicy.GetPolicy().GetGlobalBlast() {
		t.Fatalf("Decide saw %+v; want version 2, zones [z1 z2], no namespace policy and the domain's global blast", seen)
	}
	for _, z := range []string{"z1", "z2"} {
		if g := goalOf(t, s, z, ns); g.GetVersion() != v1.GetSeq() {
			t.Errorf("goal of %s after deciding nothing: %v, want version 1", z, g)
		}
	}

	seen = nil
	at = &RolloutAtCommit{Decide: blastOf(&seen)}
	v3 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 2, Content: snap(t, "k", "3"), Goals: GoalsNone, Rollout: at})
	if at.Started == nil || len(at.Started.Rollouts) != 1 {
		t.Fatalf("Started = %v, want the rollout decided", at.Started)
	}
	for _, z := range []string{"z1", "z2"} {
		if g := goalOf(t, s, z, ns); g.GetVersion() != v3.GetSeq() || g.GetChecksum() != v3.GetChecksum() || g.GetReason() != "blast" {
			t.Errorf("goal of %s: %v, want version 3 with its checksum and the decision's reason", z, g)
		}
	}
	r, err := s.Rollout(ctx, ns, v3.GetSeq())
	if err != nil || r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		t.Fatalf("rollout of version 3: %v, %v", r, err)
	}
	if evs, err := s.RolloutEvents(ctx, ns, v3.GetSeq()); err != nil || len(evs) != 1 || evs[0].GetKind() != "started" {
		t.Errorf("events of version 3: %v, %v; want the started event", evs, err)
	}

	// The next commit's Decide reads the goals and that rollout.
	seen = nil
	var goals map[string]*lehrpb.GoalState
	var prev *lehrpb.Rollout
	at = &RolloutAtCommit{Decide: func(in CommitRollout) (*StartedRollout, error) {
		goals, prev, err = in.Read()
		return nil, err
	}}
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 3, Content: snap(t, "k", "4"), Goals: GoalsNone, Rollout: at})
	if prev.GetVersion() != v3.GetSeq() || len(goals) != 2 || goals["z1"].GetVersion() != v3.GetSeq() {
		t.Errorf("Read: goals %v, latest rollout %v; want version 3's", goals, prev)
	}
}

// goalOf reads ns's goal in zone z (nil if none).
func goalOf(t *testing.T, s *Store, z, ns string) *lehrpb.GoalState {
	t.Helper()
	gs, _, err := s.Goals(testCtx(t), z, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) == 0 {
		return nil
	}
	return gs[0]
}

// A rollout of the namespace written between the commit's read and its
// transaction — the strategist stepping the rollout the decision
// supersedes — makes a new round, which decides on it.
func TestCommitRolloutIsGuardedByTheNamespacesRollouts(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "pay")
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	const ns = "pay/limits"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "1")})
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", "2"), Goals: GoalsNone})
	old := &lehrpb.Rollout{Id: RolloutID(ns, 2), Namespace: ns, Version: 2, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, Reason: "first"}
	if err := s.PutRollout(ctx, Guard{}, RolloutStep{Rollout: old}); err != nil {
		t.Fatal(err)
	}
	var prevs []string
	at := &RolloutAtCommit{Decide: func(in CommitRollout) (*StartedRollout, error) {
		_, prev, err := in.Read()
		if err != nil {
			return nil, err
		}
		prevs = append(prevs, prev.GetReason())
		if len(prevs) == 1 {
			// The strategist steps the old rollout meanwhile.
			step := &lehrpb.Rollout{Id: old.GetId(), Namespace: ns, Version: 2, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, Reason: "stepped"}
			if err := s.PutRollout(ctx, Guard{}, RolloutStep{Rollout: step}); err != nil {
				return nil, err
			}
		}
		sup := &lehrpb.Rollout{Id: old.GetId(), Namespace: ns, Version: 2, State: lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED, Reason: "superseded after " + prev.GetReason()}
		return &StartedRollout{Rollouts: []RolloutRecord{{Rollout: sup}}}, nil
	}}
	commit(t, s, Commit{Namespace: ns, ExpectedLatest: 2, Content: snap(t, "k", "3"), Goals: GoalsNone, Rollout: at})
	if want := []string{"first", "stepped"}; !slices.Equal(prevs, want) {
		t.Errorf("Decide saw the old rollout as %q, want %q (a new round after the step)", prevs, want)
	}
	if r, err := s.Rollout(ctx, ns, 2); err != nil || r.GetReason() != "superseded after stepped" {
		t.Errorf("old rollout %v, %v; want it superseded on its stepped state", r, err)
	}
}

// What Decide may decide is bounded: goals of the new version only, in
// zones the commit read, rollouts of its namespace; and Rollout needs
// GoalsNone. Anything else is ErrInvalid and commits nothing.
func TestCommitRolloutRefusesWhatItMustNotWrite(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "pay")
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	const ns = "pay/limits"
	commit(t, s, Commit{Namespace: ns, Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "k", "1")})
	decided := func(out *StartedRollout) *RolloutAtCommit {
		return &RolloutAtCommit{Decide: func(CommitRollout) (*StartedRollout, error) { return out, nil }}
	}
	other := &lehrpb.Rollout{Id: RolloutID("pay/other", 2), Namespace: "pay/other", Version: 2}
	for i, tc := range []struct {
		name  string
		goals GoalPolicy
		at    *RolloutAtCommit
	}{
		{"with GoalsAllZones", GoalsAllZones, decided(nil)},
		{"no Decide", GoalsNone, &RolloutAtCommit{}},
		{"an older version's goal", GoalsNone, decided(&StartedRollout{Goals: []*lehrpb.GoalState{{Zone: "z1", Namespace: ns, Version: 1}}})},
		{"an unread zone's goal", GoalsNone, decided(&StartedRollout{Goals: []*lehrpb.GoalState{{Zone: "z9", Namespace: ns, Version: 2}}})},
		{"a candidate", GoalsNone, decided(&StartedRollout{Goals: []*lehrpb.GoalState{{Zone: "z1", Namespace: ns, Version: 2,
			Candidate: &lehrpb.CandidateGoal{Version: 3}}}})},
		{"another namespace's rollout", GoalsNone, decided(&StartedRollout{Rollouts: []RolloutRecord{{Rollout: other}}})},
	} {
		_, err := s.Commit(ctx, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", fmt.Sprint(i)), Goals: tc.goals, Rollout: tc.at})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if h, _, _, err := s.head(ctx, ns); err != nil || h.GetLatestVersion() != 1 {
		t.Errorf("head %v, %v; want version 1 still", h, err)
	}
}
