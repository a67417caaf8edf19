package store

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestRolloutPolicies(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	commit(t, s, Commit{Namespace: "d/a", Create: true, Content: snap(t, "k", "1")})
	blast := &lehrpb.RolloutPolicy{GlobalBlast: true}
	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}}}}

	if rec, err := s.RolloutPolicy(ctx, "d"); err != nil || rec != nil {
		t.Fatalf("RolloutPolicy before any: %v, %v; want nil, nil", rec, err)
	}
	// A scope whose domain or namespace does not exist stores nothing.
	for _, scope := range []string{"nodomain", "d/nons", "nodomain/x"} {
		var nf *NotFoundError
		if _, err := s.PutRolloutPolicy(ctx, scope, &lehrpb.RolloutPolicyRecord{Policy: blast}, 0); !errors.As(err, &nf) {
			t.Errorf("PutRolloutPolicy(%s): %v, want *NotFoundError", scope, err)
		}
	}
	if _, err := s.PutRolloutPolicy(ctx, "Bad Name", &lehrpb.RolloutPolicyRecord{Policy: blast}, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutRolloutPolicy(bad scope): %v, want ErrInvalid", err)
	}

	r1, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: staged, Author: "ann", Message: "first"}, 0)
	if err != nil || r1.GetGeneration() != 1 || r1.GetScope() != "d" || r1.GetUpdateTime() == nil {
		t.Fatalf("first put: %v, %v; want generation 1 with scope and time", r1, err)
	}
	// The same policy again changes nothing: a retry is harmless.
	if again, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: staged, Message: "retry"}, 0); err != nil || !proto.Equal(again, r1) {
		t.Errorf("same policy again: %v, %v; want the stored record unchanged", again, err)
	}
	// A stale expected generation is refused.
	var ge *GenerationError
	if _, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: blast}, 7); !errors.As(err, &ge) || ge.Current != 1 || !errors.Is(err, ErrConflict) {
		t.Errorf("stale expected generation: %v, want *GenerationError with current 1", err)
	}
	r2, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: blast, Message: "emergency"}, 1)
	if err != nil || r2.GetGeneration() != 2 {
		t.Fatalf("second put: %v, %v; want generation 2", r2, err)
	}
	// A namespace override lives apart from the domain's policy.
	if _, err := s.PutRolloutPolicy(ctx, "d/a", &lehrpb.RolloutPolicyRecord{Policy: staged}, 0); err != nil {
		t.Fatalf("namespace put: %v", err)
	}
	del, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Deleted: true, Message: "back to default"}, 0)
	if err != nil || del.GetGeneration() != 3 || !del.GetDeleted() || del.GetPolicy() != nil {
		t.Fatalf("delete: %v, %v; want a deletion record, generation 3", del, err)
	}
	if again, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Deleted: true}, 0); err != nil || again != nil {
		t.Errorf("deleting again: %v, %v; want nil, nil", again, err)
	}
	cur, err := s.RolloutPolicy(ctx, "d")
	if err != nil || !cur.GetDeleted() {
		t.Errorf("RolloutPolicy after delete: %v, %v; want the deletion record", cur, err)
	}
	hist, err := s.RolloutPolicyHistory(ctx, "d", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, r := range hist {
		gens = append(gens, r.GetGeneration())
	}
	if want := []uint64{3, 2, 1}; !slices.Equal(gens, want) {
		t.Errorf("history generations %v, want %v (newest first, the namespace's apart)", gens, want)
	}
	if older, err := s.RolloutPolicyHistory(ctx, "d", 3, 1); err != nil || len(older) != 1 || older[0].GetGeneration() != 2 {
		t.Errorf("history before 3, limit 1: %v, %v; want generation 2", older, err)
	}
}

// The history keeps the newest PolicyHistoryKept changes.
func TestRolloutPolicyHistoryIsBounded(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	for i := range PolicyHistoryKept + 5 {
		p := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Name: "s", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: uint32(i + 1)}}}}}
		if _, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: p}, 0); err != nil {
			t.Fatal(err)
		}
	}
	hist, err := s.RolloutPolicyHistory(ctx, "d", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != PolicyHistoryKept || hist[len(hist)-1].GetGeneration() != 6 {
		t.Errorf("history holds %d records down to generation %d; want %d down to 6", len(hist), hist[len(hist)-1].GetGeneration(), PolicyHistoryKept)
	}
}
