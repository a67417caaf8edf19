package store

// The store's space: etcd's backend against its quota.
//
// etcd refuses every write once its database would grow past its backend
// quota, and then raises the NOSPACE alarm, after which it refuses writes
// until an operator disarms it — rollbacks, goal moves and the audit log
// included. The store keeps that from happening by surprise: it reads the
// size etcd compares with its quota (Status.DbSize, the extent of its
// pages, of the largest member) every SpaceOptions.Interval, adds what
// this process committed since, and refuses new content (a Commit that is
// not a rollback) with a *SpaceError in two steps:
//
//   - above the high-water mark, Quota - Reserve, from the domains that
//     hold more than their fair share of the store (the mark divided by
//     the number of domains) — the flooders — and every new domain,
//     namespace, policy and experiment (AdmitContent);
//   - above Quota - Reserve/2, from everyone.
//
// So one tenant filling the store does not stop the others, who go on
// publishing into the first half of the reserve; the second half is left
// to the safety path: rollbacks, goal moves, rollout state, the audit log
// and zone status, which never ask.
//
// Space comes back in three steps: history compaction deletes versions
// and blobs (Compact, CompactHistory), etcd's revision compaction frees
// the pages of deleted and overwritten keys for reuse, and
// defragmentation gives the free pages back, shrinking the extent (after a
// quiet moment unless space demands it: SpaceOptions.Quiet). Above
// the high-water mark, or under the NOSPACE alarm, RunSpaceMonitor does the
// last two itself (at most every spaceReclaimEvery) and, once the members'
// databases are below the quota again, disarms the alarm: the store
// recovers without an operator. Compacting etcd's revisions to the
// current one makes goal watches resumed from before it fail with
// ErrRevisionGone, which distributors handle by reading their goals
// afresh; defragmenting a member stalls its requests while it runs (a
// second or so per GiB), one member at a time.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of SpaceOptions.
const (
	// DefaultEtcdQuota is etcd's own default backend quota, assumed for an
	// external cluster that does not report its quota (etcd before 3.6)
	// when SpaceOptions.Quota is not set.
	DefaultEtcdQuota = 2 << 30
	// DefaultSpaceInterval is how often the store reads etcd's status.
	DefaultSpaceInterval = time.Second
	// DefaultReserveFraction of the quota is the default reserve, but at
	// least minReserve (half the quota at most).
	DefaultReserveFraction = 5 // one fifth
	// minReserve holds what a step of etcd's revision compaction may
	// rewrite before freed pages are reused (64 revisions next to values
	// of up to 512 KiB, embedetcd.DefaultCompactionBatchLimit) and the
	// safety writes meanwhile.
	minReserve = 40 << 20
)

// DefragFree is the fraction of a member's file that must be free pages
// for a defragmentation to be worth the stall it causes (and for an
// embedded member's rewrite at start, embedetcd.Options.CompactAtStart).
const DefragFree = 0.1

// spaceReclaimEvery bounds how often the monitor compacts and defragments
// etcd (a sixth of it under the NOSPACE alarm): each defragmentation
// stalls the member it runs on.
const spaceReclaimEvery = 30 * time.Second

// SpaceOptions configure the store's watch over etcd's space.
type SpaceOptions struct {
	// Quota is etcd's backend quota in bytes. 0: the quota etcd reports
	// (etcd 3.6 and later), else DefaultEtcdQuota. When both are known
	// and differ, the smaller one is used.
	Quota int64
	// Reserve is the part of the quota only safety writes may use; 0:
	// Quota/DefaultReserveFraction, at least 40 MiB (at most half the
	// quota): what one step of etcd's revision compaction may rewrite
	// before the pages it frees are reused, and the safety writes.
	Reserve int64
	// Interval is how often etcd's status is read; 0:
	// DefaultSpaceInterval.
	Interval time.Duration
	// Quiet reports whether the store's callers are idle now. A
	// defragmentation that space does not demand (no NOSPACE alarm, below
	// the high-water mark) waits for it — at most MaxDefragDelay — since a
	// member stalls every request while it is defragmented (about a second
	// per GiB: 19 s at 4.7 GiB). nil: always idle.
	Quiet func() bool
	// DefragAtStart says the member gives its free pages back at its next
	// start, before serving (an embedded etcd:
	// embedetcd.Options.CompactAtStart): a defragmentation space does not
	// demand is then not run online — where it stalls every request that
	// arrives while it runs, quiet moment or not — but left to then.
	DefragAtStart bool
}

// MaxDefragDelay bounds how long a defragmentation space does not demand
// waits for the store's callers to be quiet (SpaceOptions.Quiet).
const MaxDefragDelay = time.Hour

// SpaceError says the store is above its high-water mark: new content is
// refused until space is freed. It wraps ErrStoreFull.
type SpaceError struct {
	// Used is the store's level (SpaceStatus.Level); HighWater is Quota -
	// Reserve; Limit is the mark the write was refused at (HighWater, or
	// Quota - Reserve/2 beyond which no content goes); Adding is what the
	// refused write would add. Bytes.
	Used, HighWater, Quota, Limit, Adding int64
	// FairShare is set when Domain was refused between the high-water
	// mark and the hard mark for holding more than it (DomainBytes).
	FairShare, DomainBytes int64
	Domain                 string
	// Alarm is set when etcd itself refuses writes (its NOSPACE alarm).
	Alarm bool
}

func (e *SpaceError) Error() string {
	if e.Alarm {
		return fmt.Sprintf("store: etcd is out of space (NOSPACE alarm, %d of %d bytes)", e.Used, e.Quota)
	}
	return fmt.Sprintf("store: %d bytes used of a %d-byte quota, above the high-water mark of %d; refusing %d more bytes of content",
		e.Used, e.Quota, e.HighWater, e.Adding)
}

// Unwrap returns ErrStoreFull.
func (e *SpaceError) Unwrap() error { return ErrStoreFull }

// SpaceStatus is the store's space as last read (Store.Space).
type SpaceStatus struct {
	// Known is false until etcd's status was read once.
	Known bool
	// Quota and Reserve in force; HighWater is Quota - Reserve.
	Quota, Reserve, HighWater int64
	// Domains is how many domains there are (the fair share of each is
	// HighWater / Domains).
	Domains int64
	// DBSize is the size etcd compares with its quota (the largest
	// member's), DBSizeInUse what of it holds data; Pending is what this
	// process committed since they were read.
	DBSize, DBSizeInUse, Pending int64
	// Alarm is set while etcd's NOSPACE alarm is raised.
	Alarm bool
	// DefragAtStart is set while a defragmentation is left to the
	// member's next start (SpaceOptions.DefragAtStart).
	DefragAtStart bool
	// Revision is etcd's revision when the status was read: every write
	// to the cluster (Lehr's or anyone's) adds one, so its rate is the
	// write rate.
	Revision int64
	// ReadAt is when etcd's status was last read.
	ReadAt time.Time
}

// space is the store's view of etcd's space (see the file comment).
type space struct {
	opts SpaceOptions

	mu          sync.Mutex
	st          SpaceStatus
	lastReclaim time.Time
	requested   bool // wantReclaim
	// deferredSince is when a defragmentation was first put off for want
	// of quiet; zero: none is waiting.
	deferredSince time.Time
}

func newSpace(opts SpaceOptions) *space {
	if opts.Interval <= 0 {
		opts.Interval = DefaultSpaceInterval
	}
	return &space{opts: opts}
}

// Level is what the store's high-water mark is compared with: the data
// etcd holds plus what was committed since it was read — or, when etcd's
// database is fragmented to within half the reserve of its quota, what
// keeps that much of the database's room for the safety path (etcd
// compares its whole database, free pages included, with the quota).
func (st SpaceStatus) Level() int64 {
	return max(st.DBSizeInUse+st.Pending, st.DBSize+st.Pending-st.Reserve/2)
}

// HardMark is what no new content goes beyond: Quota - Reserve/2.
func (st SpaceStatus) HardMark() int64 { return st.Quota - st.Reserve/2 }

// FairShare is what a domain may hold and still publish above the
// high-water mark: the mark divided by the number of domains.
func (st SpaceStatus) FairShare() int64 { return st.HighWater / max(1, st.Domains) }

// admit counts n bytes of a write by a domain holding domainBytes and,
// unless safety, refuses it with a *SpaceError if it would take the store
// above its hard mark, or above its high-water mark while the domain
// holds more than its fair share. Before etcd's status is first read
// every write is admitted.
func (sp *space) admit(n int64, safety bool, domainBytes int64) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	st := &sp.st
	if st.Known && !safety {
		level := st.Level()
		e := &SpaceError{Used: level, HighWater: st.HighWater, Quota: st.Quota, Limit: st.HardMark(), Adding: n, Alarm: st.Alarm}
		switch {
		case st.Alarm || level+n > st.HardMark():
			return e
		case level+n > st.HighWater && domainBytes+n > st.FairShare():
			e.Limit, e.FairShare, e.DomainBytes = st.HighWater, st.FairShare(), domainBytes
			return e
		}
	}
	st.Pending += n
	return nil
}

// wantReclaim asks the monitor to reclaim space at its next reading,
// whatever the level: history compaction just deleted something.
func (sp *space) wantReclaim() {
	sp.mu.Lock()
	sp.requested = true
	sp.mu.Unlock()
}

// admitSpace is space.admit, counting refusals (Options.OnSpaceEvent).
func (s *Store) admitSpace(n int64, safety bool, domainBytes int64) error {
	err := s.space.admit(n, safety, domainBytes)
	if err != nil {
		s.spaceEvent("refused")
	}
	return err
}

func (s *Store) spaceEvent(event string) {
	if s.opts.OnSpaceEvent != nil {
		s.opts.OnSpaceEvent(event)
	}
}

// Space returns the store's space as last read.
func (s *Store) Space() SpaceStatus {
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	return s.space.st
}

// AdmitContent refuses, with a *SpaceError, a write of n bytes of new
// content (a domain, a namespace, a rollout policy, an experiment) while
// the store is above its high-water mark, whoever asks: what is left
// there goes to the versions of domains within their fair share. Commit
// checks its versions itself.
func (s *Store) AdmitContent(n int64) error {
	if err := s.admitSpace(n, false, math.MaxInt64-n); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// memberStatus is one member's answer.
type memberStatus struct {
	endpoint                string
	dbSize, inUse, quota    int64
	revision                int64
	memberID                uint64
	alarmNoSpace, reachable bool
}

// endpoints returns the members to ask: the client's endpoints, or ""
// for an in-process client (etcd's v3client), which has none.
func (s *Store) endpoints() []string {
	if eps := s.maint.Endpoints(); len(eps) > 0 {
		return eps
	}
	return []string{""}
}

// readSpace reads every member's status and the alarms, and updates the
// space. It returns the members' statuses.
func (s *Store) readSpace(ctx context.Context) ([]memberStatus, error) {
	var ms []memberStatus
	var errs []error
	for _, ep := range s.endpoints() {
		r, err := call(s, ctx, "status", func(ctx context.Context) (*clientv3.StatusResponse, error) {
			return s.maint.Status(ctx, ep)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("status of %q: %w", ep, err))
			continue
		}
		ms = append(ms, memberStatus{endpoint: ep, dbSize: r.DbSize, inUse: r.DbSizeInUse, quota: r.DbSizeQuota,
			revision: r.Header.GetRevision(), memberID: r.Header.GetMemberId(), reachable: true})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("store: read etcd's space: %w", errors.Join(errs...))
	}
	doms, err := s.get(ctx, s.lay.domainsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("store: count domains: %w", err)
	}
	alarms, err := call(s, ctx, "alarm_list", s.maint.AlarmList)
	if err != nil {
		return nil, fmt.Errorf("store: list etcd's alarms: %w", err)
	}
	alarm := false
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			alarm = true
			for i := range ms {
				if ms[i].memberID == a.MemberID {
					ms[i].alarmNoSpace = true
				}
			}
		}
	}

	sp := s.space
	quota := sp.opts.Quota
	for _, m := range ms {
		if m.quota > 0 && (quota == 0 || m.quota < quota) {
			if sp.opts.Quota > 0 && m.quota != sp.opts.Quota {
				s.log.Warn("store: etcd's backend quota differs from the one configured; using the smaller",
					"etcd_quota", m.quota, "configured", sp.opts.Quota, "member", m.endpoint)
			}
			quota = m.quota
		}
	}
	if quota == 0 {
		quota = DefaultEtcdQuota
	}
	reserve := sp.opts.Reserve
	if reserve <= 0 || reserve >= quota {
		reserve = max(quota/DefaultReserveFraction, min(minReserve, quota/2))
	}
	var dbSize, inUse int64
	for _, m := range ms {
		dbSize, inUse = max(dbSize, m.dbSize), max(inUse, m.inUse)
	}
	sp.mu.Lock()
	wasKnown := sp.st.Known
	sp.st.Known, sp.st.Quota, sp.st.Reserve, sp.st.HighWater, sp.st.Domains = true, quota, reserve, quota-reserve, doms.Count
	sp.st.DBSize, sp.st.DBSizeInUse, sp.st.Pending, sp.st.Alarm, sp.st.ReadAt = dbSize, inUse, 0, alarm, s.opts.Now()
	sp.st.Revision = doms.Header.GetRevision()
	sp.mu.Unlock()
	if !wasKnown {
		s.log.Info("store: etcd's space", "quota", quota, "reserve", reserve, "db_size", dbSize, "in_use", inUse, "members", len(ms))
	}
	return ms, nil
}

// RunSpaceMonitor reads etcd's space every SpaceOptions.Interval until
// ctx is done, and reclaims space — compacting etcd's revisions,
// defragmenting fragmented members one at a time, disarming a NOSPACE
// alarm once there is room — when etcd's data or database is above the
// high-water mark or etcd raised the alarm (at most every 30 s), and right
// after CompactHistory removed versions. Errors are logged; it returns nil
// when ctx is done.
// Several control replicas may run it: what they do is idempotent.
func (s *Store) RunSpaceMonitor(ctx context.Context) error {
	t := time.NewTicker(s.space.opts.Interval)
	defer t.Stop()
	failing := false
	for {
		_, err := s.readSpace(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			s.log.Warn("store: cannot read etcd's space; keeping the last reading", "err", err)
		case err == nil:
			failing = false
			if err := s.maybeReclaim(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("store: reclaiming etcd's space", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// maybeReclaim reclaims space when the store needs it (see
// RunSpaceMonitor) — at most every spaceReclaimEvery, unless asked to
// (wantReclaim).
func (s *Store) maybeReclaim(ctx context.Context) error {
	sp := s.space
	sp.mu.Lock()
	st, requested := sp.st, sp.requested
	due := st.Alarm || st.DBSizeInUse > st.HighWater || st.DBSize > st.HighWater
	every := spaceReclaimEvery
	if st.Alarm {
		every /= 6 // nothing is written meanwhile: no stall to spare
	}
	if !requested && (!due || s.opts.Now().Sub(sp.lastReclaim) < every) {
		deferred := !sp.deferredSince.IsZero()
		sp.mu.Unlock()
		if deferred {
			return s.defragment(ctx, false)
		}
		return nil
	}
	sp.lastReclaim, sp.requested = s.opts.Now(), false
	sp.mu.Unlock()
	return s.reclaim(ctx, st)
}

// defragment defragments every member whose free pages are worth it, one
// at a time. Unless urgent (space demands it), it waits for the callers
// to be quiet (SpaceOptions.Quiet), at most MaxDefragDelay: put off, it
// is tried again at the monitor's next readings.
func (s *Store) defragment(ctx context.Context, urgent bool) error {
	// The pages compaction freed show in DbSizeInUse only now.
	ms, err := s.readSpace(ctx)
	if err != nil {
		return err
	}
	// Defragmenting stalls the member; it is worth it when a tenth of its
	// pages or more are free.
	ms = slices.DeleteFunc(ms, func(m memberStatus) bool {
		free := m.dbSize - m.inUse
		return float64(free) < DefragFree*float64(m.dbSize) || free <= 0
	})
	sp := s.space
	sp.mu.Lock()
	if len(ms) == 0 {
		sp.deferredSince = time.Time{}
		sp.st.DefragAtStart = false
		sp.mu.Unlock()
		return nil
	}
	if !urgent && sp.opts.DefragAtStart {
		if !sp.st.DefragAtStart {
			sp.st.DefragAtStart = true
			s.log.Info("store: etcd's free pages are given back at control's next start (an online defragmentation would stall every call meanwhile), or online once space demands it",
				"db_size", ms[0].dbSize, "in_use", ms[0].inUse)
		}
		sp.mu.Unlock()
		return nil
	}
	now := s.opts.Now()
	if !urgent && sp.opts.Quiet != nil && !sp.opts.Quiet() {
		if sp.deferredSince.IsZero() {
			sp.deferredSince = now
			s.log.Info("store: defragmentation waits for a quiet moment (it stalls the member's requests)",
				"members", len(ms), "at_most", MaxDefragDelay)
		}
		if now.Sub(sp.deferredSince) < MaxDefragDelay {
			sp.mu.Unlock()
			return nil
		}
		s.log.Warn("store: defragmenting although callers are busy: it waited its longest", "waited", now.Sub(sp.deferredSince).Round(time.Second))
	}
	sp.deferredSince = time.Time{}
	sp.mu.Unlock()
	for _, m := range ms {
		start := time.Now()
		_, err := s.maint.Defragment(ctx, m.endpoint)
		s.observe("defragment", start, err)
		if err != nil {
			return fmt.Errorf("defragment %q: %w", m.endpoint, err)
		}
		s.spaceEvent("defragment")
		s.log.Info("store: defragmented an etcd member", "member", m.endpoint, "took", time.Since(start).Round(time.Millisecond),
			"db_size_before", m.dbSize, "in_use", m.inUse)
	}
	return nil
}

// reclaim compacts etcd's revisions to the current one, defragments every
// member whose free pages are worth it, one at a time (waiting for quiet
// unless space demands it: defragment), and disarms a
// NOSPACE alarm once every member is below the quota with room for the
// safety writes.
func (s *Store) reclaim(ctx context.Context, st SpaceStatus) error {
	// The revision now, not at the last reading: what was deleted since
	// (the history compaction that asked for this reclaim) must be in it.
	ms, err := s.readSpace(ctx)
	if err != nil {
		return err
	}
	rev := int64(0)
	for _, m := range ms {
		rev = max(rev, m.revision)
	}
	s.log.Info("store: reclaiming etcd's space: compacting its revisions, then defragmenting what is fragmented",
		"db_size", st.DBSize, "in_use", st.DBSizeInUse, "high_water", st.HighWater, "quota", st.Quota, "nospace_alarm", st.Alarm, "revision", rev)
	start := time.Now()
	_, err = s.cli.Compact(leaderOnly(ctx), rev, clientv3.WithCompactPhysical())
	s.observe("compact", start, err)
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact etcd's revisions to %d: %w", rev, err)
	}
	s.spaceEvent("compact")
	urgent := st.Alarm || st.DBSizeInUse > st.HighWater || st.DBSize > st.HighWater
	if err := s.defragment(ctx, urgent); err != nil {
		return err
	}
	if ms, err = s.readSpace(ctx); err != nil {
		return err
	}
	st = s.Space()
	if !st.Alarm {
		return nil
	}
	// Disarm once every member has room under the quota for what the
	// safety path writes: half the reserve.
	if i := slices.IndexFunc(ms, func(m memberStatus) bool { return m.dbSize > st.Quota-st.Reserve/2 }); i >= 0 {
		s.log.Warn("store: etcd's NOSPACE alarm stays: a member is still too full; free space (compact history) or raise the quota",
			"member", ms[i].endpoint, "db_size", ms[i].dbSize, "in_use", ms[i].inUse, "quota", st.Quota)
		return nil
	}
	alarms, err := call(s, ctx, "alarm_list", s.maint.AlarmList)
	if err != nil {
		return fmt.Errorf("list etcd's alarms: %w", err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm != etcdserverpb.AlarmType_NOSPACE {
			continue
		}
		if _, err := call(s, ctx, "alarm_disarm", func(ctx context.Context) (*clientv3.AlarmResponse, error) {
			return s.maint.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm})
		}); err != nil {
			return fmt.Errorf("disarm etcd's NOSPACE alarm of member %x: %w", a.MemberID, err)
		}
		s.spaceEvent("disarm")
		s.log.Warn("store: disarmed etcd's NOSPACE alarm: there is room again", "member", fmt.Sprintf("%x", a.MemberID))
	}
	_, err = s.readSpace(ctx)
	return err
}

// IsNoSpace reports whether err is etcd refusing a write for lack of
// space (its backend quota, or the NOSPACE alarm raised).
func IsNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace)
}
