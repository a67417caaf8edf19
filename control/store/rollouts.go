package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Guard makes a write conditional on a key still having the create
// revision it had: the strategist's election key, so only the leader of
// the moment writes. The zero Guard guards nothing.
type Guard struct {
	Key string
	Rev int64
}

// ErrNotLeader is returned when a Guard no longer holds: another
// strategist leads now. Nothing was written.
var ErrNotLeader = fmt.Errorf("store: %w: the write's guard no longer holds (another leader)", ErrConflict)

// RolloutStep is what one step of the strategist writes, atomically: the
// rollout's new state, goal states to move and events to append.
type RolloutStep struct {
	Rollout *lehrpb.Rollout
	// Goals are written as given (checksums filled in by the caller); each
	// version they name, stable and candidate, must exist.
	Goals []*lehrpb.GoalState
	// HeadRev is a revision at which the namespace's head was read, and
	// the step decided on it: the step is written only if the head has not
	// changed since. A version committed in between — a publish, an
	// operator's rollback that moved every zone at once — is the latest
	// intent, and a decision made without it must not move goals over it;
	// nor may it write a rollout over what that commit wrote of its
	// rollouts (a global blast's publish supersedes the rollout in flight
	// in its own transaction: commitrollout.go). Required with Goals; 0
	// (without Goals) guards nothing.
	HeadRev int64
	Events  []*lehrpb.RolloutEvent
	// Done is the operator command the step carried out; it is removed
	// unless a newer one replaced it meanwhile.
	Done *QueuedCommand
}

// QueuedCommand is an operator command as stored, with the revision that
// identifies this one.
type QueuedCommand struct {
	Namespace string
	Version   uint64
	Command   *lehrpb.RolloutCommand
	ModRev    int64
}

// PutRollout writes a step in one transaction guarded by g, by the
// existence of the zones and versions the goals name, by the head existing
// and by the namespace's head (step.HeadRev). It fails with ErrNotLeader
// when g no longer holds, with a *ConflictError when the head changed
// (decide again on the new one), and with a *NotFoundError when the
// namespace was deleted or a zone or version is gone (compacted, which
// goals and candidates prevent, or never there).
func (s *Store) PutRollout(ctx context.Context, g Guard, step RolloutStep) error {
	r := step.Rollout
	if _, _, err := names.Namespace(r.GetNamespace()); err != nil {
		return fmt.Errorf("store: put rollout: %w: %w", ErrInvalid, err)
	}
	var cmps []clientv3.Cmp
	if g.Key != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
	}
	headKey := s.lay.nsmeta(r.GetNamespace())
	// A rollout of a deleted namespace (delete.go) is not written again.
	cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(headKey), ">", 0))
	if len(step.Goals) > 0 && step.HeadRev <= 0 {
		return fmt.Errorf("store: put rollout %s: %w", r.GetId(), invalidf("a step that moves goals needs the revision its head was read at (HeadRev)"))
	}
	if step.HeadRev > 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(headKey), "<", step.HeadRev+1))
	}
	b, err := encode(r)
	if err != nil {
		return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
	}
	ops := []clientv3.Op{clientv3.OpPut(s.lay.rollout(r.GetNamespace(), r.GetVersion()), string(b))}
	need := map[string]bool{}
	for _, gs := range step.Goals {
		eb, err := s.encodeGoal(gs)
		if err != nil {
			return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
		}
		ops = append(ops, clientv3.OpPut(s.lay.goal(gs.GetZone(), gs.GetNamespace()), string(eb)))
		need[s.lay.zone(gs.GetZone())] = true
		need[s.lay.version(gs.GetNamespace(), gs.GetVersion())] = true
		if c := gs.GetCandidate(); c != nil {
			need[s.lay.version(gs.GetNamespace(), c.GetVersion())] = true
		}
	}
	for k := range need {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
	}
	for _, ev := range step.Events {
		eb, err := encode(ev)
		if err != nil {
			return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
		}
		ops = append(ops, clientv3.OpPut(s.lay.rolloutEvent(r.GetNamespace(), r.GetVersion(), ev.GetSeq()), string(eb)))
	}
	if d := step.Done; d != nil {
		key := s.lay.rolloutCommand(d.Namespace, d.Version)
		// Deleted only if it is still the command carried out.
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", d.ModRev)},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil))
	}
	if len(ops)+len(cmps) > maxOpsPerTxn {
		return fmt.Errorf("store: put rollout %s: %w", r.GetId(), invalidf("a step of %d writes and %d checks is more than one transaction holds (%d)", len(ops), len(cmps), maxOpsPerTxn))
	}
	resp, err := s.txn(ctx, cmps, ops, nil)
	if err != nil {
		return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
	}
	if resp.Succeeded {
		return nil
	}
	if g.Key != "" {
		gr, err := s.get(ctx, g.Key)
		if err != nil {
			return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
		}
		if len(gr.Kvs) == 0 || gr.Kvs[0].CreateRevision != g.Rev {
			return fmt.Errorf("store: put rollout %s: %w", r.GetId(), ErrNotLeader)
		}
	}
	h, modRev, _, err := s.head(ctx, r.GetNamespace())
	if err != nil {
		return fmt.Errorf("store: put rollout %s: %w", r.GetId(), err)
	}
	if h == nil {
		return &NotFoundError{What: "namespace", Name: r.GetNamespace()}
	}
	if step.HeadRev > 0 && modRev > step.HeadRev {
		return &ConflictError{Namespace: r.GetNamespace(), Expected: r.GetVersion(), Current: h.GetLatestVersion()}
	}
	return &NotFoundError{What: "zone or version", Name: r.GetId()}
}

// Rollouts returns the rollouts of ns, oldest first; every namespace's if
// ns is "".
func (s *Store) Rollouts(ctx context.Context, ns string) ([]*lehrpb.Rollout, error) {
	prefix := s.lay.rolloutsPrefix()
	if ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, fmt.Errorf("store: rollouts: %w: %w", ErrInvalid, err)
		}
		prefix = s.lay.rolloutsOf(ns)
	}
	resp, err := s.get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: rollouts: %w", err)
	}
	out := make([]*lehrpb.Rollout, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := new(lehrpb.Rollout)
		if err := decode(string(kv.Key), kv.Value, r); err != nil {
			return nil, fmt.Errorf("store: rollouts: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Rollout returns the rollout of version seq of ns, or a *NotFoundError.
func (s *Store) Rollout(ctx context.Context, ns string, seq uint64) (*lehrpb.Rollout, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, fmt.Errorf("store: rollout: %w: %w", ErrInvalid, err)
	}
	key := s.lay.rollout(ns, seq)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: rollout %s@%d: %w", ns, seq, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &NotFoundError{What: "rollout", Name: fmt.Sprintf("%s@%d", ns, seq)}
	}
	r := new(lehrpb.Rollout)
	if err := decode(key, resp.Kvs[0].Value, r); err != nil {
		return nil, fmt.Errorf("store: rollout %s@%d: %w", ns, seq, err)
	}
	return r, nil
}

// RolloutEvents returns the event log of the rollout of version seq of ns,
// in order.
func (s *Store) RolloutEvents(ctx context.Context, ns string, seq uint64) ([]*lehrpb.RolloutEvent, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, fmt.Errorf("store: rollout events: %w: %w", ErrInvalid, err)
	}
	resp, err := s.get(ctx, s.lay.rolloutEventsOf(ns, seq), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: rollout events %s@%d: %w", ns, seq, err)
	}
	out := make([]*lehrpb.RolloutEvent, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ev := new(lehrpb.RolloutEvent)
		if err := decode(string(kv.Key), kv.Value, ev); err != nil {
			return nil, fmt.Errorf("store: rollout events %s@%d: %w", ns, seq, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// RolloutID is the id of the rollout of version seq of ns.
func RolloutID(ns string, seq uint64) string { return fmt.Sprintf("%s@%d", ns, seq) }

// ParseRolloutID splits "<namespace>@<version>".
func ParseRolloutID(id string) (ns string, seq uint64, err error) {
	i := strings.LastIndexByte(id, '@')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: rollout id %q: want namespace@version, e.g. payments/limits@7", ErrInvalid, id)
	}
	if _, err := fmt.Sscanf(id[i+1:], "%d", &seq); err != nil || seq == 0 {
		return "", 0, fmt.Errorf("%w: rollout id %q: the version after @ must be a number > 0", ErrInvalid, id)
	}
	return id[:i], seq, nil
}

// QueueRolloutCommand stores an operator command for the rollout of
// version seq of ns, replacing one not yet carried out.
func (s *Store) QueueRolloutCommand(ctx context.Context, ns string, seq uint64, c *lehrpb.RolloutCommand) error {
	if _, _, err := names.Namespace(ns); err != nil {
		return fmt.Errorf("store: queue rollout command: %w: %w", ErrInvalid, err)
	}
	b, err := encode(c)
	if err != nil {
		return fmt.Errorf("store: queue rollout command %s@%d: %w", ns, seq, err)
	}
	rkey := s.lay.rollout(ns, seq)
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(rkey), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(s.lay.rolloutCommand(ns, seq), string(b))}, nil)
	if err != nil {
		return fmt.Errorf("store: queue rollout command %s@%d: %w", ns, seq, err)
	}
	if !resp.Succeeded {
		return &NotFoundError{What: "rollout", Name: RolloutID(ns, seq)}
	}
	return nil
}

// decodeCommands decodes queued commands.
func decodeCommands(kvs []*mvccpb.KeyValue) ([]QueuedCommand, error) {
	out := make([]QueuedCommand, 0, len(kvs))
	for _, kv := range kvs {
		c := new(lehrpb.RolloutCommand)
		if err := decode(string(kv.Key), kv.Value, c); err != nil {
			return nil, err
		}
		ns, seq, err := ParseRolloutID(c.GetRolloutId())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out = append(out, QueuedCommand{Namespace: ns, Version: seq, Command: c, ModRev: kv.ModRevision})
	}
	return out, nil
}

// RolloutInputs is what the rollout strategist decides a domain's
// namespaces on, read at one revision.
type RolloutInputs struct {
	// Heads are the namespaces' heads (those that exist).
	Heads []*lehrpb.Namespace
	// Rollouts are their rollouts, by namespace, oldest first.
	Rollouts []*lehrpb.Rollout
	// Commands are the operator commands queued for those rollouts.
	Commands []QueuedCommand
	// Rev is the revision of the read: a RolloutStep's HeadRev.
	Rev int64
}

// ReadRolloutInputs reads the heads, rollouts and queued commands of the
// namespaces of domain named in namespaces — of every namespace of the
// domain when namespaces is nil — at one revision.
func (s *Store) ReadRolloutInputs(ctx context.Context, domain string, namespaces []string) (RolloutInputs, error) {
	var in RolloutInputs
	if err := names.Domain(domain); err != nil {
		return in, fmt.Errorf("store: rollout inputs: %w: %w", ErrInvalid, err)
	}
	// Three reads per namespace (or for the whole domain): the head(s),
	// the rollouts, the commands.
	type read struct {
		key    string
		prefix bool
	}
	var reads []read
	if namespaces == nil {
		reads = []read{
			{s.lay.nsmetaDomain(domain), true},
			{s.lay.rolloutsPrefix() + domain + "/", true},
			{s.lay.rolloutCommandsPrefix() + domain + "/", true},
		}
	}
	for _, ns := range namespaces {
		if d, _, err := names.Namespace(ns); err != nil || d != domain {
			return in, fmt.Errorf("store: rollout inputs: %w: namespace %q is not one of domain %s", ErrInvalid, ns, domain)
		}
		reads = append(reads, read{s.lay.nsmeta(ns), false}, read{s.lay.rolloutsOf(ns), true}, read{s.lay.rolloutCommandsPrefix() + ns + "/", true})
	}
	// Transactions of at most maxOpsPerTxn reads, the later ones at the
	// first one's revision.
	for len(reads) > 0 {
		n := min(len(reads), maxOpsPerTxn/3*3)
		chunk := make([]clientv3.Op, n)
		for i, r := range reads[:n] {
			var opts []clientv3.OpOption
			if r.prefix {
				opts = append(opts, clientv3.WithPrefix())
			}
			if in.Rev != 0 {
				opts = append(opts, clientv3.WithRev(in.Rev))
			}
			chunk[i] = clientv3.OpGet(r.key, opts...)
		}
		reads = reads[n:]
		rs, rev, err := s.readAt(ctx, chunk...)
		if err != nil {
			return in, fmt.Errorf("store: rollout inputs of %s: %w", domain, err)
		}
		if in.Rev == 0 {
			in.Rev = rev
		}
		for i := 0; i+2 < len(rs); i += 3 {
			for _, kv := range rs[i].Kvs {
				h := new(lehrpb.Namespace)
				if err := decode(string(kv.Key), kv.Value, h); err != nil {
					return in, fmt.Errorf("store: rollout inputs of %s: %w", domain, err)
				}
				in.Heads = append(in.Heads, h)
			}
			for _, kv := range rs[i+1].Kvs {
				r := new(lehrpb.Rollout)
				if err := decode(string(kv.Key), kv.Value, r); err != nil {
					return in, fmt.Errorf("store: rollout inputs of %s: %w", domain, err)
				}
				in.Rollouts = append(in.Rollouts, r)
			}
			cmds, err := decodeCommands(rs[i+2].Kvs)
			if err != nil {
				return in, fmt.Errorf("store: rollout inputs of %s: %w", domain, err)
			}
			in.Commands = append(in.Commands, cmds...)
		}
	}
	return in, nil
}

// PruneRollouts removes the rollouts of the given versions of ns, with
// their event logs, their canary evaluations and any command still queued
// for them, in one
// transaction guarded by g.
func (s *Store) PruneRollouts(ctx context.Context, g Guard, ns string, versions []uint64) error {
	if _, _, err := names.Namespace(ns); err != nil {
		return fmt.Errorf("store: prune rollouts: %w: %w", ErrInvalid, err)
	}
	if len(versions) == 0 {
		return nil
	}
	var cmps []clientv3.Cmp
	if g.Key != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
	}
	var ops []clientv3.Op
	for _, v := range versions {
		ops = append(ops,
			clientv3.OpDelete(s.lay.rollout(ns, v)),
			clientv3.OpDelete(s.lay.rolloutEventsOf(ns, v), clientv3.WithPrefix()),
			clientv3.OpDelete(s.lay.rolloutCommand(ns, v)),
			clientv3.OpDelete(s.lay.evaluationsOf(ns, v), clientv3.WithPrefix()))
	}
	for i := 0; i < len(ops); i += maxOpsPerTxn - 1 {
		resp, err := s.txn(ctx, cmps, ops[i:min(i+maxOpsPerTxn-1, len(ops))], nil)
		if err != nil {
			return fmt.Errorf("store: prune rollouts of %s: %w", ns, err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("store: prune rollouts of %s: %w", ns, ErrNotLeader)
		}
	}
	return nil
}

// DomainNames returns the name of every domain, sorted.
func (s *Store) DomainNames(ctx context.Context) ([]string, error) {
	resp, err := s.get(ctx, s.lay.domainsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("store: list domains: %w", err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, s.lay.domainFromKey(string(kv.Key)))
	}
	return out, nil
}

// RolloutInput is a change the rollout strategist acts on, as
// WatchRolloutInputs reports it. Exactly one field is set.
type RolloutInput struct {
	// Domain is the domain of a new namespace head (a new version), a
	// queued operator command, or a new or changed domain record.
	Domain string
	// Namespace, with Domain, is the namespace whose head changed or for
	// whose rollout a command was queued; "" for a domain record.
	Namespace string
	// Zone is the zone one of whose distributors reported: evidence for
	// every rollout that reaches it.
	Zone string
	// Resync says the watch is (again) in place — first, and after it
	// broke (etcd unreachable, a compacted revision): anything may have
	// changed before.
	Resync bool
}

// WatchRolloutInputs sends every change the rollout strategist acts on
// (RolloutInput) until ctx ends, when the channel closes. The goroutine
// it starts ends with ctx, as etcd's Watch does. Deletions are not
// sent: a lapsed distributor's report shows as time passing.
func (s *Store) WatchRolloutInputs(ctx context.Context) <-chan RolloutInput {
	ch := make(chan RolloutInput, 64)
	zonestatus := s.lay.zoneStatusesPrefix()
	prefixes := []string{s.lay.nsmetaPrefix(), s.lay.rolloutCommandsPrefix(), s.lay.domainsPrefix(), zonestatus}
	go func() {
		defer close(ch)
		send := func(in RolloutInput) bool {
			select {
			case ch <- in:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for attempt := 0; ctx.Err() == nil; attempt++ {
			wctx, cancel := context.WithCancel(ctx)
			merged := make(chan clientv3.WatchResponse)
			var wg sync.WaitGroup
			for _, p := range prefixes {
				wch := s.cli.Watch(leaderOnly(wctx), p, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify())
				wg.Go(func() {
					for resp := range wch {
						select {
						case merged <- resp:
						case <-wctx.Done():
							return
						}
					}
					cancel() // one broke: set them all up again
				})
			}
			go func() { wg.Wait(); close(merged) }()
			created := 0
			for resp := range merged {
				if resp.Err() != nil || resp.Canceled {
					cancel()
					continue
				}
				if resp.Created {
					if created++; created == len(prefixes) && !send(RolloutInput{Resync: true}) {
						cancel()
						return
					}
					continue
				}
				attempt = 0
				for _, ev := range resp.Events {
					key := string(ev.Kv.Key)
					var in RolloutInput
					switch {
					case strings.HasPrefix(key, prefixes[0]):
						in.Namespace = strings.TrimPrefix(key, prefixes[0])
						in.Domain, _, _ = strings.Cut(in.Namespace, "/")
					case strings.HasPrefix(key, prefixes[1]):
						in.Namespace = strings.TrimPrefix(key, prefixes[1])
						if i := strings.LastIndexByte(in.Namespace, '/'); i >= 0 {
							in.Namespace = in.Namespace[:i] // rolloutcmds/<namespace>/<version>
						}
						in.Domain, _, _ = strings.Cut(in.Namespace, "/")
					case strings.HasPrefix(key, zonestatus):
						in.Zone, _, _ = strings.Cut(strings.TrimPrefix(key, zonestatus), "/")
					default:
						in.Domain = s.lay.domainFromKey(key)
					}
					if !send(in) {
						cancel()
						return
					}
				}
			}
			cancel()
			if !backoff.Sleep(ctx, watchRetry.Full(attempt)) {
				return
			}
		}
	}()
	return ch
}

// watchRetry paces WatchRolloutInputs' new watches after a break.
var watchRetry = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}
