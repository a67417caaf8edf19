package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// ZoneCreatedReason is the reason recorded on the goals CreateZone sets.
const ZoneCreatedReason = "zone created"

// CreateZone registers a zone and sets its goals to every namespace's latest
// version, atomically. ErrAlreadyExists if registered.
//
// The goals are written first, each batch guarded by the zone still being
// unregistered, and the zone key last, in a transaction guarded by no
// namespace head having changed since the heads were read; a head that did
// change has its goal rewritten and the registration is tried again. Once
// the zone key exists every commit with GoalsAllZones includes the zone, so
// no commit can slip between. Until then the zone is not registered:
// Goals reports it missing. A process that dies midway leaves goals of an
// unregistered zone behind; the next CreateZone overwrites them, and
// deletes those of namespaces deleted meanwhile (guarded by the
// tombstones a deletion leaves: delete.go).
func (s *Store) CreateZone(ctx context.Context, zone string) (*lehrpb.Zone, error) {
	z, created, err := s.createZone(ctx, zone)
	if err != nil {
		return nil, err
	}
	if !created {
		return nil, fmt.Errorf("store: create zone %s: %w", zone, ErrAlreadyExists)
	}
	return z, nil
}

// EnsureZone is CreateZone that succeeds if the zone exists.
func (s *Store) EnsureZone(ctx context.Context, zone string) error {
	_, _, err := s.createZone(ctx, zone)
	return err
}

func (s *Store) createZone(ctx context.Context, zone string) (*lehrpb.Zone, bool, error) {
	if err := names.Zone(zone); err != nil {
		return nil, false, fmt.Errorf("store: create zone: %w: %w", ErrInvalid, err)
	}
	zkey := s.lay.zone(zone)
	now := s.opts.Now()
	z := &lehrpb.Zone{Name: zone, CreateTime: timestamppb.New(now)}
	zbytes, err := encode(z)
	if err != nil {
		return nil, false, fmt.Errorf("store: create zone %s: %w", zone, err)
	}
	var written int64    // goals reflect every head with mod revision <= written
	var got *lehrpb.Zone // the zone created, or the one found
	created := false
	err = optimistic(ctx, "create zone "+zone, func(int) (bool, error) {
		rs, rev, err := s.readAt(ctx,
			clientv3.OpGet(zkey),
			clientv3.OpGet(s.lay.zonesPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(s.lay.nsmetaPrefix(), clientv3.WithPrefix()))
		if err != nil {
			return false, fmt.Errorf("store: create zone %s: %w", zone, err)
		}
		if len(rs[0].Kvs) > 0 {
			old := new(lehrpb.Zone)
			if err := decode(zkey, rs[0].Kvs[0].Value, old); err != nil {
				return false, fmt.Errorf("store: create zone %s: %w", zone, err)
			}
			got = old
			return true, nil
		}
		if rs[1].Count >= MaxZones {
			return false, fmt.Errorf("store: create zone %s: %w", zone, invalidf("%d zones are registered, the most the store supports", rs[1].Count))
		}
		var goals []clientv3.Op
		exists := make(map[string]bool, len(rs[2].Kvs))
		for _, kv := range rs[2].Kvs {
			exists[s.lay.nameFromNsmeta(string(kv.Key))] = true
		}
		// Goals of the unregistered zone for namespaces deleted since
		// they were written (by an earlier round, or a CreateZone that
		// died midway) go.
		left, err := s.get(ctx, s.lay.goalsZone(zone), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return false, nil // etcd compacted rev meanwhile: read again
		}
		if err != nil {
			return false, fmt.Errorf("store: create zone %s: %w", zone, err)
		}
		for _, kv := range left.Kvs {
			if ns := s.lay.nsFromGoal(zone, string(kv.Key)); !exists[ns] {
				goals = append(goals, clientv3.OpDelete(string(kv.Key)))
			}
		}
		for _, kv := range rs[2].Kvs {
			if kv.ModRevision <= written {
				continue // its goal is already written and still current
			}
			h := new(lehrpb.Namespace)
			if err := decode(string(kv.Key), kv.Value, h); err != nil {
				return false, fmt.Errorf("store: create zone %s: %w", zone, err)
			}
			if h.GetLatestVersion() == 0 {
				continue
			}
			g, err := s.encodeGoal(&lehrpb.GoalState{
				Zone: zone, Namespace: h.GetName(), Version: h.GetLatestVersion(), Checksum: h.GetLatestChecksum(),
				UpdateTime: timestamppb.New(now), Reason: ZoneCreatedReason,
			})
			if err != nil {
				return false, fmt.Errorf("store: create zone %s: %w", zone, err)
			}
			goals = append(goals, clientv3.OpPut(s.lay.goal(zone, h.GetName()), string(g)))
		}
		unregistered := clientv3.Compare(clientv3.CreateRevision(zkey), "=", 0)
		register := []clientv3.Cmp{
			unregistered,
			clientv3.Compare(clientv3.ModRevision(s.lay.nsmetaPrefix()), "<", rev+1).WithPrefix(),
			// A deletion since (delete.go) removed a head, which the
			// guard above does not see, and left a tombstone, which this
			// one does: the next round deletes that namespace's goal.
			clientv3.Compare(clientv3.ModRevision(s.lay.tombstonesPrefix()), "<", rev+1).WithPrefix(),
		}
		final := []clientv3.Op{clientv3.OpPut(zkey, string(zbytes))}
		chunked := len(goals) >= maxOpsPerTxn
		if !chunked {
			final = append(final, goals...) // small: all in one transaction
		} else {
			for i := 0; i < len(goals); i += maxOpsPerTxn {
				batch := goals[i:min(i+maxOpsPerTxn, len(goals))]
				resp, err := s.txn(ctx, []clientv3.Cmp{unregistered}, batch, nil)
				if err != nil {
					return false, fmt.Errorf("store: create zone %s: write goals: %w", zone, err)
				}
				if !resp.Succeeded {
					break // registered concurrently; the next round sees it
				}
			}
		}
		resp, err := s.txn(ctx, register, final, nil)
		if err != nil {
			return false, fmt.Errorf("store: create zone %s: %w", zone, err)
		}
		if resp.Succeeded {
			got, created = z, true
			return true, nil
		}
		if chunked {
			written = rev
		}
		return false, nil
	})
	if err != nil {
		return nil, false, err
	}
	return got, created, nil
}

// ListZones returns every registered zone.
func (s *Store) ListZones(ctx context.Context) ([]*lehrpb.Zone, error) {
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.zonesPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.zoneReportedPrefix(), clientv3.WithPrefix()))
	if err != nil {
		return nil, fmt.Errorf("store: list zones: %w", err)
	}
	reported := make(map[string]*timestamppb.Timestamp, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		ts := new(timestamppb.Timestamp)
		if err := decode(string(kv.Key), kv.Value, ts); err != nil {
			return nil, fmt.Errorf("store: list zones: %w", err)
		}
		reported[strings.TrimPrefix(string(kv.Key), s.lay.zoneReportedPrefix())] = ts
	}
	out := make([]*lehrpb.Zone, 0, len(rs[0].Kvs))
	for _, kv := range rs[0].Kvs {
		z := new(lehrpb.Zone)
		if err := decode(string(kv.Key), kv.Value, z); err != nil {
			return nil, fmt.Errorf("store: list zones: %w", err)
		}
		z.LastReportTime = reported[z.GetName()]
		out = append(out, z)
	}
	return out, nil
}

// MarkZoneReported records that a distributor of zone reported at at
// (Zone.last_report_time): one blind put, which the service makes at most
// once a minute per zone.
func (s *Store) MarkZoneReported(ctx context.Context, zone string, at time.Time) error {
	if err := names.Zone(zone); err != nil {
		return fmt.Errorf("store: mark zone reported: %w: %w", ErrInvalid, err)
	}
	b, err := encode(timestamppb.New(at))
	if err != nil {
		return fmt.Errorf("store: mark zone %s reported: %w", zone, err)
	}
	_, err = call(s, ctx, "put", func(ctx context.Context) (*clientv3.PutResponse, error) {
		return s.cli.Put(ctx, s.lay.zoneReported(zone), string(b))
	})
	if err != nil {
		return fmt.Errorf("store: mark zone %s reported: %w", zone, err)
	}
	return nil
}

// Goals returns a zone's goal states (one namespace if ns != "") and the
// etcd revision they were read at. An unregistered zone is a
// *NotFoundError; a namespace without a goal in the zone yields none.
// Resume watching with WatchGoals(ctx, zone, rev+1).
func (s *Store) Goals(ctx context.Context, zone, ns string) ([]*lehrpb.GoalState, int64, error) {
	if err := names.Zone(zone); err != nil {
		return nil, 0, fmt.Errorf("store: goals: %w: %w", ErrInvalid, err)
	}
	op := clientv3.OpGet(s.lay.goalsZone(zone), clientv3.WithPrefix())
	if ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, 0, fmt.Errorf("store: goals: %w: %w", ErrInvalid, err)
		}
		op = clientv3.OpGet(s.lay.goal(zone, ns))
	}
	rs, rev, err := s.readAt(ctx, clientv3.OpGet(s.lay.zone(zone), clientv3.WithCountOnly()), op)
	if err != nil {
		return nil, 0, fmt.Errorf("store: goals of %s: %w", zone, err)
	}
	if rs[0].Count == 0 {
		return nil, 0, &NotFoundError{What: "zone", Name: zone}
	}
	out := make([]*lehrpb.GoalState, 0, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		g := new(lehrpb.GoalState)
		if err := decode(string(kv.Key), kv.Value, g); err != nil {
			return nil, 0, fmt.Errorf("store: goals of %s: %w", zone, err)
		}
		out = append(out, g)
	}
	return out, rev, nil
}

// Bounds of a goal's candidate cohort.
const (
	MaxCohortHosts     = 1000
	MaxCohortSaltBytes = 128
)

// SetGoal moves one goal state. The version must exist. This is the seam the
// rollout strategist uses.
//
// The store fills in the checksum (a non-empty g.Checksum must match the
// version's) and the update time; g.Reason is kept. A candidate, if set,
// must be a newer version than the goal's, with a cohort of at most
// MaxCohortHosts named hosts and per_million at most 1,000,000; its
// checksum is filled in the same way. The goal is written only if the zone
// is registered and the versions still exist at that moment, so it cannot
// race with compaction removing them.
func (s *Store) SetGoal(ctx context.Context, g *lehrpb.GoalState) error {
	zone, ns, seq := g.GetZone(), g.GetNamespace(), g.GetVersion()
	if err := names.Zone(zone); err != nil {
		return fmt.Errorf("store: set goal: %w: %w", ErrInvalid, err)
	}
	if _, _, err := names.Namespace(ns); err != nil {
		return fmt.Errorf("store: set goal: %w: %w", ErrInvalid, err)
	}
	if seq == 0 {
		return fmt.Errorf("store: set goal %s in %s: %w", ns, zone, invalidf("version must be > 0"))
	}
	rec, _, err := s.lookup(ctx, ns, seq)
	if err != nil {
		return fmt.Errorf("store: set goal %s@%d in %s: %w", ns, seq, zone, err)
	}
	sum := rec.GetInfo().GetChecksum()
	if g.GetChecksum() != "" && g.GetChecksum() != sum {
		return fmt.Errorf("store: set goal %s@%d in %s: %w", ns, seq, zone,
			invalidf("checksum %s does not match the version's %s", g.GetChecksum(), sum))
	}
	out := &lehrpb.GoalState{
		Zone: zone, Namespace: ns, Version: seq, Checksum: sum,
		UpdateTime: timestamppb.New(s.opts.Now()), Reason: g.GetReason(),
	}
	zkey, vkey := s.lay.zone(zone), s.lay.version(ns, seq)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(zkey), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(vkey), ">", 0),
	}
	if c := g.GetCandidate(); c != nil {
		cand, err := s.checkCandidate(ctx, ns, seq, c)
		if err != nil {
			return fmt.Errorf("store: set goal %s in %s: %w", ns, zone, err)
		}
		out.Candidate = cand
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.lay.version(ns, cand.GetVersion())), ">", 0))
	}
	b, err := s.encodeGoal(out)
	if err != nil {
		return fmt.Errorf("store: set goal %s@%d in %s: %w", ns, seq, zone, err)
	}
	resp, err := s.txn(ctx, cmps,
		[]clientv3.Op{clientv3.OpPut(s.lay.goal(zone, ns), string(b))},
		[]clientv3.Op{clientv3.OpGet(zkey, clientv3.WithCountOnly())})
	if err != nil {
		return fmt.Errorf("store: set goal %s@%d in %s: %w", ns, seq, zone, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return &NotFoundError{What: "zone", Name: zone}
		}
		// Compacted between the lookup and the write.
		return &NotFoundError{What: "version", Name: fmt.Sprintf("%s@%d", ns, seq)}
	}
	return nil
}

// signGoalsPage is how many goal states SignUnsignedGoals reads at once.
const signGoalsPage = 1000

// SignUnsignedGoals signs every goal state written without a signature
// (by a control of an earlier release) with Options.Signer, each in a
// transaction guarded by its mod revision so a goal changed meanwhile is
// left to its writer, and returns how many it signed. It reads the goals
// a page at a time and runs once per store: a marker key records that it
// finished, and later calls return at once. Without a Signer it does
// nothing.
func (s *Store) SignUnsignedGoals(ctx context.Context) (int, error) {
	if s.opts.Signer == nil {
		return 0, nil
	}
	done, err := s.get(ctx, s.lay.goalsSigned(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: sign goals: %w", err)
	}
	if done.Count > 0 {
		return 0, nil
	}
	n, from, end := 0, s.lay.goalsPrefix(), prefixEnd(s.lay.goalsPrefix())
	for {
		resp, err := s.get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(signGoalsPage))
		if err != nil {
			return n, fmt.Errorf("store: sign goals: %w", err)
		}
		for _, kv := range resp.Kvs {
			g := new(lehrpb.GoalState)
			if err := decode(string(kv.Key), kv.Value, g); err != nil {
				return n, err
			}
			if len(g.GetSignature()) > 0 {
				continue
			}
			b, err := s.encodeGoal(g)
			if err != nil {
				return n, err
			}
			tr, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)},
				[]clientv3.Op{clientv3.OpPut(string(kv.Key), string(b))}, nil)
			if err != nil {
				return n, fmt.Errorf("store: sign goal %s: %w", kv.Key, err)
			}
			if tr.Succeeded {
				n++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = afterKey(string(resp.Kvs[len(resp.Kvs)-1].Key))
	}
	if _, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpPut(s.lay.goalsSigned(), s.opts.Now().UTC().Format(time.RFC3339))}, nil); err != nil {
		return n, fmt.Errorf("store: sign goals: %w", err)
	}
	return n, nil
}

// encodeGoal encodes g for etcd, signed by Options.Signer when there is
// one (internal/signing.GoalPayload); g itself is not modified.
func (s *Store) encodeGoal(g *lehrpb.GoalState) ([]byte, error) {
	if s.opts.Signer != nil {
		g = proto.CloneOf(g)
		s.opts.Signer.SignGoal(g)
	}
	return encode(g)
}

// checkCandidate checks a goal's candidate against the stable version seq
// and returns it with its checksum filled in.
func (s *Store) checkCandidate(ctx context.Context, ns string, seq uint64, c *lehrpb.CandidateGoal) (*lehrpb.CandidateGoal, error) {
	switch {
	case c.GetVersion() <= seq:
		return nil, invalidf("candidate version %d is not newer than the goal's version %d", c.GetVersion(), seq)
	case len(c.GetHosts()) > MaxCohortHosts:
		return nil, invalidf("candidate names %d hosts; at most %d (use per_million for more)", len(c.GetHosts()), MaxCohortHosts)
	case c.GetPerMillion() > 1_000_000:
		return nil, invalidf("candidate per_million is %d; at most 1000000", c.GetPerMillion())
	case len(c.GetSalt()) > MaxCohortSaltBytes:
		return nil, invalidf("candidate salt is %d bytes; at most %d", len(c.GetSalt()), MaxCohortSaltBytes)
	}
	for i, h := range c.GetHosts() {
		if h == "" || len(h) > 255 {
			return nil, invalidf("candidate hosts[%d] is %d bytes; want 1 to 255", i, len(h))
		}
	}
	rec, _, err := s.lookup(ctx, ns, c.GetVersion())
	if err != nil {
		return nil, fmt.Errorf("candidate %s@%d: %w", ns, c.GetVersion(), err)
	}
	sum := rec.GetInfo().GetChecksum()
	if c.GetChecksum() != "" && c.GetChecksum() != sum {
		return nil, invalidf("candidate checksum %s does not match version %d's %s", c.GetChecksum(), c.GetVersion(), sum)
	}
	out := proto.CloneOf(c)
	out.Checksum = sum
	return out, nil
}

// GoalBatch is the goal changes of one etcd revision, progress (no events:
// nothing of the zone changed up to Revision), or a terminal error.
type GoalBatch struct {
	Revision int64
	Events   []*lehrpb.GoalEvent
	// Previous holds, for each event of Events, the goal state it
	// replaced: nil for a new goal, for a delete, or when etcd no longer
	// had it.
	Previous []*lehrpb.GoalState
	Err      error // ErrRevisionGone, or the watch failing; the channel closes after it
}

// WatchGoals streams a zone's goal changes from revision fromRev (> 0). The
// channel is closed when ctx is done or after a batch with Err set. A slow
// reader delays only itself.
//
// The contract in full:
//   - The caller owns ctx and cancels it to stop the watch; the store's
//     goroutine then exits and closes the channel. The caller need not drain
//     the channel after cancelling, but the closed channel is the signal
//     that the goroutine is gone.
//   - Batches arrive in revision order, one per etcd revision that changed
//     a goal of the zone; the first has Revision >= fromRev. Resume after a
//     batch with WatchGoals(ctx, zone, batch.Revision+1).
//   - A batch with no events is progress: etcd's periodic notification
//     that nothing of the zone changed up to Revision. Resuming after it
//     keeps a quiet zone's resume revision ahead of etcd's compaction.
//   - If fromRev was compacted by etcd the only batch has an Err wrapping
//     ErrRevisionGone: read Goals again and watch from its revision + 1.
//   - Any other failure (etcd unreachable with no member left to fail over
//     to, a member losing its leader) ends the stream with a batch whose Err
//     is set; IsUnavailable tells whether resuming later may help.
//   - The store buffers nothing beyond one batch: a reader that does not
//     receive holds up only its own watch, whose events etcd keeps.
func (s *Store) WatchGoals(ctx context.Context, zone string, fromRev int64) <-chan GoalBatch {
	ch := make(chan GoalBatch)
	if err := names.Zone(zone); err != nil {
		return failedWatch(fmt.Errorf("store: watch goals: %w: %w", ErrInvalid, err))
	}
	if fromRev <= 0 {
		return failedWatch(fmt.Errorf("store: watch goals of %s: %w", zone, invalidf("revision %d: want > 0", fromRev)))
	}
	prefix := s.lay.goalsZone(zone)
	go func() {
		defer close(ch)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		wch := s.cli.Watch(leaderOnly(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev), clientv3.WithProgressNotify(), clientv3.WithPrevKV())
		send := func(b GoalBatch) bool {
			select {
			case ch <- b:
				return true
			case <-ctx.Done():
				return false
			}
		}
		fail := func(err error) {
			s.observe("watch", start, err)
			send(GoalBatch{Err: err})
		}
		for resp := range wch {
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				fail(fmt.Errorf("store: watch goals of %s from %d (etcd compacted up to %d): %w",
					zone, fromRev, resp.CompactRevision, ErrRevisionGone))
				return
			}
			if err := resp.Err(); err != nil {
				fail(fmt.Errorf("store: watch goals of %s: %w", zone, err))
				return
			}
			if resp.IsProgressNotify() {
				if rev := resp.Header.GetRevision(); rev >= fromRev {
					fromRev = rev + 1
					if !send(GoalBatch{Revision: rev}) {
						return
					}
				}
				continue
			}
			var b GoalBatch
			for _, ev := range resp.Events {
				if b.Revision != 0 && ev.Kv.ModRevision != b.Revision {
					if !send(b) {
						return
					}
					b = GoalBatch{}
				}
				b.Revision = ev.Kv.ModRevision
				ge, prev, err := s.goalEvent(zone, ev)
				if err != nil {
					fail(fmt.Errorf("store: watch goals of %s: %w", zone, err))
					return
				}
				fromRev = b.Revision + 1
				b.Events = append(b.Events, ge)
				b.Previous = append(b.Previous, prev)
			}
			if len(b.Events) > 0 && !send(b) {
				return
			}
		}
		if ctx.Err() != nil {
			s.observe("watch", start, nil)
			return
		}
		// The client closed the watch without an error (the client itself
		// was closed).
		fail(fmt.Errorf("store: watch goals of %s: watch closed by the etcd client", zone))
	}()
	return ch
}

func failedWatch(err error) <-chan GoalBatch {
	ch := make(chan GoalBatch, 1)
	ch <- GoalBatch{Err: err}
	close(ch)
	return ch
}

func (s *Store) goalEvent(zone string, ev *clientv3.Event) (*lehrpb.GoalEvent, *lehrpb.GoalState, error) {
	key := string(ev.Kv.Key)
	if ev.Type == mvccpb.DELETE {
		return &lehrpb.GoalEvent{
			Type: lehrpb.GoalEvent_TYPE_DELETE,
			Goal: &lehrpb.GoalState{Zone: zone, Namespace: s.lay.nsFromGoal(zone, key)},
		}, nil, nil
	}
	g := new(lehrpb.GoalState)
	if err := decode(key, ev.Kv.Value, g); err != nil {
		return nil, nil, err
	}
	var prev *lehrpb.GoalState
	if ev.PrevKv != nil {
		prev = new(lehrpb.GoalState)
		if err := decode(key, ev.PrevKv.Value, prev); err != nil {
			return nil, nil, err
		}
	}
	return &lehrpb.GoalEvent{Type: lehrpb.GoalEvent_TYPE_PUT, Goal: g}, prev, nil
}

// ErrZoneInUse is DeleteZone's refusal: distributors of the zone report.
var ErrZoneInUse = errors.New("store: the zone's distributors report")

// DeleteZone removes zone — its record, its goals, its distributors'
// reports and its last report time — in one transaction. Unless force, it
// is refused with ErrZoneInUse while a distributor of the zone has a live
// report; an unknown zone is a *NotFoundError.
func (s *Store) DeleteZone(ctx context.Context, zone string, force bool) error {
	if err := names.Zone(zone); err != nil {
		return fmt.Errorf("store: delete zone: %w: %w", ErrInvalid, err)
	}
	zkey := s.lay.zone(zone)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(zkey), ">", 0)}
	if !force {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.lay.zoneStatusPrefix(zone)), "=", 0).WithPrefix())
	}
	resp, err := s.txn(ctx, cmps, []clientv3.Op{
		clientv3.OpDelete(zkey),
		clientv3.OpDelete(s.lay.goalsZone(zone), clientv3.WithPrefix()),
		clientv3.OpDelete(s.lay.zoneStatusPrefix(zone), clientv3.WithPrefix()),
		clientv3.OpDelete(s.lay.zoneReportsZone(zone), clientv3.WithPrefix()),
		clientv3.OpDelete(s.lay.zoneReported(zone)),
	}, []clientv3.Op{
		clientv3.OpGet(zkey, clientv3.WithCountOnly()),
	})
	if err != nil {
		return fmt.Errorf("store: delete zone %s: %w", zone, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().GetCount() == 0 {
			return fmt.Errorf("store: delete zone %s: %w", zone, &NotFoundError{What: "zone", Name: zone})
		}
		return fmt.Errorf("store: delete zone %s: %w", zone, ErrZoneInUse)
	}
	return nil
}
