package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// AnalysisGrace is the least time a stage waits, after its bake, for the
// last look of its canary analysis (the data arrive a report interval or
// two after the interval they describe); at least half the bake.
const AnalysisGrace = 30 * time.Second

// analysis returns the canary evaluation of stage i of r, starting it
// (with an event) the first time: the stage's canary hosts of every zone
// it reaches against the control hosts the zones' distributors watch,
// from the stage's applied time over its bake. The leader judges running
// evaluations at the start of each round (evaluation.Service.StepAll).
func (s *Strategist) analysis(ctx context.Context, g store.Guard, r *lehrpb.Rollout, i int, stg Stage, zones []string, now time.Time) (*lehrpb.CanaryEvaluation, error) {
	evs := s.opts.Evaluations
	id := store.EvaluationID(r.GetNamespace(), r.GetVersion(), fmt.Sprintf("stage-%d", i+1))
	if r.GetEvaluationId() == id {
		return evs.Get(ctx, id, false)
	}
	var trials []*lehrpb.CanaryTrial
	var desc []string
	for _, t := range stg.Targets {
		if !slices.Contains(zones, t.Zone) {
			continue
		}
		hosts, _ := canaryHosts(r, t.Zone)
		trials = append(trials, &lehrpb.CanaryTrial{Zone: t.Zone, CanaryHosts: hosts})
		if len(hosts) > 0 {
			desc = append(desc, fmt.Sprintf("%s in %s", strings.Join(hosts, ", "), t.Zone))
		} else {
			desc = append(desc, "the watched cohort hosts of "+t.Zone)
		}
	}
	cev, err := evs.Create(ctx, &lehrpb.CanaryEvaluation{
		Id: id, Namespace: r.GetNamespace(), Version: r.GetVersion(), Trials: trials, Config: stg.Analysis,
		ChangeTime: r.GetStageAppliedTime(), Bake: durationpb.New(stg.Bake), RolloutId: r.GetId(),
		ExpectedChecks: r.GetExpectedChecks(),
	})
	if err != nil {
		return nil, fmt.Errorf("start canary analysis %s: %w", id, err)
	}
	if cev, err = evs.Step(ctx, g, cev); err != nil {
		return nil, err
	}
	controls := stg.Analysis.GetControlHosts()
	if controls == 0 {
		controls = evaluation.DefaultControlHosts
	}
	r.EvaluationId, r.UpdateTime = id, timestamppb.New(now)
	msg := fmt.Sprintf("canary analysis %s started: canary hosts %s against up to %d control host(s) per zone, judged at %d looks over the %v bake (lehr canary show %s)",
		id, strings.Join(desc, "; "), controls, evaluation.Looks, stg.Bake, id)
	return cev, s.opts.Store.PutRollout(ctx, g, store.RolloutStep{Rollout: r, Events: []*lehrpb.RolloutEvent{s.event(r, now, "analysis", msg, "")}})
}

// analysisNote is what a rollout's reason says of its stage's analysis.
func analysisNote(cev *lehrpb.CanaryEvaluation) string {
	res := cev.GetResult()
	if cev == nil || res == nil {
		return ""
	}
	return fmt.Sprintf("; canary analysis: %s at look %d of %d (%s)",
		strings.TrimPrefix(res.GetVerdict().String(), "CANARY_VERDICT_"), res.GetLook(), res.GetLooks(), res.GetReason())
}

func orNone(s string) string {
	if s == "" {
		return "no look yet"
	}
	return s
}
