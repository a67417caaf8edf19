package store

// Versions and the commit algorithm.
//
// A version of a namespace is stored as a small VersionRecord under
// data/<ns>/v/<seq> that lists content-addressed manifest chunks, which list
// content-addressed value blobs, all under data/<ns>/b/<sha256>. etcd limits
// a request to 1.5 MiB by default while a namespace may hold 16 MiB, so a
// large version takes several requests to write; only the last one makes it
// visible. Commit runs, in at most maxCommitAttempts rounds:
//
//  1. Read the head (nsmeta/<ns>), the domain, the request record of
//     c.RequestID, the tombstones of the name and of its domain
//     (delete.go) and, for GoalsAllZones, the zones, all at one revision R
//     (with c.Rollout also the zones and the rollout policies of the
//     namespace and its domain; its Decide may read the namespace's goals
//     and latest rollout at R too: commitrollout.go).
//     If the request record exists, the version it names is the answer:
//     this is a retry of a commit whose response was lost. Otherwise
//     the latest version must be c.ExpectedLatest (*ConflictError naming the
//     current one), and a missing namespace needs c.Create and an existing
//     domain (*NotFoundError).
//  2. Stage blobs. Every value blob and manifest chunk that the parent (the
//     latest version at R) does not reference is put, even if it already
//     exists, in transactions of at most maxTxnPayload bytes. Staged blobs
//     are invisible: no version refers to them yet.
//  3. One transaction, guarded by the head's mod revision read at R (or its
//     absence and the domain's create revision) and, for GoalsAllZones, by
//     every zones/ key having a mod revision <= R, puts the VersionRecord
//     (seq latest+1; a namespace's first version continues after the last
//     version a tombstone records, or is 1; above a restore's floor,
//     restore.go), the new head, the request
//     record, and goals/<zone>/<ns> for every zone read at R — or what
//     c.Rollout decided: rollout records and events, guarded by the
//     namespace's rollouts being as read, and goals. Either all of it
//     becomes visible or none of it does.
//
// If the guard fails the round starts over: a moved latest version then ends
// in a *ConflictError (or the idempotent answer) — unless c.Rebase, which
// commits on the new latest instead — while a head touched only by
// compaction (which rewrites oldest_version) or a new zone simply retries.
// These optimistic rounds are the only retries on the server side of a
// publish; see docs/design.md, "Retries".
// Staging is redone every round, which is what makes blob GC safe; see
// compact.go.
//
// Reads assemble a version from the record, chunks and values at the single
// revision the record was read at, so a concurrent compaction cannot tear
// them, and verify the result against the recorded checksum (ErrCorrupt).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// maxReadAttempts bounds the retries of a read whose revision etcd
// compacted while it was being assembled.
const maxReadAttempts = 4

// GoalPolicy says what a commit does to zone goal states.
type GoalPolicy int

const (
	// GoalsAllZones sets every registered zone's goal for the namespace to the
	// new version in the same transaction as the commit.
	GoalsAllZones GoalPolicy = iota
	// GoalsNone leaves goal states alone (a rollout strategist moves them).
	GoalsNone
)

// Commit is one new version to store.
type Commit struct {
	Namespace string
	// Create the namespace with Kind if it does not exist (its domain must).
	// Kind is ignored for an existing namespace.
	Create bool
	Kind   lehrpb.NamespaceKind
	// The commit succeeds only if the namespace's latest version is still
	// ExpectedLatest (0: no version yet); otherwise *ConflictError.
	ExpectedLatest uint64
	// Rebase commits on top of whatever version is latest when the final
	// transaction runs, instead of requiring ExpectedLatest (ignored then):
	// for content that does not depend on its parent (a snapshot publish, a
	// rollback). Another writer's commit makes Commit start a new round, as
	// a guard failure does; it never returns *ConflictError.
	Rebase bool
	// The complete content of the new version.
	Content content.Snapshot
	// Author, Message, Source, RollbackOf and TransportIdentity are copied;
	// the store fills namespace, seq, checksum, parent, create_time and sizes.
	Info *lehrpb.VersionInfo
	// RequestID, if set, makes the commit idempotent: when a version was
	// committed with the same RequestID (within Retention.Requests), Commit
	// returns it unchanged — even if other versions were committed on top
	// since, and whatever ExpectedLatest says — instead of a new version.
	RequestID string
	// Goals and GoalReason say how goal states follow the commit.
	Goals      GoalPolicy
	GoalReason string
	// Rollout, if set (only with GoalsNone), may start the version's
	// rollout in the version's own transaction: its Decide is asked in
	// every round, and what it decides — rollout records, every zone's
	// goal — is written with the version, or nothing is
	// (commitrollout.go).
	Rollout *RolloutAtCommit
	// Experiment, if set, names an experiment of the namespace to delete in
	// the version's own transaction (a policy experiment's commit), which
	// then also requires the experiment's record to be still at
	// Experiment.ModRevision: the new version and the deletion become
	// visible together or not at all. A record that is gone is a
	// *NotFoundError; one that changed wraps ErrConflict.
	Experiment *ExperimentRef
	// DeletePolicy marks the namespace deleted (Namespace.delete_time) and
	// deletes every experiment of it in the version's own transaction,
	// which then also requires the experiments to be as they were read:
	// the policy's deletion (AIP-236's cascade) is one atomic step. The
	// deleted experiments' ids are in Deleted. Any commit without it
	// clears delete_time.
	DeletePolicy bool
	// Deleted receives, if not nil, the ids of the experiments a
	// DeletePolicy commit deleted.
	Deleted *[]string
	// ExpectedChecks are kept with the version for its rollout's canary
	// analyses (ExpectedChecks): what the version is meant to change.
	ExpectedChecks []*lehrpb.CanaryCheck
	// Limits are the limits of the namespace's domain (usage.go): a
	// commit beyond them is a *QuotaError or *RateError and changes
	// nothing. The zero value limits nothing.
	Limits DomainLimits
}

// ExperimentRef names an experiment record at a mod revision.
type ExperimentRef struct {
	ID          string
	ModRevision int64
}

// Commit stores a new immutable version atomically: either the version, the
// namespace head and (per c.Goals) the goal states all change, or nothing
// visible does. Large content is written in several requests first, each
// within etcd's request size limit; only the final transaction makes it
// visible.
//
// An error for which IsUnavailable is true leaves it unknown whether the
// version was committed; retry with the same RequestID.
func (s *Store) Commit(ctx context.Context, c Commit) (*lehrpb.VersionInfo, error) {
	domain, _, err := names.Namespace(c.Namespace)
	if err != nil {
		return nil, fmt.Errorf("store: commit: %w: %w", ErrInvalid, err)
	}
	if c.Goals != GoalsAllZones && c.Goals != GoalsNone {
		return nil, fmt.Errorf("store: commit %s: %w", c.Namespace, invalidf("unknown goal policy %d", c.Goals))
	}
	if c.Rollout != nil {
		if c.Goals != GoalsNone || c.Rollout.Decide == nil {
			return nil, fmt.Errorf("store: commit %s: %w", c.Namespace, invalidf("a rollout decided at commit needs GoalsNone and a Decide function"))
		}
		c.Rollout.Started = nil
	}
	m, err := buildManifest(c.Content)
	if err != nil {
		return nil, fmt.Errorf("store: commit %s: %w", c.Namespace, err)
	}
	var info *lehrpb.VersionInfo
	err = optimistic(ctx, "commit "+c.Namespace, func(attempt int) (bool, error) {
		// The first round reads without a quorum (serializable): its
		// transaction's guards make a commit on stale reads impossible,
		// and a linearizable read waits behind etcd's raft loop, which may
		// be busy syncing another write. Anything but a commit — an error,
		// a conflict, a failed guard — is decided by a round that reads
		// with one.
		quorum := attempt > 0
		got, err := s.tryCommit(ctx, c, domain, m, quorum)
		var txnErr *versionTxnError
		if err != nil && !quorum && !errors.As(err, &txnErr) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("store: commit %s: %w", c.Namespace, err)
		}
		info = got
		return info != nil, nil
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// versionTxnError is the failure of a commit's final transaction, which
// may have committed all the same (an etcd timeout): unlike the failures
// of its reads, Commit never retries it.
type versionTxnError struct{ err error }

func (e *versionTxnError) Error() string { return e.err.Error() }
func (e *versionTxnError) Unwrap() error { return e.err }

// tryCommit is one round of the commit algorithm. It returns nil, nil when
// the final transaction's guard failed and the round should be repeated.
// quorum false reads without a quorum (see Commit).
func (s *Store) tryCommit(ctx context.Context, c Commit, domain string, m *manifest, quorum bool) (*lehrpb.VersionInfo, error) {
	get := func(key string, opts ...clientv3.OpOption) clientv3.Op {
		if !quorum {
			opts = append(opts, clientv3.WithSerializable())
		}
		return clientv3.OpGet(key, opts...)
	}
	hkey := s.lay.nsmeta(c.Namespace)
	rkey := s.lay.request(c.Namespace, c.RequestID)
	ukey := s.lay.usage(domain)
	dkey := s.lay.domain(domain)
	const iHead, iDomain, iRequest, iUsage, iTomb, iDomainTomb, iRestore = 0, 1, 2, 3, 4, 5, 6
	ops := []clientv3.Op{
		iHead:    get(hkey),
		iDomain:  get(dkey, clientv3.WithKeysOnly()),
		iRequest: get(rkey), // empty for an empty request id
		iUsage:   get(ukey),
		// A deleted namespace's or domain's last version, which a
		// namespace created again under the name continues after.
		iTomb:       get(s.lay.nsTombstone(c.Namespace)),
		iDomainTomb: get(s.lay.domainTombstone(domain)),
		// A restored store's version floor, which every version goes
		// above (restore.go).
		iRestore: get(s.lay.restore()),
	}
	iZones := -1
	if c.Goals == GoalsAllZones || c.Rollout != nil {
		iZones = len(ops)
		ops = append(ops, get(s.lay.zonesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	iPolicies := -1
	if c.Rollout != nil {
		iPolicies = len(ops)
		ops = append(ops, s.commitPolicies(c.Namespace, domain, get)...)
	}
	var ekey string
	if c.Experiment != nil {
		ekey = s.lay.experiment(c.Namespace, c.Experiment.ID)
		ops = append(ops, get(ekey, clientv3.WithKeysOnly()))
	}
	var xprefix string
	if c.DeletePolicy {
		xprefix = s.lay.experimentsOf(c.Namespace)
		ops = append(ops, get(xprefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	rs, rev, err := s.readAt(ctx, ops...)
	if err != nil {
		return nil, err
	}
	var deleted []string
	if c.DeletePolicy {
		for _, kv := range rs[len(rs)-1].Kvs {
			deleted = append(deleted, string(kv.Key[len(xprefix):]))
		}
		rs = rs[:len(rs)-1]
	}
	if c.Experiment != nil {
		switch kvs := rs[len(rs)-1].Kvs; {
		case len(kvs) == 0:
			return nil, &NotFoundError{What: "experiment", Name: c.Namespace + "/" + c.Experiment.ID}
		case kvs[0].ModRevision != c.Experiment.ModRevision:
			return nil, fmt.Errorf("experiment %s/%s changed concurrently: %w", c.Namespace, c.Experiment.ID, ErrConflict)
		}
	}
	if c.RequestID != "" && len(rs[iRequest].Kvs) > 0 {
		rec := new(lehrpb.RequestRecord)
		if err := decode(rkey, rs[iRequest].Kvs[0].Value, rec); err != nil {
			return nil, err
		}
		return rec.GetInfo(), nil
	}
	usage, err := decodeUsage(rs[iUsage])
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	var head *lehrpb.Namespace
	var headMod int64
	if len(rs[iHead].Kvs) == 0 {
		switch {
		case !c.Create:
			return nil, &NotFoundError{What: "namespace", Name: c.Namespace}
		case len(rs[iDomain].Kvs) == 0:
			return nil, &NotFoundError{What: "domain", Name: domain}
		case c.ExpectedLatest != 0 && !c.Rebase:
			return nil, &ConflictError{Namespace: c.Namespace, Expected: c.ExpectedLatest, Current: 0}
		}
		head = &lehrpb.Namespace{Name: c.Namespace, Kind: c.Kind, CreateTime: timestamppb.New(now)}
	} else {
		head = new(lehrpb.Namespace)
		if err := decode(hkey, rs[iHead].Kvs[0].Value, head); err != nil {
			return nil, err
		}
		headMod = rs[iHead].Kvs[0].ModRevision
	}
	latest := head.GetLatestVersion()
	var parent *storedVersion
	if latest > 0 {
		// The parent as this process committed it, if it did and still
		// holds it; else as its record says.
		pinfo, stored, ok := s.contents.committed(c.Namespace, content.Ref{Seq: latest, Checksum: head.GetLatestChecksum()})
		if ok {
			parent = stored
		} else {
			rec, err := s.record(ctx, c.Namespace, latest, rev)
			if err != nil {
				return nil, err
			}
			if rec == nil {
				return nil, fmt.Errorf("%w: head names version %d, which is missing", ErrCorrupt, latest)
			}
			pinfo, parent = rec.GetInfo(), &storedVersion{chunks: rec.GetManifestChunks(), requestID: rec.GetRequestId()}
		}
		if c.RequestID != "" && parent.requestID == c.RequestID {
			return proto.CloneOf(pinfo), nil
		}
	}
	if latest != c.ExpectedLatest && !c.Rebase {
		return nil, &ConflictError{Namespace: c.Namespace, Expected: c.ExpectedLatest, Current: latest}
	}
	var zones []string
	if iZones >= 0 {
		for _, kv := range rs[iZones].Kvs {
			zones = append(zones, s.lay.zoneFromKey(string(kv.Key)))
		}
	}

	seq := latest + 1
	if latest == 0 {
		// The namespace's first version: after the last version of any
		// namespace deleted under its name (delete.go).
		base, err := tombstoneBase(rs[iTomb], rs[iDomainTomb])
		if err != nil {
			return nil, err
		}
		seq = base + 1
	}
	restored, err := decodeRestore(s.lay.restore(), rs[iRestore])
	if err != nil {
		return nil, err
	}
	if floor := restored.GetVersionFloor(); seq <= floor {
		seq = floor + 1
	}
	in := c.Info
	info := &lehrpb.VersionInfo{
		Namespace:         c.Namespace,
		Seq:               seq,
		Checksum:          c.Content.Checksum(),
		Author:            in.GetAuthor(),
		Message:           in.GetMessage(),
		CreateTime:        timestamppb.New(now),
		Parent:            latest,
		Source:            in.GetSource(),
		RollbackOf:        in.GetRollbackOf(),
		SizeBytes:         c.Content.Size(),
		PropertyCount:     int32(c.Content.Len()),
		TransportIdentity: in.GetTransportIdentity(),
	}
	if s.opts.Signer != nil {
		s.opts.Signer.Sign(info, head.GetKind())
	}
	var started *StartedRollout
	if c.Rollout != nil && latest > 0 {
		if started, err = s.decideRollout(ctx, c, info, zones, rs[iPolicies:iPolicies+2], rev, get); err != nil {
			return nil, err
		}
	}
	recBytes, err := encode(&lehrpb.VersionRecord{Info: info, ManifestChunks: m.chunkHashes, RequestId: c.RequestID, ExpectedChecks: c.ExpectedChecks})
	if err != nil {
		return nil, err
	}
	vkey := s.lay.version(c.Namespace, seq)

	// What the version adds to the store, counted against its domain
	// (usage.go) and the store's high-water mark (space.go) before
	// anything is written.
	puts, err := s.blobsToPut(ctx, c.Namespace, m, parent, rev)
	if err != nil {
		return nil, err
	}
	added := putSize(vkey, recBytes)
	for _, p := range puts {
		added += putSize(p.key, p.value)
	}
	safety := in.GetSource() == lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK
	nextUsage, err := usage.charge(domain, added, c.Limits, now, safety)
	if err != nil {
		return nil, err
	}
	if err := s.admitSpace(added, safety, usage.rec.GetStoredBytes()); err != nil {
		var se *SpaceError
		if errors.As(err, &se) {
			se.Domain = domain
		}
		return nil, err
	}

	inline, err := s.stage(ctx, puts)
	if err != nil {
		return nil, err
	}
	// Crash point of the kill matrix (testenv/chaos): blobs staged, the
	// version transaction not run.
	// gofail: var storeAfterStage struct{}

	// Readers that see this version's record before its content is put
	// (CachedContent, from the goal watch) wait for the put.
	defer s.contents.commit(c.Namespace, seq)()
	newHead := proto.CloneOf(head)
	newHead.LatestVersion = seq
	newHead.LatestChecksum = info.Checksum
	newHead.SizeBytes = info.SizeBytes
	newHead.PropertyCount = info.PropertyCount
	newHead.StoredBytes += added
	if newHead.OldestVersion == 0 {
		newHead.OldestVersion = seq
	}
	newHead.DeleteTime = nil
	if c.DeletePolicy {
		newHead.DeleteTime = timestamppb.New(now)
	}
	headBytes, err := encode(newHead)
	if err != nil {
		return nil, err
	}

	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(hkey), "=", headMod)}
	if headMod == 0 {
		// Creating the namespace: also in the very domain read, which a
		// DeleteDomain must not remove under it.
		cmps[0] = clientv3.Compare(clientv3.CreateRevision(hkey), "=", 0)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dkey), "=", rs[iDomain].Kvs[0].CreateRevision))
	}
	then := []clientv3.Op{
		clientv3.OpPut(vkey, string(recBytes)),
		clientv3.OpPut(hkey, string(headBytes)),
	}
	if c.Experiment != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ekey), "=", c.Experiment.ModRevision))
		then = append(then, clientv3.OpDelete(ekey))
	}
	if c.DeletePolicy {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(xprefix), "<", rev+1).WithPrefix())
		then = append(then, clientv3.OpDelete(xprefix, clientv3.WithPrefix()))
	}
	var lease clientv3.LeaseID
	if c.RequestID != "" {
		reqBytes, err := encode(&lehrpb.RequestRecord{Info: info})
		if err != nil {
			return nil, err
		}
		if lease, err = s.requestLease(ctx); err != nil {
			return nil, err
		}
		then = append(then, clientv3.OpPut(rkey, string(reqBytes), clientv3.WithLease(lease)))
	}
	if c.Goals == GoalsAllZones {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.lay.zonesPrefix()), "<", rev+1).WithPrefix())
		for _, z := range zones {
			g, err := s.encodeGoal(&lehrpb.GoalState{
				Zone: z, Namespace: c.Namespace, Version: seq, Checksum: info.Checksum,
				UpdateTime: timestamppb.New(now), Reason: c.GoalReason,
			})
			if err != nil {
				return nil, err
			}
			then = append(then, clientv3.OpPut(s.lay.goal(z, c.Namespace), string(g)))
		}
	}
	if started != nil {
		rcmps, rops, err := s.rolloutWrites(c.Namespace, info, started, rev)
		if err != nil {
			return nil, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.lay.zonesPrefix()), "<", rev+1).WithPrefix())
		cmps = append(cmps, rcmps...)
		then = append(then, rops...)
	}
	// +1: the usage record's put, added to each attempt below.
	if len(then)+1+len(inline) > maxInlineTxnOps {
		// Many zones' goals: the blobs go in their own transaction first.
		if _, err := s.txn(ctx, nil, inline, nil); err != nil {
			return nil, fmt.Errorf("stage %d blobs: %w", len(inline), err)
		}
		inline = nil
	}
	// The blobs of a small change are written by the version's own
	// transaction: one durable etcd commit per publish.
	then = append(inline, then...)
	// The attempts of the final transaction: another commit of the domain
	// moving its usage record (and nothing else moving) is not a reason to
	// read and stage again — only to charge the new usage.
	els := []clientv3.Op{clientv3.OpGet(hkey, clientv3.WithKeysOnly()), clientv3.OpGet(ukey)}
	committed := false
	err = optimistic(ctx, "charge the usage of domain "+domain, func(int) (bool, error) {
		ub, err := encode(nextUsage)
		if err != nil {
			return false, err
		}
		resp, err := s.txn(ctx, append(cmps, usage.guard(ukey)), append(then, clientv3.OpPut(ukey, string(ub))), els)
		if isLeaseGone(err) {
			s.forgetRequestLease(lease) // revoked under us: a new round grants another
			return true, nil
		}
		if err != nil {
			// It may have committed: never retried by Commit.
			return false, &versionTxnError{err}
		}
		if resp.Succeeded {
			committed = true
			return true, nil
		}
		h := resp.Responses[0].GetResponseRange().GetKvs()
		if (len(h) == 0) != (headMod == 0) || (headMod != 0 && h[0].ModRevision != headMod) {
			s.log.Debug("store: commit guard failed, retrying", "namespace", c.Namespace, "read_revision", rev)
			return true, nil
		}
		moved, err := decodeUsage((*clientv3.GetResponse)(resp.Responses[1].GetResponseRange()))
		if err != nil {
			return false, err
		}
		if moved.mod == usage.mod {
			// Another guard failed (zones, an experiment): a new round.
			return true, nil
		}
		usage = moved
		if nextUsage, err = usage.charge(domain, added, c.Limits, s.opts.Now(), safety); err != nil {
			return false, err
		}
		return false, nil // only the usage moved: charge it again
	})
	if errors.Is(err, ErrContention) {
		err = nil // the usage kept moving: a new round of Commit
	}
	if err != nil || !committed {
		return nil, err
	}
	// Crash point of the kill matrix (testenv/chaos): the version
	// committed, the producer not answered; its retry must get this
	// version back, not commit another.
	// gofail: var storeAfterCommit struct{}

	if c.Deleted != nil {
		*c.Deleted = deleted
	}
	if c.Rollout != nil {
		c.Rollout.Started = started
	}
	if s.opts.OnDomainUsage != nil {
		s.opts.OnDomainUsage(domain, nextUsage.GetStoredBytes())
	}
	// A copy: the caller owns info, readers of the cache share theirs.
	s.contents.put(c.Namespace, proto.CloneOf(info), c.Content, storedOf(m, c.RequestID))
	return info, nil
}

// blobPut is one blob a commit puts.
type blobPut struct {
	key   string
	value []byte
}

// blobsToPut returns every blob of m that parent does not reference: the
// manifest chunks it does not have and the values those chunks hold that
// its other chunks do not. See the package comment of compact.go for why
// blobs the parent already has are not re-put and every other blob is,
// even if it exists.
func (s *Store) blobsToPut(ctx context.Context, ns string, m *manifest, parent *storedVersion, rev int64) ([]blobPut, error) {
	var pchunks []string
	if parent != nil {
		pchunks = parent.chunks
	}
	parentChunks := make(map[string]bool, len(pchunks))
	for _, h := range pchunks {
		parentChunks[h] = true
	}
	ourChunks := make(map[string]bool, len(m.chunkHashes))
	for _, h := range m.chunkHashes {
		ourChunks[h] = true
	}
	newChunks := 0
	for _, h := range m.chunkHashes {
		if !parentChunks[h] {
			newChunks++
		}
	}
	if newChunks == 0 {
		return nil, nil // the parent references every blob of m
	}
	// Value hashes of the parent chunks we do not share. Values of shared
	// chunks are referenced by the parent through those chunks.
	var otherChunks []string
	for _, h := range pchunks {
		if !ourChunks[h] {
			otherChunks = append(otherChunks, h)
		}
	}
	parentValues := make(map[string]bool)
	if len(otherChunks) > 0 && parent.chunkValues != nil {
		for _, h := range otherChunks {
			for _, vh := range parent.chunkValues[h] {
				parentValues[vh] = true
			}
		}
	} else if len(otherChunks) > 0 {
		chunks, err := s.readChunks(ctx, ns, otherChunks, rev)
		if err != nil {
			return nil, fmt.Errorf("read parent manifest: %w", err)
		}
		for _, c := range chunks {
			for _, e := range c.GetEntries() {
				parentValues[e.GetValueHash()] = true
			}
		}
	}

	seen := make(map[string]bool)
	var puts []blobPut
	add := func(h string, b []byte) {
		if !seen[h] {
			seen[h] = true
			puts = append(puts, blobPut{key: s.lay.blob(ns, h), value: b})
		}
	}
	for i, h := range m.chunkHashes {
		if parentChunks[h] {
			continue
		}
		for _, vh := range m.chunkValues[i] {
			if !parentValues[vh] {
				add(vh, m.values[vh])
			}
		}
		add(h, m.chunks[i])
	}
	return puts, nil
}

// stage puts blobs in transactions within etcd's request limits — or,
// when they are few and small (maxInlineOps, maxInlineBytes), returns
// their puts for the version's own transaction to write.
func (s *Store) stage(ctx context.Context, puts []blobPut) (inline []clientv3.Op, err error) {
	total := 0
	for _, p := range puts {
		total += len(p.value) + len(p.key)
	}
	if len(puts) <= maxInlineOps && total <= maxInlineBytes {
		for _, p := range puts {
			inline = append(inline, clientv3.OpPut(p.key, string(p.value)))
		}
		return inline, nil
	}

	var ops []clientv3.Op
	payload := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := s.txn(ctx, nil, ops, nil); err != nil {
			return fmt.Errorf("stage %d blobs: %w", len(ops), err)
		}
		ops, payload = ops[:0], 0
		return nil
	}
	for _, p := range puts {
		if len(ops) == maxOpsPerTxn || (len(ops) > 0 && payload+len(p.value) > maxTxnPayload) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		ops = append(ops, clientv3.OpPut(p.key, string(p.value)))
		payload += len(p.value) + len(p.key)
	}
	return nil, flush()
}

// record reads one VersionRecord at revision rev (0: the current one); nil
// if there is none.
func (s *Store) record(ctx context.Context, ns string, seq uint64, rev int64) (*lehrpb.VersionRecord, error) {
	key := s.lay.version(ns, seq)
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.get(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	rec := new(lehrpb.VersionRecord)
	if err := decode(key, resp.Kvs[0].Value, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// lookup reads the record of version seq (0: the latest) together with
// the head, and returns the revision they were read at.
func (s *Store) lookup(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionRecord, int64, error) {
	rec, _, rev, err := s.lookupHead(ctx, ns, seq)
	return rec, rev, err
}

// lookupHead is lookup, returning the head too.
func (s *Store) lookupHead(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionRecord, *lehrpb.Namespace, int64, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	hkey := s.lay.nsmeta(ns)
	var head *lehrpb.Namespace
	var rec *lehrpb.VersionRecord
	var rev int64
	if seq == 0 {
		h, _, r, err := s.head(ctx, ns)
		if err != nil {
			return nil, nil, 0, err
		}
		if h == nil {
			return nil, nil, 0, &NotFoundError{What: "namespace", Name: ns}
		}
		if h.GetLatestVersion() == 0 {
			return nil, nil, 0, &NotFoundError{What: "version", Name: ns + "@latest"}
		}
		head, seq, rev = h, h.GetLatestVersion(), r
		if rec, err = s.record(ctx, ns, seq, rev); err != nil {
			return nil, nil, 0, err
		}
		if rec == nil {
			return nil, nil, 0, fmt.Errorf("%w: head names version %d, which is missing", ErrCorrupt, seq)
		}
		return rec, head, rev, nil
	}
	vkey := s.lay.version(ns, seq)
	rs, rev, err := s.readAt(ctx, clientv3.OpGet(hkey), clientv3.OpGet(vkey))
	if err != nil {
		return nil, nil, 0, err
	}
	if len(rs[0].Kvs) == 0 {
		return nil, nil, 0, &NotFoundError{What: "namespace", Name: ns}
	}
	head = new(lehrpb.Namespace)
	if err := decode(hkey, rs[0].Kvs[0].Value, head); err != nil {
		return nil, nil, 0, err
	}
	if len(rs[1].Kvs) == 0 {
		nf := &NotFoundError{What: "version", Name: fmt.Sprintf("%s@%d", ns, seq)}
		if seq < head.GetOldestVersion() {
			nf.Oldest = head.GetOldestVersion()
		}
		return nil, nil, 0, nf
	}
	rec = new(lehrpb.VersionRecord)
	if err := decode(vkey, rs[1].Kvs[0].Value, rec); err != nil {
		return nil, nil, 0, err
	}
	return rec, head, rev, nil
}

// Version returns a version's metadata; seq 0 means the latest.
func (s *Store) Version(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, error) {
	rec, _, err := s.lookup(ctx, ns, seq)
	if err != nil {
		return nil, fmt.Errorf("store: version %s@%d: %w", ns, seq, err)
	}
	return rec.GetInfo(), nil
}

// ExpectedChecks returns the checks a version was committed with for its
// rollout's canary analyses (Commit.ExpectedChecks); none for most.
func (s *Store) ExpectedChecks(ctx context.Context, ns string, seq uint64) ([]*lehrpb.CanaryCheck, error) {
	rec, _, err := s.lookup(ctx, ns, seq)
	if err != nil {
		return nil, fmt.Errorf("store: version %s@%d: %w", ns, seq, err)
	}
	return rec.GetExpectedChecks(), nil
}

// Content returns a version's metadata and content; seq 0 means the latest.
// The content is checked against the recorded checksum (ErrCorrupt). The
// metadata is signed as control serves every version (served): with this
// control's key, over the current payload.
func (s *Store) Content(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, content.Snapshot, error) {
	var err error
	for range maxReadAttempts {
		var rec *lehrpb.VersionRecord
		var head *lehrpb.Namespace
		var rev int64
		rec, head, rev, err = s.lookupHead(ctx, ns, seq)
		if err != nil {
			return nil, content.Snapshot{}, fmt.Errorf("store: content %s@%d: %w", ns, seq, err)
		}
		info := s.served(rec.GetInfo(), head.GetKind())
		if _, snap, ok := s.contents.get(ns, content.Ref{Seq: info.GetSeq(), Checksum: info.GetChecksum()}); ok {
			return info, snap, nil
		}
		var snap content.Snapshot
		snap, err = s.readContent(ctx, ns, rec, rev)
		if err == nil {
			s.contents.put(ns, proto.CloneOf(info), snap, nil)
			return info, snap, nil
		}
		// etcd compacted the revision between reading the record and its
		// blobs: read again at a newer one.
		if !errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
	}
	return nil, content.Snapshot{}, fmt.Errorf("store: content %s@%d: %w", ns, seq, err)
}

// served returns info as control serves it: signed with this control's key
// over the current payload (signing.Payload) of a version of kind kind.
// A record signed before — with the legacy payload, another replica's or
// an older key, or not at all (signing was off) — is signed as it is
// served, so that every version a distributor fetches carries a signature
// of every field agents deliver; the record itself is not rewritten.
// Without a signer info is returned as it is.
func (s *Store) served(info *lehrpb.VersionInfo, kind lehrpb.NamespaceKind) *lehrpb.VersionInfo {
	if s.opts.Signer == nil {
		return info
	}
	out := proto.CloneOf(info)
	s.opts.Signer.Sign(out, kind)
	return out
}

// CachedContent returns the record and content of version ref of ns if
// this control holds its content in memory with ref's checksum (see
// Content), reading nothing from etcd: on a miss it waits — at most 1 s —
// for a commit of that version by this control still putting it in memory
// (a commit does so only after etcd answered, and a watch event of the
// same commit can overtake that), then looks again. ok is false when the
// content is not in memory with that checksum. It is for a caller that knows the checksum from a
// record it read (a goal), on a path that must not wait for etcd (the
// goal watch, where a read behind a flood of writes would hold every other
// domain's events); others use Content. The caller must not change info:
// it is shared.
func (s *Store) CachedContent(ctx context.Context, ns string, ref content.Ref) (info *lehrpb.VersionInfo, snap content.Snapshot, ok bool) {
	if info, snap, ok := s.contents.get(ns, ref); ok {
		return info, snap, true
	}
	actx, cancel := context.WithTimeout(ctx, time.Second) // the put follows etcd's answer at once
	defer cancel()
	s.contents.await(actx, ns, ref.Seq)
	return s.contents.get(ns, ref)
}

// History returns up to limit versions, newest first, with seq < before
// (before 0 means from the latest). A limit <= 0 means 100; at most 1000
// are returned. A missing namespace is a *NotFoundError.
func (s *Store) History(ctx context.Context, ns string, before uint64, limit int) ([]*lehrpb.VersionInfo, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, fmt.Errorf("store: history: %w: %w", ErrInvalid, err)
	}
	prefix := s.lay.versionsPrefix(ns)
	end := prefixEnd(prefix)
	if before > 0 {
		end = s.lay.version(ns, before)
	}
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.nsmeta(ns), clientv3.WithCountOnly()),
		clientv3.OpGet(prefix, clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
			clientv3.WithLimit(listLimit(limit))))
	if err != nil {
		return nil, fmt.Errorf("store: history %s: %w", ns, err)
	}
	if rs[0].Count == 0 {
		return nil, &NotFoundError{What: "namespace", Name: ns}
	}
	out := make([]*lehrpb.VersionInfo, 0, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		rec := new(lehrpb.VersionRecord)
		if err := decode(string(kv.Key), kv.Value, rec); err != nil {
			return nil, fmt.Errorf("store: history %s: %w", ns, err)
		}
		out = append(out, rec.GetInfo())
	}
	return slices.Clip(out), nil
}
