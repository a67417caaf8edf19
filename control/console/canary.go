package console

import (
	"net/http"
	"slices"
	"time"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
)

// The canary evaluations: a list of the recent ones, and an evaluation's
// page — its verdict and every check's explanation in the words of
// "lehr canary show" (control/evaluation's describe.go), a plot per
// check of the canary and control hosts' series around the change with
// the looks marked (plot.go), and the canary hosts' host-level checks
// beside them.

// evaluationURL is the page of evaluation id ("ns@v/name").
func evaluationURL(id string) string { return evaluation.ConsolePath(id) }

type evaluationsPage struct {
	Namespace   string
	Evaluations []*lehrpb.CanaryEvaluation
}

// maxListed bounds the evaluations the list shows, newest first.
const maxListed = 200

func (c *Console) evaluations(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	resp, err := c.opts.Client.ListCanaryEvaluations(r.Context(), &lehrpb.ListCanaryEvaluationsRequest{Namespace: ns})
	if err != nil {
		c.failAPI(w, r, "list canary evaluations", err)
		return
	}
	evs := newestFirst(resp.GetEvaluations())
	doc := map[string]any{"page": "evaluations", "namespace": ns, "evaluations": pjs(evs)}
	if len(evs) > maxListed {
		evs = evs[:maxListed]
	}
	c.render(w, r, "evaluations", page{Title: "Canary evaluations", Crumbs: []crumb{{"Fleet", Prefix}}, Refresh: int(c.opts.Refresh / time.Second),
		Body: evaluationsPage{Namespace: ns, Evaluations: evs}}, doc)
}

// newestFirst orders evaluations by creation, newest first (the API's
// order is the store's: by id).
func newestFirst(evs []*lehrpb.CanaryEvaluation) []*lehrpb.CanaryEvaluation {
	out := slices.Clone(evs)
	slices.SortStableFunc(out, func(a, b *lehrpb.CanaryEvaluation) int {
		return b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime())
	})
	return out
}

// checkView is one check of an evaluation's page.
type checkView struct {
	C *lehrpb.CanaryCheckResult
	// Test and AA are describe.go's lines, Learned learn.go's ("" when
	// there is none).
	Test, AA, Learned string
	Plot              *plot
}

type evaluationPage struct {
	Ev *lehrpb.CanaryEvaluation
	// Look is describe.go's line of the latest look; "" before one.
	Look       string
	Trials     []string
	Checks     []checkView
	HostChecks []string
	// RolloutURL is the page of the rollout it validates, if any.
	RolloutURL string
}

func (c *Console) evaluation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ev, err := c.opts.Client.GetCanaryEvaluation(r.Context(), &lehrpb.GetCanaryEvaluationRequest{Id: id})
	if err != nil {
		c.failAPI(w, r, "canary evaluation "+id, err)
		return
	}
	ep := evaluationPage{Ev: ev}
	for _, t := range ev.GetTrials() {
		ep.Trials = append(ep.Trials, evaluation.TrialLine(t))
	}
	if ev.GetRolloutId() != "" {
		ep.RolloutURL = rolloutURL(ev.GetNamespace(), ev.GetVersion())
	}
	if res := ev.GetResult(); res != nil {
		ep.Look = evaluation.LookLine(res)
		for _, ch := range res.GetChecks() {
			ep.Checks = append(ep.Checks, checkView{C: ch, Test: evaluation.TestLine(ch), AA: evaluation.AALine(ch), Learned: evaluation.LearnedLine(ch), Plot: plotCheck(res, ch)})
		}
		for _, h := range res.GetHostChecks() {
			ep.HostChecks = append(ep.HostChecks, evaluation.HostCheckLine(h))
		}
	}
	refresh := 0
	if ev.GetState() == lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING {
		refresh = int(c.opts.Refresh / time.Second)
	}
	doc := map[string]any{"page": "evaluation", "evaluation": pj(ev), "look": ep.Look, "trials": nonNil(ep.Trials), "hostChecks": nonNil(ep.HostChecks)}
	crumbs := []crumb{{"Fleet", Prefix}, {"Canary evaluations", Prefix + "canary/"}}
	if ep.RolloutURL != "" {
		crumbs = append(crumbs, crumb{"Rollout " + ev.GetRolloutId(), ep.RolloutURL})
	}
	c.render(w, r, "evaluation", page{Title: "Canary evaluation " + ev.GetId(), Refresh: refresh, Crumbs: crumbs, Body: ep}, doc)
}
