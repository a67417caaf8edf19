package store

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestParseEvaluationID(t *testing.T) {
	for _, tc := range []struct {
		id      string
		ns      string
		seq     uint64
		name    string
		wantErr string
	}{
		{id: "demo/app@3/stage-1", ns: "demo/app", seq: 3, name: "stage-1"},
		{id: EvaluationID("pay/limits", 12, "manual.2"), ns: "pay/limits", seq: 12, name: "manual.2"},
		{id: "demo/app@3", wantErr: "want <domain>/<namespace>@<version>/<name>"},
		{id: "demo/app@0/x", wantErr: `version "0" is not a positive number`},
		{id: "demo/app@x/x", wantErr: `version "x" is not a positive number`},
		{id: "demo/app@3/a b", wantErr: "' ' at offset 1"},
		{id: "demo/app@3/" + strings.Repeat("x", 64), wantErr: "64 bytes"},
		{id: "demo@3/x", wantErr: "want <domain>/<namespace>@<version>/<name>"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			ns, seq, name, err := ParseEvaluationID(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("ParseEvaluationID(%q) = %v, want ErrInvalid containing %q", tc.id, err, tc.wantErr)
				}
				return
			}
			if err != nil || ns != tc.ns || seq != tc.seq || name != tc.name {
				t.Errorf("ParseEvaluationID(%q) = %q, %d, %q, %v; want %q, %d, %q", tc.id, ns, seq, name, err, tc.ns, tc.seq, tc.name)
			}
		})
	}
}

// Creating an evaluation is idempotent; a guarded put needs the guard and
// the evaluation; pruning the rollout of its version removes it.
func TestEvaluations(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	ev := &lehrpb.CanaryEvaluation{Id: EvaluationID("d/a", 2, "stage-1"), Namespace: "d/a", Version: 2,
		State: lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING}
	got, created, err := s.CreateEvaluation(ctx, ev)
	if err != nil || !created || !proto.Equal(got, ev) {
		t.Fatalf("CreateEvaluation = %v, %v, %v; want it created", got, created, err)
	}
	again := proto.CloneOf(ev)
	again.RolloutId = "other"
	got, created, err = s.CreateEvaluation(ctx, again)
	if err != nil || created || got.GetRolloutId() != "" {
		t.Fatalf("CreateEvaluation again = %v, %v, %v; want the first one, not created", got, created, err)
	}
	done := proto.CloneOf(ev)
	done.State = lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE
	if err := s.PutEvaluation(ctx, Guard{Key: "/no/such/election", Rev: 7}, done); !errors.Is(err, ErrNotLeader) {
		t.Errorf("PutEvaluation under a guard that does not hold = %v, want ErrNotLeader", err)
	}
	if err := s.PutEvaluation(ctx, Guard{}, done); err != nil {
		t.Fatalf("PutEvaluation: %v", err)
	}
	if got, err := s.Evaluation(ctx, ev.GetId()); err != nil || got.GetState() != done.GetState() {
		t.Errorf("Evaluation = %v, %v; want it DONE", got, err)
	}
	other := &lehrpb.CanaryEvaluation{Id: EvaluationID("d/b", 1, "x"), Namespace: "d/b", Version: 1}
	if _, _, err := s.CreateEvaluation(ctx, other); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Evaluations(ctx, "d/a"); err != nil || len(l) != 1 {
		t.Errorf("Evaluations(d/a) = %d, %v; want 1", len(l), err)
	}
	if l, err := s.Evaluations(ctx, ""); err != nil || len(l) != 2 {
		t.Errorf("Evaluations() = %d, %v; want 2", len(l), err)
	}
	if err := s.PruneRollouts(ctx, Guard{}, "d/a", []uint64{2}); err != nil {
		t.Fatal(err)
	}
	var nf *NotFoundError
	if _, err := s.Evaluation(ctx, ev.GetId()); !errors.As(err, &nf) {
		t.Errorf("Evaluation after its rollout was pruned = %v, want not found", err)
	}
	if err := s.PutEvaluation(ctx, Guard{}, done); !errors.As(err, &nf) {
		t.Errorf("PutEvaluation of a pruned evaluation = %v, want not found", err)
	}
}
