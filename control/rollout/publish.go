package rollout

import (
	"fmt"
	"time"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// PublishInput is what AtPublish decides on: a version being committed
// and what its commit read.
type PublishInput struct {
	// Info is the version being committed (its seq and checksum known).
	Info *lehrpb.VersionInfo
	// Zones are the registered zones, sorted.
	Zones []string
	// Policy is the rollout policy in effect for the namespace, with its
	// source and generation.
	Policy     *lehrpb.RolloutPolicy
	Source     lehrpb.RolloutPolicySource
	Generation uint64
	// ExpectedChecks are the checks the version is committed with.
	ExpectedChecks []*lehrpb.CanaryCheck
	// Read reads the namespace's goal in each of Zones and its latest
	// rollout (nil if none): called only for a policy AtPublish starts.
	Read func() (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error)
	Now  time.Time
}

// PublishedEventKind is the kind of the event that says a rollout's goals
// were written by its version's publish.
const PublishedEventKind = "published"

// AtPublish decides whether a new version's rollout starts in its
// publish's own transaction instead of at the strategist's next round: it
// does for a global blast that Start would enter at once — no freeze
// window open, no max_concurrent to queue behind, no monitoring check to
// read alerts for (waiting for any is Admit's, the strategist's). Then d is Start's decision on what the
// commit read — the version's rollout entered in its only stage, with
// every zone's goal, and the rollout in flight it supersedes — with one
// more event saying that the goals were written at publish. The rollout
// is then as the strategist would have started it, and the strategist
// steps it from there on the evidence, as any other. ok is false when the
// rollout is the strategist's to start; an error is Read's.
func AtPublish(in PublishInput) (d StartDecision, ok bool, err error) {
	p := in.Policy
	if !p.GetGlobalBlast() || p.GetMaxConcurrent() > 0 || p.GetMonitoring() != nil || in.Info.GetSeq() < 2 || len(in.Zones) == 0 {
		return StartDecision{}, false, nil
	}
	if _, _, frozen := Frozen(p, in.Now); frozen {
		return StartDecision{}, false, nil
	}
	goals, prev, err := in.Read()
	if err != nil {
		return StartDecision{}, false, err
	}
	ns := in.Info.GetNamespace()
	d, err = Start(StartInput{
		Head:  &lehrpb.Namespace{Name: ns, LatestVersion: in.Info.GetSeq(), LatestChecksum: in.Info.GetChecksum()},
		Prev:  prev,
		Goals: goals, Zones: in.Zones, Now: in.Now,
		Latest: func() (*lehrpb.VersionInfo, error) { return in.Info, nil },
		Policy: func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
			return p, in.Source, in.Generation, nil
		},
		ExpectedChecks: func() ([]*lehrpb.CanaryCheck, error) { return in.ExpectedChecks, nil },
	})
	if err != nil {
		return StartDecision{}, false, err
	}
	if d.Finish != nil || d.Started == nil || len(d.Started.Goals) == 0 {
		// Nothing to move (every zone holds the version already), or the
		// stage was not entered: the strategist's, as always.
		return StartDecision{}, false, nil
	}
	r := d.Started.Rollout
	d.Started.Events = append(d.Started.Events, newEvent(r, in.Now, PublishedEventKind,
		fmt.Sprintf("goals written at publish: every zone at once (%d zone(s)), in version %d's own transaction", len(d.Started.Goals), r.GetVersion()), ""))
	return d, true, nil
}

// Records returns what a commit writes of d, a decision of AtPublish
// (store.RolloutAtCommit): the rollout it supersedes, if any, and the
// version's own, each with its events, and the version's goals.
func (d StartDecision) Records() *store.StartedRollout {
	out := &store.StartedRollout{}
	for _, x := range []*Decision{d.Superseded, d.Started} {
		if x != nil {
			out.Rollouts = append(out.Rollouts, store.RolloutRecord{Rollout: x.Rollout, Events: x.Events})
			out.Goals = append(out.Goals, x.Goals...)
		}
	}
	return out
}
