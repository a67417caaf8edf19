package console

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/proto/lehrpb"
)

// The rollouts list, a rollout's page (stage timeline, why it waits and
// how long, every event) and its actions: pause, resume, promote, abort,
// each behind a confirmation page whose form posts with a token
// (security.go), as an UpdateRollout call of the caller.

// action is an operator's action on a rollout, as the console offers it.
type action struct {
	Name    string // "pause", "resume", "promote", "abort": the URL's last segment
	Action  lehrpb.RolloutAction
	Label   string
	Explain string
	Danger  bool
}

var actions = []action{
	{"pause", lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, "Pause", "Hold the rollout: its checks still run (and fail it on evidence), but no stage is entered until it is resumed.", false},
	{"resume", lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME, "Resume", "Let the rollout go on. A bake the pause interrupted starts over.", false},
	{"promote", lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE, "Promote", "Skip the rest of the current stage's bake once its hosts applied. A freeze window still holds it.", false},
	{"abort", lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, "Abort", "End the rollout and roll every host that received the version back, as for a failure.", true},
}

func actionNamed(name string) (action, bool) {
	for _, a := range actions {
		if a.Name == name {
			return a, true
		}
	}
	return action{}, false
}

// applies reports whether a makes sense for r now: pause, promote and
// abort a running rollout, resume and abort a paused one.
func (a action) applies(r *lehrpb.Rollout) bool {
	switch r.GetState() {
	case lehrpb.RolloutState_ROLLOUT_STATE_RUNNING:
		return a.Action != lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME
	case lehrpb.RolloutState_ROLLOUT_STATE_PAUSED:
		return a.Action == lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME || a.Action == lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT
	}
	return false
}

type rolloutsPage struct {
	Rollouts   []*lehrpb.Rollout
	ActiveOnly bool
}

func (c *Console) rollouts(w http.ResponseWriter, r *http.Request) {
	active := r.URL.Query().Get("active") == "1"
	rs, err := c.opts.Client.ListRollouts(r.Context(), &lehrpb.ListRolloutsRequest{ActiveOnly: active})
	if err != nil {
		c.failAPI(w, r, "list rollouts", err)
		return
	}
	doc := map[string]any{"page": "rollouts", "activeOnly": active, "rollouts": pjs(rs.GetRollouts())}
	c.render(w, r, "rollouts", page{Title: "Rollouts", Crumbs: []crumb{{"Fleet", Prefix}}, Refresh: int(c.opts.Refresh / time.Second),
		Body: rolloutsPage{Rollouts: rs.GetRollouts(), ActiveOnly: active}}, doc)
}

// stageView is one stage of a rollout's timeline.
type stageView struct {
	N       int
	Name    string
	Phase   string // "passed", "current", "ended", "pending"
	Entered *time.Time
	Events  int
}

type rolloutPage struct {
	Rollout *lehrpb.Rollout
	Stages  []stageView
	Events  []*lehrpb.RolloutEvent
	// Why it waits or ended, with the time left (rollout.Reason).
	Reason string
	// WaitUntil, when it waits for something timed.
	WaitUntil *time.Time
	// Held lists what holds its next stage under the policy's monitoring
	// check (Rollout.alert_hold): each alert firing, with since when, or
	// the alerts source that could not be read; HeldStage names the stage.
	Held      []string
	HeldStage string
	// Actions the caller may take now; Refused, why control would refuse
	// the caller the ones that apply (the first refusal).
	Actions []action
	Refused string
}

// rolloutRef reads the rollout a URL names.
func (c *Console) rolloutRef(w http.ResponseWriter, r *http.Request) (ns string, version uint64, ro *lehrpb.Rollout, ok bool) {
	ns = r.PathValue("domain") + "/" + r.PathValue("name")
	version, err := strconv.ParseUint(r.PathValue("version"), 10, 64)
	if err != nil || version == 0 {
		c.fail(w, r, http.StatusNotFound, "NOT_FOUND", "a rollout is named by its namespace and version: /console/rollouts/DOMAIN/NAME/VERSION")
		return "", 0, nil, false
	}
	ro, err = c.opts.Client.GetRollout(r.Context(), &lehrpb.GetRolloutRequest{Namespace: ns, Version: version})
	if err != nil {
		c.failAPI(w, r, "rollout "+ns+"@"+strconv.FormatUint(version, 10), err)
		return "", 0, nil, false
	}
	return ns, version, ro, true
}

func (c *Console) rollout(w http.ResponseWriter, r *http.Request) {
	ns, version, ro, ok := c.rolloutRef(w, r)
	if !ok {
		return
	}
	evs, err := c.opts.Client.ListRolloutEvents(r.Context(), &lehrpb.ListRolloutEventsRequest{Namespace: ns, Version: version})
	if err != nil {
		c.failAPI(w, r, "events of rollout "+ro.GetId(), err)
		return
	}
	now := c.opts.Now()
	rp := rolloutPage{Rollout: ro, Events: evs.GetEvents(), Reason: rollout.Reason(ro, now)}
	if ro.GetWaitUntil() != nil && rollout.WaitLeft(ro, now) != "" {
		t := ro.GetWaitUntil().AsTime()
		rp.WaitUntil = &t
	}
	if h := ro.GetAlertHold(); h != nil && rollout.Active(ro) {
		rp.Held = rollout.DescribeHold(h)
		if i := int(h.GetStage()); i < len(ro.GetStages()) {
			rp.HeldStage = ro.GetStages()[i]
		}
	}
	for i, name := range ro.GetStages() {
		sv := stageView{N: i + 1, Name: name}
		switch rollout.PhaseOf(ro, i) {
		case rollout.StagePassed:
			sv.Phase = "passed"
		case rollout.StageCurrent:
			sv.Phase = "current"
		case rollout.StageEnded:
			sv.Phase = "ended"
		default:
			sv.Phase = "pending"
		}
		for _, ev := range rp.Events {
			if int(ev.GetStage()) != i {
				continue
			}
			sv.Events++
			if ev.GetKind() == "stage" && sv.Entered == nil {
				t := ev.GetTime().AsTime()
				sv.Entered = &t
			}
		}
		rp.Stages = append(rp.Stages, sv)
	}
	for _, a := range actions {
		if !a.applies(ro) {
			continue
		}
		if err := c.mayCall(r, ns, version, a); err != nil {
			if rp.Refused == "" {
				rp.Refused = err.Error()
			}
			continue
		}
		rp.Actions = append(rp.Actions, a)
	}
	refresh := 0
	if rollout.Active(ro) {
		refresh = int(c.opts.Refresh / time.Second)
	}
	doc := map[string]any{"page": "rollout", "rollout": pj(ro), "events": pjs(rp.Events), "reason": rp.Reason,
		"stages": nonNil(rp.Stages), "actions": actionNames(rp.Actions), "held": nonNil(rp.Held)}
	d, _, _ := cutNS(ns)
	c.render(w, r, "rollout", page{Title: "Rollout " + ro.GetId(), Refresh: refresh,
		Crumbs: []crumb{{"Fleet", Prefix}, {"Domain " + d, domainURL(d)}, {"Namespace " + ns, nsURL(ns)}}, Body: rp}, doc)
}

func actionNames(as []action) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.Name)
	}
	return out
}

// mayCall returns control's refusal of the caller of r taking a on the
// rollout, if it would refuse (Options.MayCall).
func (c *Console) mayCall(r *http.Request, ns string, version uint64, a action) error {
	if c.opts.MayCall == nil {
		return nil
	}
	return c.opts.MayCall(r, "UpdateRollout", &lehrpb.UpdateRolloutRequest{Namespace: ns, Version: version, Action: a.Action})
}

// target names a rollout action for its token.
func target(ns string, version uint64) string { return ns + "@" + strconv.FormatUint(version, 10) }

type confirmPage struct {
	Rollout *lehrpb.Rollout
	Action  action
	Token   string
	Reason  string
}

// confirm is an action's confirmation page: what it does, and the form
// that does it.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	a, ok := actionNamed(r.PathValue("action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "NOT_FOUND", "no such action: pause, resume, promote or abort")
		return
	}
	ns, version, ro, ok := c.rolloutRef(w, r)
	if !ok {
		return
	}
	if !a.applies(ro) {
		c.fail(w, r, http.StatusConflict, "FAILED_PRECONDITION", "rollout "+ro.GetId()+" is "+rollout.StateName(ro.GetState())+": it cannot be asked to "+a.Name)
		return
	}
	if err := c.mayCall(r, ns, version, a); err != nil {
		c.failAPI(w, r, a.Name+" rollout "+ro.GetId(), err)
		return
	}
	cp := confirmPage{Rollout: ro, Action: a, Token: c.token(r, a.Name, target(ns, version)), Reason: rollout.Reason(ro, c.opts.Now())}
	doc := map[string]any{"page": "confirm", "rollout": pj(ro), "action": a.Name,
		"post": map[string]any{"url": r.URL.Path, "fields": map[string]string{"token": cp.Token, "message": ""}}}
	d, _, _ := cutNS(ns)
	c.render(w, r, "confirm", page{Title: a.Label + " rollout " + ro.GetId() + "?",
		Crumbs: []crumb{{"Fleet", Prefix}, {"Domain " + d, domainURL(d)}, {"Namespace " + ns, nsURL(ns)}, {"Rollout " + ro.GetId(), rolloutURL(ns, version)}}, Body: cp}, doc)
}

// act takes a confirmed action: an UpdateRollout call as the caller,
// which control authorizes and audits as any other; then back to the
// rollout's page.
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	a, ok := actionNamed(r.PathValue("action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "NOT_FOUND", "no such action: pause, resume, promote or abort")
		return
	}
	ns := r.PathValue("domain") + "/" + r.PathValue("name")
	version, err := strconv.ParseUint(r.PathValue("version"), 10, 64)
	if err != nil || version == 0 {
		c.fail(w, r, http.StatusNotFound, "NOT_FOUND", "a rollout is named by its namespace and version: /console/rollouts/DOMAIN/NAME/VERSION")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "INVALID_ARGUMENT", "the form could not be read: "+err.Error())
		return
	}
	if err := c.checkToken(r, r.PostForm.Get("token"), a.Name, target(ns, version)); err != nil {
		c.fail(w, r, http.StatusForbidden, "PERMISSION_DENIED", err.Error())
		return
	}
	ro, err := c.opts.Client.UpdateRollout(r.Context(), &lehrpb.UpdateRolloutRequest{
		Namespace: ns, Version: version, Action: a.Action, Message: r.PostForm.Get("message")})
	if err != nil {
		c.failAPI(w, r, a.Name+" rollout "+target(ns, version), err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"page": "action", "action": a.Name, "rollout": pj(ro)})
		return
	}
	http.Redirect(w, r, rolloutURL(ns, version)+"?"+url.Values{"asked": {a.Name}}.Encode(), http.StatusSeeOther)
}
