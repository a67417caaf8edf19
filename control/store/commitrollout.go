package store

// A version's rollout started by its own commit.
//
// Under the rollout strategist a commit leaves goals alone (GoalsNone) and
// the strategist starts the version's rollout at its next round. A commit
// with Commit.Rollout asks, in each of its rounds, whether the rollout
// starts in the version's own transaction instead — a global blast, whose
// only stage moves every zone (control/service, blast.go): the version,
// every zone's goal and the rollout record exist together or not at all,
// and delivery does not wait for a strategist round, or for a new leader
// after the last one died. The decision is the caller's (package rollout);
// the store gives it what it decides on, read at the round's revision, and
// writes what it decided under guards that make any change to what it
// read — a zone registered, a rollout of the namespace written — a new
// round.

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// RolloutAtCommit lets a commit start its version's rollout in the
// version's own transaction (Commit.Rollout).
type RolloutAtCommit struct {
	// Decide is called in every round of the commit, once the new version
	// is known and before anything is written, with what the round read.
	// It returns what to write of the version's rollout, or nil to leave
	// it to the strategist (the commit then moves no goal). An error ends
	// the commit. Required.
	Decide func(CommitRollout) (*StartedRollout, error)
	// Started receives what Decide decided in the round that committed:
	// nil when that was nothing, or when the commit answered with a
	// version committed before (a retried request).
	Started *StartedRollout
}

// CommitRollout is what RolloutAtCommit.Decide decides on, read in the
// commit's round at one revision.
type CommitRollout struct {
	// Info is the new version as it will be stored.
	Info *lehrpb.VersionInfo
	// Zones are the registered zones, sorted.
	Zones []string
	// NamespacePolicy and DomainPolicy are the rollout-policy records of
	// the namespace and of its domain: nil where the scope has none (never
	// set, or deleted).
	NamespacePolicy, DomainPolicy *lehrpb.RolloutPolicyRecord
	// Read reads the namespace's goal in each of Zones (absent where it
	// has none) and its latest rollout (nil if none), at the round's
	// revision: one more etcd request, for a decision that needs them.
	Read func() (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error)
	// Now is the store's clock at the round.
	Now time.Time
}

// StartedRollout is what a commit writes of its version's rollout, in the
// version's own transaction.
type StartedRollout struct {
	// Rollouts are stored, each with the events it appends: the version's
	// own, and the one it supersedes, if any. Each is a rollout of the
	// commit's namespace.
	Rollouts []RolloutRecord
	// Goals name the new version (no candidate) in zones of
	// CommitRollout.Zones; the store fills in the checksum.
	Goals []*lehrpb.GoalState
}

// RolloutRecord is a rollout to store with the events it appends.
type RolloutRecord struct {
	Rollout *lehrpb.Rollout
	Events  []*lehrpb.RolloutEvent
}

// commitPolicies are the reads of the policy records a commit with
// Rollout makes in its first read: the namespace's, then its domain's.
func (s *Store) commitPolicies(ns, domain string, get func(string, ...clientv3.OpOption) clientv3.Op) []clientv3.Op {
	return []clientv3.Op{get(s.lay.policy(ns)), get(s.lay.policy(domain))}
}

// livePolicy decodes a policy record read by commitPolicies: nil when
// there is none or it is a deletion.
func livePolicy(resp *clientv3.GetResponse) (*lehrpb.RolloutPolicyRecord, error) {
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	rec := new(lehrpb.RolloutPolicyRecord)
	if err := decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value, rec); err != nil {
		return nil, err
	}
	if rec.GetDeleted() {
		return nil, nil
	}
	return rec, nil
}

// decideRollout asks c.Rollout what the commit of info writes of its
// rollout, on what the round read at rev.
func (s *Store) decideRollout(ctx context.Context, c Commit, info *lehrpb.VersionInfo, zones []string, policies []*clientv3.GetResponse, rev int64,
	get func(string, ...clientv3.OpOption) clientv3.Op) (*StartedRollout, error) {
	nsPol, err := livePolicy(policies[0])
	if err != nil {
		return nil, err
	}
	domPol, err := livePolicy(policies[1])
	if err != nil {
		return nil, err
	}
	in := CommitRollout{
		Info: info, Zones: slices.Sorted(slices.Values(zones)), NamespacePolicy: nsPol, DomainPolicy: domPol, Now: s.opts.Now(),
		Read: func() (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error) {
			return s.readForRollout(ctx, c.Namespace, zones, rev, get)
		},
	}
	started, err := c.Rollout.Decide(in)
	if err != nil || started == nil {
		return nil, err
	}
	for _, rr := range started.Rollouts {
		if rr.Rollout.GetNamespace() != c.Namespace {
			return nil, invalidf("the rollout %s decided at commit is not of namespace %s", rr.Rollout.GetId(), c.Namespace)
		}
	}
	for _, g := range started.Goals {
		switch {
		case g.GetNamespace() != c.Namespace || g.GetVersion() != info.GetSeq() || g.GetCandidate() != nil:
			return nil, invalidf("a goal decided at commit must name version %d of %s and no candidate; got %s@%d in %s", info.GetSeq(), c.Namespace, g.GetNamespace(), g.GetVersion(), g.GetZone())
		case !slices.Contains(zones, g.GetZone()):
			return nil, invalidf("a goal decided at commit names zone %q, which the commit did not read", g.GetZone())
		}
	}
	return started, nil
}

// readForRollout reads ns's goal in each of zones and its latest rollout
// at revision rev.
func (s *Store) readForRollout(ctx context.Context, ns string, zones []string, rev int64, get func(string, ...clientv3.OpOption) clientv3.Op) (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error) {
	ops := []clientv3.Op{get(s.lay.rolloutsOf(ns), clientv3.WithPrefix(), clientv3.WithRev(rev),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))}
	for _, z := range zones {
		ops = append(ops, get(s.lay.goal(z, ns), clientv3.WithRev(rev)))
	}
	rs, _, err := s.readAt(ctx, ops...)
	if err != nil {
		return nil, nil, fmt.Errorf("read the goals and rollouts of %s: %w", ns, err)
	}
	var prev *lehrpb.Rollout
	if kvs := rs[0].Kvs; len(kvs) > 0 {
		prev = new(lehrpb.Rollout)
		if err := decode(string(kvs[0].Key), kvs[0].Value, prev); err != nil {
			return nil, nil, err
		}
	}
	goals := make(map[string]*lehrpb.GoalState, len(zones))
	for i, z := range zones {
		if kvs := rs[i+1].Kvs; len(kvs) > 0 {
			g := new(lehrpb.GoalState)
			if err := decode(string(kvs[0].Key), kvs[0].Value, g); err != nil {
				return nil, nil, err
			}
			goals[z] = g
		}
	}
	return goals, prev, nil
}

// rolloutWrites returns the guards and the writes of started in the
// commit of info, whose round read at rev: the namespace's rollouts must
// be as read (a rollout the decision superseded, or the strategist's step
// of it, written since makes a new round); the zones are guarded by the
// caller as for GoalsAllZones.
func (s *Store) rolloutWrites(ns string, info *lehrpb.VersionInfo, started *StartedRollout, rev int64) ([]clientv3.Cmp, []clientv3.Op, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.lay.rolloutsOf(ns)), "<", rev+1).WithPrefix()}
	var ops []clientv3.Op
	for _, rr := range started.Rollouts {
		r := rr.Rollout
		b, err := encode(r)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, clientv3.OpPut(s.lay.rollout(ns, r.GetVersion()), string(b)))
		for _, ev := range rr.Events {
			eb, err := encode(ev)
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, clientv3.OpPut(s.lay.rolloutEvent(ns, r.GetVersion(), ev.GetSeq()), string(eb)))
		}
	}
	for _, g := range started.Goals {
		out := &lehrpb.GoalState{Zone: g.GetZone(), Namespace: ns, Version: info.GetSeq(), Checksum: info.GetChecksum(),
			UpdateTime: g.GetUpdateTime(), Reason: g.GetReason()}
		if out.UpdateTime == nil {
			out.UpdateTime = info.GetCreateTime()
		}
		b, err := s.encodeGoal(out)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, clientv3.OpPut(s.lay.goal(g.GetZone(), ns), string(b)))
	}
	return cmps, ops, nil
}
