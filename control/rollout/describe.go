package rollout

import (
	"fmt"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// How a rollout is shown — by "lehr rollout status" and the operator
// console (control/console) alike, so both say the same. The text is the
// rollout's own (its reason is the strategist's words); what is derived
// here is where it stands (StateName, in decide.go, names its state) and how long its wait has left. Callers escape
// the stored text for their medium (termtext.Clean, html/template).

// StagePhase is where a rollout stands with one of its stages.
type StagePhase int

// The phases of a stage.
const (
	// StagePending: not reached yet.
	StagePending StagePhase = iota
	// StagePassed: passed (every stage of a rollout that succeeded).
	StagePassed
	// StageCurrent: the stage a running or paused rollout is in.
	StageCurrent
	// StageEnded: the stage where the rollout failed, was aborted or was
	// superseded.
	StageEnded
)

// PhaseOf returns where r stands with its stage i.
func PhaseOf(r *lehrpb.Rollout, i int) StagePhase {
	switch cur := int(r.GetStage()); {
	case i < cur || r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED:
		return StagePassed
	case i == cur && Active(r):
		return StageCurrent
	case i == cur:
		return StageEnded
	}
	return StagePending
}

// Reason is r's reason and, while it waits for something timed, how long
// is left: "baking (…); 9m17s left". The strategist stores when a wait
// ends (wait_until), not a countdown, so the time left is derived at now.
func Reason(r *lehrpb.Rollout, now time.Time) string {
	s := r.GetReason()
	if left := WaitLeft(r, now); left != "" {
		s += "; " + left
	}
	return s
}

// StageLabel names r's current stage with its place: "2/3 zone-a", or
// "-" when r has none.
func StageLabel(r *lehrpb.Rollout) string {
	if n := len(r.GetStages()); n > 0 && int(r.GetStage()) < n {
		return fmt.Sprintf("%d/%d %s", r.GetStage()+1, n, r.GetStages()[r.GetStage()])
	}
	return "-"
}
