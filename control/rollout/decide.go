package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// The decisions around a rollout's steps, pure as Step is: starting one
// for a new version (Start), entering the first stage of those that wait
// (Admit), an operator's command (Command) and the ending that rolls one
// back (Ending, RolledBack).

// StartInput is what starting the rollout of a namespace's latest version
// decides on. Its readers are called only when the decision needs them.
type StartInput struct {
	// Head is the namespace's head; Prev its latest rollout (nil if
	// none).
	Head *lehrpb.Namespace
	Prev *lehrpb.Rollout
	// Goals is the namespace's goal in each of Zones (sorted).
	Goals map[string]*lehrpb.GoalState
	Zones []string
	Now   time.Time
	// Latest reads the head's version: read when Prev is in flight and
	// older, for the head may be Prev's own rollback, committed by a round
	// that ended before recording it.
	Latest func() (*lehrpb.VersionInfo, error)
	// Policy reads the rollout policy in effect, its source and
	// generation; ExpectedChecks the checks the version was committed
	// with (a committed policy experiment's).
	Policy         func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error)
	ExpectedChecks func() ([]*lehrpb.CanaryCheck, error)
	// Requires reads what the rollout requires of the namespaces its
	// policy names in after: the content of each one's latest version
	// (ContentOf), leaving out those without a version.
	Requires func(after []string) ([]*lehrpb.RolloutRequirement, error)
}

// StartDecision is what Start decided, applied in its order.
type StartDecision struct {
	// Finish ends Prev, whose own rollback the head is: nothing starts.
	Finish *Decision
	// Superseded is Prev, still in flight, superseded by the head.
	Superseded *Decision
	// Started is the head's rollout, entered or recorded to be entered;
	// nil when the version needs none (the service moved every zone: a
	// rollback by an operator, a namespace's first version).
	Started *Decision
}

// Start decides the rollout of in.Head's latest version, superseding
// in.Prev if it is still in flight (the latest intent wins).
func Start(in StartInput) (StartDecision, error) {
	h, prev, now := in.Head, in.Prev, in.Now
	ns, seq := h.GetName(), h.GetLatestVersion()
	behind := false
	var base uint64
	for _, z := range in.Zones {
		gs := in.Goals[z]
		if gs == nil || gs.GetVersion() < seq {
			behind = true
		}
		if gs != nil {
			base = max(base, gs.GetVersion())
		}
	}
	var out StartDecision
	running := Active(prev)
	if running && seq > prev.GetVersion() {
		info, err := in.Latest()
		if err != nil {
			return out, err
		}
		if info.GetSource() == lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK && info.GetAuthor() == Author &&
			strings.HasPrefix(info.GetMessage(), RollbackMessage(prev.GetVersion(), "")) {
			d := failed(proto.CloneOf(prev), strings.TrimPrefix(info.GetMessage(), RollbackMessage(prev.GetVersion(), "")))
			out.Finish = &d
			return out, nil
		}
	}
	if running {
		// The chain since the last good version is unverified: a rollback
		// of the new version goes back to where the superseded one started.
		base = prev.GetBaseVersion()
		old := proto.CloneOf(prev)
		old.State = lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED
		old.Reason = fmt.Sprintf("version %d supersedes it (the latest intent wins); hosts that took %d move on with %d's rollout", seq, prev.GetVersion(), seq)
		old.UpdateTime, old.WaitUntil, old.AlertHold = timestamppb.New(now), nil, nil
		out.Superseded = &Decision{Rollout: old, Events: []*lehrpb.RolloutEvent{newEvent(old, now, "superseded", old.GetReason(), "")}}
	}
	if !behind || len(in.Zones) == 0 {
		return out, nil // every zone is there already
	}
	policy, src, gen, err := in.Policy()
	if err != nil {
		return out, err
	}
	stages := Resolve(policy, in.Zones)
	expected, err := in.ExpectedChecks()
	if err != nil {
		return out, err
	}
	r := &lehrpb.Rollout{
		Id: store.RolloutID(ns, seq), Namespace: ns, Version: seq, Checksum: h.GetLatestChecksum(),
		BaseVersion: base, Policy: policy, PolicySource: src, PolicyGeneration: gen,
		State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, Salt: store.RolloutID(ns, seq),
		CreateTime: timestamppb.New(now), ExpectedChecks: expected,
	}
	if after := policy.GetAfter(); len(after) > 0 {
		if r.Requires, err = in.Requires(after); err != nil {
			return out, err
		}
	}
	for _, stg := range stages {
		r.Stages = append(r.Stages, stg.Name)
	}
	what := "the " + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(src.String(), "ROLLOUT_POLICY_SOURCE_")), "_", "-") + " policy"
	if gen > 0 {
		what += fmt.Sprintf(" (generation %d)", gen)
	}
	if policy.GetGlobalBlast() {
		what += ", a GLOBAL BLAST: every zone at once"
	}
	started := newEvent(r, now, "started", fmt.Sprintf("version %d from base %d under %s: %s", seq, base, what, strings.Join(r.Stages, " → ")), "")
	if _, _, isFrozen := Frozen(policy, now); isFrozen || policy.GetMaxConcurrent() > 0 || policy.GetMonitoring() != nil || len(r.GetRequires()) > 0 {
		// Recorded, not entered: Admit enters the first stage once no
		// freeze window is open, the namespaces it requires are where
		// the stage goes, the domain has room and no alert the policy
		// names fires.
		r.Reason = fmt.Sprintf("stage %q waits to be entered", stages[0].Name)
		r.UpdateTime = timestamppb.New(now)
		out.Started = &Decision{Rollout: r, Events: []*lehrpb.RolloutEvent{started}}
		return out, nil
	}
	d := enter(r, 0, stages, in.Goals, now, started)
	out.Started = &d
	return out, nil
}

// Admit decides, for the rollouts in flight of one domain, those that wait
// to enter their first stage (started during a freeze, queued behind
// their domain's limit, waiting for the namespaces they require, or under a
// policy with a monitoring check), oldest first: each enters once the
// namespaces it requires are where its first stage goes (Unmet), while the
// domain has fewer than its policy's max_concurrent rollouts in a stage and
// no alert its policy names fires where the stage moves, or records why it
// waits. goals reads a namespace's goal in each of zones, for those that
// enter; reached what a rollout requires (Rollout.requires), for those
// that do; alerts what control's alerts source says (nil: it has none),
// read only for a rollout about to enter under a monitoring check.
func Admit(active []*lehrpb.Rollout, zones []string, now time.Time, goals func(ns string) (map[string]*lehrpb.GoalState, error),
	reached func(r *lehrpb.Rollout) ([]Reached, error), alerts func() Alerts) ([]Decision, error) {
	inflight := map[string][]string{}
	var waiting []*lehrpb.Rollout
	for _, r := range active {
		d, _, _ := strings.Cut(r.GetNamespace(), "/")
		if r.GetStageStartTime() != nil {
			inflight[d] = append(inflight[d], r.GetId())
		} else {
			waiting = append(waiting, r)
		}
	}
	slices.SortFunc(waiting, func(a, b *lehrpb.Rollout) int {
		return cmp.Or(a.GetCreateTime().AsTime().Compare(b.GetCreateTime().AsTime()), strings.Compare(a.GetId(), b.GetId()))
	})
	var out []Decision
	for _, r := range waiting {
		r = proto.CloneOf(r)
		d, _, _ := strings.Cut(r.GetNamespace(), "/")
		stages := Resolve(r.GetPolicy(), zones)
		if len(stages) == 0 {
			continue
		}
		w, until, isFrozen := Frozen(r.GetPolicy(), now)
		paused := r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED
		var unmet string
		if len(r.GetRequires()) > 0 && !paused && !isFrozen {
			rc, err := reached(r)
			if err != nil {
				return out, fmt.Errorf("admit %s: %w", r.GetId(), err)
			}
			unmet = Unmet(r, stages[0], rc)
		}
		switch k := int(r.GetPolicy().GetMaxConcurrent()); {
		case paused:
		case isFrozen:
			out = append(out, frozen(r, now, w, until, fmt.Sprintf("stage %q waits", stages[0].Name)))
		case unmet != "":
			if d := dependencyWait(r, now, fmt.Sprintf("stage %q %s", stages[0].Name, unmet)); d.Rollout != nil {
				out = append(out, d)
			}
		case k > 0 && len(inflight[d]) >= k:
			reason := fmt.Sprintf("queued: %d rollout(s) of domain %s are in a stage (%s), the most its policy allows; starts when one ends",
				len(inflight[d]), d, strings.Join(inflight[d], ", "))
			var evs []*lehrpb.RolloutEvent
			if !strings.HasPrefix(r.GetReason(), "queued:") {
				evs = append(evs, newEvent(r, now, "queued", reason, ""))
			}
			if reason != r.GetReason() {
				r.Reason, r.UpdateTime, r.WaitUntil = reason, timestamppb.New(now), nil
				out = append(out, Decision{Rollout: r, Events: evs})
			}
		default:
			m := checkStage(r.GetPolicy(), stages[0], 0, alerts)
			if m.hold != nil {
				if hd := held(r, now, m.hold, stages[0], ""); hd.Rollout != nil {
					out = append(out, hd)
				}
				continue
			}
			evs := released(r, now, m, stages[0])
			cur, err := goals(r.GetNamespace())
			if err != nil {
				return out, fmt.Errorf("admit %s: %w", r.GetId(), err)
			}
			out = append(out, enter(r, 0, stages, cur, now, evs...))
			inflight[d] = append(inflight[d], r.GetId())
		}
	}
	return out, nil
}

// Command decides an operator's command c on r: pause holds the stages,
// resume restarts an interrupted bake, promote skips the rest of the
// stage's bake once its hosts applied, abort ends the rollout (End) with
// the same rollback as a failure. A command on a rollout no longer in
// flight, or an unknown one, is recorded as ignored.
func Command(r *lehrpb.Rollout, c *lehrpb.RolloutCommand, now time.Time) Decision {
	r = proto.CloneOf(r)
	who := c.GetAuthor()
	why := c.GetMessage()
	if why != "" {
		why = ": " + why
	}
	var ev *lehrpb.RolloutEvent
	switch {
	case !Active(r):
		ev = newEvent(r, now, "ignored", fmt.Sprintf("%v by %s: the rollout is already %s", c.GetAction(), who, StateName(r.GetState())), who)
	case c.GetAction() == lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT:
		return Decision{Rollout: r, End: &Ending{State: lehrpb.RolloutState_ROLLOUT_STATE_ABORTED, Reason: "aborted by " + who + why, Author: who}}
	case c.GetAction() == lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE:
		r.State = lehrpb.RolloutState_ROLLOUT_STATE_PAUSED
		r.Reason = "paused by " + who + why
		ev = newEvent(r, now, "paused", r.GetReason(), who)
	case c.GetAction() == lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME:
		if r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED && r.GetStageAppliedTime() != nil {
			r.StageAppliedTime = timestamppb.New(now) // the bake starts over
		}
		r.State = lehrpb.RolloutState_ROLLOUT_STATE_RUNNING
		r.Reason = "resumed by " + who + why
		ev = newEvent(r, now, "resumed", r.GetReason(), who)
	case c.GetAction() == lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE:
		r.Promote = true
		ev = newEvent(r, now, "promoted", "promoted by "+who+why+": the rest of the stage's bake is skipped once its hosts applied", who)
	default:
		ev = newEvent(r, now, "ignored", fmt.Sprintf("unknown action %v by %s", c.GetAction(), who), who)
	}
	r.UpdateTime = timestamppb.New(now)
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
		r.WaitUntil = nil // paused (or already over): waits for nothing timed
	}
	return Decision{Rollout: r, Events: []*lehrpb.RolloutEvent{ev}}
}

// Ended marks r ended as e says — the first half of an ending, before the
// strategist commits the rollback — and returns its event.
func Ended(r *lehrpb.Rollout, e *Ending, now time.Time) *lehrpb.RolloutEvent {
	r.State = e.State
	r.UpdateTime, r.WaitUntil, r.AlertHold = timestamppb.New(now), nil, nil
	kind := "failed"
	if e.State == lehrpb.RolloutState_ROLLOUT_STATE_ABORTED {
		kind = "aborted"
	}
	return newEvent(r, now, kind, e.Reason, e.Author)
}

// RolledBack is the second half of an ending (after Ended), with info the
// rollback version the strategist committed — nil when a newer version was
// published since (current), whose own rollout then moves the goals: the
// latest intent wins.
func RolledBack(r *lehrpb.Rollout, e *Ending, evs []*lehrpb.RolloutEvent, info *lehrpb.VersionInfo, current uint64, zones []string, now time.Time) Decision {
	if info == nil {
		r.Reason = e.Reason + fmt.Sprintf("; not rolled back: version %d was published since and rolls out from base %d", current, r.GetBaseVersion())
		evs = append(evs, newEvent(r, now, "superseded", r.GetReason(), ""))
		return Decision{Rollout: r, Events: evs}
	}
	r.RollbackVersion = info.GetSeq()
	r.Reason = e.Reason
	var goals []*lehrpb.GoalState
	for _, z := range zones {
		goals = append(goals, &lehrpb.GoalState{Zone: z, Namespace: r.GetNamespace(), Version: info.GetSeq(), Checksum: info.GetChecksum(),
			UpdateTime: timestamppb.New(now), Reason: fmt.Sprintf("rollback of rollout %s", r.GetId())})
	}
	evs = append(evs, newEvent(r, now, "rolled back", fmt.Sprintf("version %d republishes version %d's content in every zone", info.GetSeq(), r.GetBaseVersion()), ""))
	return Decision{Rollout: r, Goals: goals, Events: evs}
}

// RollbackMessage is the message of the version that rolls back version v.
func RollbackMessage(v uint64, reason string) string {
	return fmt.Sprintf("automatic rollback of version %d: %s", v, reason)
}

// StateName is a rollout state as people read it: "running", "failed"…
func StateName(s lehrpb.RolloutState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "ROLLOUT_STATE_"))
}

// Author is the author of what the strategist writes — rollback versions
// and goal moves — and of the events it decides: no caller may take this
// name (service.Reserved).
const Author = "lehr-rollout"
