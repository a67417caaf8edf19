package rollout

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Dependency order (Annealing's dependency solver, RolloutPolicy.after):
// a rollout records at its start, for each namespace its policy names, the
// content that namespace's latest version holds (Rollout.requires), and
// enters a stage only once that namespace's goal holds that content or
// newer in every zone the stage moves. Content, not version number: a
// rollback is a new version republishing older content, so "at or after
// version 42" would pass a rollback to 40 committed as 43. The content of a
// version is the version itself, or for a rollback the content of the
// version it republished (ContentOf).

// MaxAfter bounds RolloutPolicy.after.
const MaxAfter = 16

// ZoneContent is a namespace's stable goal in one zone and the content it
// holds (ContentOf the goal's version); both 0 where it has no goal.
type ZoneContent struct {
	Goal, Content uint64
}

// Reached is how far a namespace a rollout requires has gone: its goal in
// each zone, with the content it holds.
type Reached struct {
	Namespace string
	Zones     map[string]ZoneContent
}

// MaxLineage bounds how far ContentOf follows rollbacks of rollbacks.
const MaxLineage = 64

// ContentOf returns the version whose content version v of a namespace
// holds: v, or for a rollback the content of the version it republished,
// followed back at most MaxLineage times. info reads a version; nil with
// no error when it is no longer kept (history compaction), where the
// lineage stops.
func ContentOf(v uint64, info func(v uint64) (*lehrpb.VersionInfo, error)) (uint64, error) {
	for range MaxLineage {
		if v == 0 {
			return 0, nil
		}
		vi, err := info(v)
		if err != nil {
			return 0, err
		}
		if vi == nil || vi.GetSource() != lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK || vi.GetRollbackOf() == 0 || vi.GetRollbackOf() >= v {
			return v, nil
		}
		v = vi.GetRollbackOf()
	}
	return v, nil
}

// checkAfter checks RolloutPolicy.after: namespaces, at most MaxAfter,
// each once.
func checkAfter(field string, after []string) error {
	if len(after) > MaxAfter {
		return fieldErr(field, "%d namespaces; at most %d allowed", len(after), MaxAfter)
	}
	for i, ns := range after {
		if _, _, err := names.Namespace(ns); err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		if j := slices.Index(after, ns); j < i {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%s is also after[%d]; name each namespace once", ns, j)
		}
	}
	return nil
}

// Unmet says why stage stg of r may not be entered yet ("waits for …"):
// the first of r's
// requirements whose namespace's goal, in a zone the stage moves, holds
// older content than required; "" when every one is met. reached is what
// the strategist read of the required namespaces.
func Unmet(r *lehrpb.Rollout, stg Stage, reached []Reached) string {
	by := make(map[string]Reached, len(reached))
	for _, rc := range reached {
		by[rc.Namespace] = rc
	}
	for _, req := range r.GetRequires() {
		rc := by[req.GetNamespace()]
		for _, t := range stg.Targets {
			zc := rc.Zones[t.Zone]
			if zc.Content >= req.GetVersion() {
				continue
			}
			var holds string
			switch {
			case zc.Goal == 0:
				holds = "it has no goal there yet"
			case zc.Content != zc.Goal:
				holds = fmt.Sprintf("its goal there is version %d, a rollback republishing version %d's content", zc.Goal, zc.Content)
			default:
				holds = fmt.Sprintf("its goal there is version %d", zc.Goal)
			}
			return fmt.Sprintf("waits for %s to reach %s with version %d's content or newer (%s)", req.GetNamespace(), t.Zone, req.GetVersion(), holds)
		}
	}
	return ""
}

// dependencyWait records that r waits for a namespace it requires (why,
// from Unmet), with an event when the reason changes: a rollout held by
// another namespace's rollback may wait for a long time, and its log says
// for what.
func dependencyWait(r *lehrpb.Rollout, now time.Time, why string) Decision {
	if why == r.GetReason() {
		return Decision{}
	}
	r.Reason, r.UpdateTime, r.WaitUntil = why, timestamppb.New(now), nil
	return Decision{Rollout: r, Events: []*lehrpb.RolloutEvent{newEvent(r, now, "waiting", why, "")}}
}
