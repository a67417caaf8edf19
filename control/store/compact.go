package store

// History compaction and blob garbage collection.
//
// Compact removes the VersionRecords the retention policy lets go, in
// transactions guarded by the head's mod revision (a concurrent commit makes
// it start over), by every zone's goal for the namespace being unchanged and
// by no zone having been registered since it read them (so a version that
// has just become some zone's goal is never removed), and it records the new
// oldest version in the head. SetGoal in turn writes a goal only while the
// version's record exists.
//
// Blobs are then collected. A blob is deleted only if
//
//	(a) no VersionRecord read at one revision S references it, directly (a
//	    manifest chunk) or through a chunk (a value),
//	(b) its mod revision is below the head's mod revision at S, and
//	(c) it still has the mod revision seen at S when the delete transaction
//	    runs (the delete is guarded by it).
//
// Why this is safe against a concurrent Commit that read the head at R,
// staged blobs and then commits guarded by the head's mod revision H <= R:
//
//   - A blob the commit stages is put after R, so its mod revision is > H.
//     If the commit has not committed by S, either the head at S is still H
//     and (b) spares the blob, or the head moved past H and the commit's
//     guard will fail (it retries and stages again). If it committed by S,
//     its record references the blob and (a) spares it. A put after S
//     changes the mod revision and (c) spares it; a delete that wins the
//     race is undone by the put itself.
//   - A blob the commit does not stage is referenced by its parent, the
//     latest version at R. If the commit succeeds, the head did not move
//     between R and the commit, so the parent was still the latest (never
//     removed) at any S before the commit; at any S after it, the new record
//     references the blob.
//
// Hence every blob a committed version references exists as long as the
// version does. This is why Commit re-puts every blob its parent does not
// reference, even one that already exists: an existing but unreferenced
// blob may be just about to be collected.

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Compact applies the retention policy to one namespace and returns how
// many versions it removed. It then deletes the blobs no remaining version
// references, and recounts what the namespace stores.
func (s *Store) Compact(ctx context.Context, ns string) (int, error) {
	return s.compact(ctx, ns, s.opts.Retention.KeepLast, s.opts.Retention.KeepFor)
}

// CompactHistory removes every version of ns but the keepLast newest
// (at least 1), whatever their age — never the latest version nor a
// version some zone's goal names — then deletes the blobs no remaining
// version references and recounts what the namespace stores: what a
// tenant does to free its quota. It returns how many versions it removed.
func (s *Store) CompactHistory(ctx context.Context, ns string, keepLast int) (int, error) {
	if keepLast < 1 {
		return 0, fmt.Errorf("store: compact %s: %w", ns, invalidf("keep at least the latest version, not %d", keepLast))
	}
	n, err := s.compact(ctx, ns, keepLast, 0)
	if n > 0 {
		s.space.wantReclaim() // give etcd's space back now
	}
	return n, err
}

func (s *Store) compact(ctx context.Context, ns string, keepLast int, keepFor time.Duration) (int, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return 0, fmt.Errorf("store: compact: %w: %w", ErrInvalid, err)
	}
	removed := 0 // by every round: a lost one may have removed some
	err := optimistic(ctx, "compact "+ns, func(int) (bool, error) {
		n, ok, err := s.compactOnce(ctx, ns, keepLast, keepFor)
		removed += n
		if err != nil {
			return false, fmt.Errorf("store: compact %s: %w", ns, err)
		}
		return ok, nil
	})
	if err != nil {
		return removed, err
	}
	n, err := s.collectBlobs(ctx, ns)
	if err != nil {
		return removed, fmt.Errorf("store: compact %s: collect blobs: %w", ns, err)
	}
	if removed > 0 || n > 0 {
		s.log.Info("store: compacted history", "namespace", ns, "versions_removed", removed, "blobs_deleted", n)
	}
	return removed, nil
}

// compactOnce removes what the policy allows as seen at one revision. It
// returns ok false if a guard failed and it should be run again.
func (s *Store) compactOnce(ctx context.Context, ns string, keepLast int, keepFor time.Duration) (removed int, ok bool, err error) {
	hkey := s.lay.nsmeta(ns)
	rs, rev, err := s.readAt(ctx,
		clientv3.OpGet(hkey),
		clientv3.OpGet(s.lay.versionsPrefix(ns), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.zonesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	if err != nil {
		return 0, false, err
	}
	if len(rs[0].Kvs) == 0 {
		return 0, false, &NotFoundError{What: "namespace", Name: ns}
	}
	head := new(lehrpb.Namespace)
	if err := decode(hkey, rs[0].Kvs[0].Value, head); err != nil {
		return 0, false, err
	}
	headMod := rs[0].Kvs[0].ModRevision

	// The goal of every zone for ns, at the same revision.
	var goalOps []clientv3.Op
	var goalKeys []string
	for _, kv := range rs[2].Kvs {
		k := s.lay.goal(s.lay.zoneFromKey(string(kv.Key)), ns)
		goalKeys = append(goalKeys, k)
		goalOps = append(goalOps, clientv3.OpGet(k, clientv3.WithRev(rev)))
	}
	goalCmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.lay.zonesPrefix()), "<", rev+1).WithPrefix()}
	pinned := make(map[uint64]bool)
	if len(goalOps) > 0 {
		grs, _, err := s.readAt(ctx, goalOps...)
		if err != nil {
			return 0, false, err
		}
		for i, r := range grs {
			if len(r.Kvs) == 0 {
				goalCmps = append(goalCmps, clientv3.Compare(clientv3.CreateRevision(goalKeys[i]), "=", 0))
				continue
			}
			g := new(lehrpb.GoalState)
			if err := decode(goalKeys[i], r.Kvs[0].Value, g); err != nil {
				return 0, false, err
			}
			pinned[g.GetVersion()] = true
			if c := g.GetCandidate().GetVersion(); c != 0 {
				pinned[c] = true // a rollout's candidate is a goal too
			}
			goalCmps = append(goalCmps, clientv3.Compare(clientv3.ModRevision(goalKeys[i]), "=", r.Kvs[0].ModRevision))
		}
	}

	// Records come sorted by key, which is by seq.
	type rec struct {
		seq     uint64
		created time.Time
	}
	var recs []rec
	for _, kv := range rs[1].Kvs {
		r := new(lehrpb.VersionRecord)
		if err := decode(string(kv.Key), kv.Value, r); err != nil {
			return 0, false, err
		}
		recs = append(recs, rec{seq: r.GetInfo().GetSeq(), created: r.GetInfo().GetCreateTime().AsTime()})
	}
	cutoff := s.opts.Now().Add(-keepFor)
	var drop []uint64
	keep := make([]uint64, 0, len(recs))
	for i, r := range recs {
		newest := i >= len(recs)-keepLast
		if newest || r.seq == head.GetLatestVersion() || pinned[r.seq] || !r.created.Before(cutoff) {
			keep = append(keep, r.seq)
			continue
		}
		drop = append(drop, r.seq)
	}
	if len(drop) == 0 {
		return 0, true, nil
	}

	// Remove oldest first, so the head's oldest_version is right after
	// every batch.
	batchSize := maxOpsPerTxn - 1
	for i := 0; i < len(drop); i += batchSize {
		batch := drop[i:min(i+batchSize, len(drop))]
		oldest := keep[0]
		if i+len(batch) < len(drop) {
			oldest = min(oldest, drop[i+len(batch)])
		}
		nh := proto.CloneOf(head)
		nh.OldestVersion = oldest
		hb, err := encode(nh)
		if err != nil {
			return removed, false, err
		}
		ops := make([]clientv3.Op, 0, len(batch)+1)
		for _, seq := range batch {
			ops = append(ops, clientv3.OpDelete(s.lay.version(ns, seq)))
		}
		ops = append(ops, clientv3.OpPut(hkey, string(hb)))
		cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(hkey), "=", headMod)}, goalCmps...)
		resp, err := s.txn(ctx, cmps, ops, nil)
		if err != nil {
			return removed, false, err
		}
		if !resp.Succeeded {
			return removed, false, nil
		}
		removed += len(batch)
		headMod = resp.Header.Revision
	}
	return removed, true, nil
}

// collectBlobs deletes the blobs of ns that no version references; see the
// comment at the top of this file for the rules.
func (s *Store) collectBlobs(ctx context.Context, ns string) (int, error) {
	hkey := s.lay.nsmeta(ns)
	rs, rev, err := s.readAt(ctx,
		clientv3.OpGet(hkey),
		clientv3.OpGet(s.lay.versionsPrefix(ns), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.blobsPrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	if err != nil {
		return 0, err
	}
	if len(rs[0].Kvs) == 0 {
		return 0, nil
	}
	head := new(lehrpb.Namespace)
	if err := decode(hkey, rs[0].Kvs[0].Value, head); err != nil {
		return 0, err
	}
	headMod := rs[0].Kvs[0].ModRevision

	// What the retained versions take, each record and each blob they
	// reference counted once (usage.go).
	var stored int64
	referenced := make(map[string]bool)
	var chunkHashes []string
	for _, kv := range rs[1].Kvs {
		r := new(lehrpb.VersionRecord)
		if err := decode(string(kv.Key), kv.Value, r); err != nil {
			return 0, err
		}
		stored += putSize(string(kv.Key), kv.Value)
		for _, h := range r.GetManifestChunks() {
			if !referenced[h] {
				referenced[h] = true
				chunkHashes = append(chunkHashes, h)
			}
		}
	}
	chunks, err := s.readChunks(ctx, ns, chunkHashes, rev)
	if err != nil {
		// Never delete on a partial picture.
		return 0, fmt.Errorf("read manifests at revision %d: %w", rev, err)
	}
	for h, c := range chunks {
		stored += int64(len(s.lay.blob(ns, h)) + proto.Size(c))
		for _, e := range c.GetEntries() {
			if vh := e.GetValueHash(); !referenced[vh] {
				referenced[vh] = true
				stored += int64(len(s.lay.blob(ns, vh))) + e.GetSize()
			}
		}
	}
	if err := s.recount(ctx, head, headMod, stored); err != nil {
		return 0, err
	}

	type cand struct {
		key string
		mod int64
	}
	var cands []cand
	for _, kv := range rs[2].Kvs {
		key := string(kv.Key)
		if referenced[s.lay.hashFromBlob(ns, key)] || kv.ModRevision >= headMod {
			continue
		}
		cands = append(cands, cand{key, kv.ModRevision})
	}
	deleted := 0
	del := func(batch []cand) (bool, error) {
		cmps := make([]clientv3.Cmp, len(batch))
		ops := make([]clientv3.Op, len(batch))
		for i, c := range batch {
			cmps[i] = clientv3.Compare(clientv3.ModRevision(c.key), "=", c.mod)
			ops[i] = clientv3.OpDelete(c.key)
		}
		resp, err := s.txn(ctx, cmps, ops, nil)
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			deleted += len(batch)
		}
		return resp.Succeeded, nil
	}
	for batch := range slices.Chunk(cands, maxOpsPerTxn) {
		ok, err := del(batch)
		if err != nil {
			return deleted, err
		}
		if ok || len(batch) == 1 {
			continue
		}
		// Some blob was re-put meanwhile: delete the others one by one.
		for i := range batch {
			if _, err := del(batch[i : i+1]); err != nil {
				return deleted, err
			}
		}
	}
	return deleted, nil
}

// recount sets the stored bytes of head, read at mod revision headMod,
// to stored, and corrects its domain's sum by the difference, unless the
// head changed since (the next pass counts again).
func (s *Store) recount(ctx context.Context, head *lehrpb.Namespace, headMod int64, stored int64) error {
	diff := stored - head.GetStoredBytes()
	if diff == 0 {
		return nil
	}
	domain, _, err := names.Namespace(head.GetName())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	hkey, ukey := s.lay.nsmeta(head.GetName()), s.lay.usage(domain)
	nh := proto.CloneOf(head)
	nh.StoredBytes = stored
	hb, err := encode(nh)
	if err != nil {
		return err
	}
	return optimistic(ctx, "recount "+head.GetName(), func(int) (bool, error) {
		resp, err := s.get(ctx, ukey)
		if err != nil {
			return false, err
		}
		u, err := decodeUsage(resp)
		if err != nil {
			return false, err
		}
		next := proto.CloneOf(u.rec)
		next.StoredBytes = max(0, next.StoredBytes+diff)
		ub, err := encode(next)
		if err != nil {
			return false, err
		}
		tr, err := s.txn(ctx,
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(hkey), "=", headMod), u.guard(ukey)},
			[]clientv3.Op{clientv3.OpPut(hkey, string(hb)), clientv3.OpPut(ukey, string(ub))},
			[]clientv3.Op{clientv3.OpGet(hkey, clientv3.WithKeysOnly())})
		if err != nil {
			return false, err
		}
		if tr.Succeeded {
			s.log.Debug("store: recounted a namespace's stored bytes", "namespace", head.GetName(), "stored_bytes", stored, "was", head.GetStoredBytes())
			if s.opts.OnDomainUsage != nil {
				s.opts.OnDomainUsage(domain, next.StoredBytes)
			}
			return true, nil
		}
		if h := tr.Responses[0].GetResponseRange().GetKvs(); len(h) == 0 || h[0].ModRevision != headMod {
			return true, nil // a commit or compaction came first: counted next pass
		}
		return false, nil // only the usage moved: add to its new sum
	})
}

// RunCompactor compacts every namespace each interval until ctx is done,
// starting with one pass at once. Errors are logged and the pass moves on
// to the next namespace; RunCompactor returns nil when ctx is done. An
// interval <= 0 means one hour. Several control processes may run it
// against one etcd: their transactions are guarded, so they only waste work.
func (s *Store) RunCompactor(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Hour
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	// Releases before usage.go kept each domain's publish bucket at
	// budgets/<domain>; nothing reads those keys now.
	if _, err := call(s, ctx, "delete", func(ctx context.Context) (*clientv3.DeleteResponse, error) {
		return s.cli.Delete(ctx, s.lay.prefix+"budgets/", clientv3.WithPrefix())
	}); err != nil && ctx.Err() == nil {
		s.log.Warn("store: compactor: delete the publish buckets of an earlier release", "err", err)
	}
	for {
		s.compactAll(ctx)
		if n, err := s.TrimAudit(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("store: compactor: trim the audit log", "err", err)
		} else if n > 0 {
			s.log.Info("store: compactor: removed the oldest audit records beyond the most kept", "removed", n, "kept", s.opts.Retention.AuditRecords)
			s.space.wantReclaim()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// compactAll runs Compact on every namespace, a page of names at a time.
// When the pass removed versions it asks the space monitor to compact
// etcd's revisions (and defragment where a tenth of a member is free
// pages) at its next reading: what Lehr deleted is given back then, not
// when etcd's own hourly compaction comes round.
func (s *Store) compactAll(ctx context.Context) {
	prefix := s.lay.nsmetaPrefix()
	from := prefix
	removed := 0
	defer func() {
		if removed > 0 {
			s.space.wantReclaim()
		}
	}()
	for ctx.Err() == nil {
		resp, err := s.get(ctx, from, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithKeysOnly(), clientv3.WithLimit(500))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("store: compactor: list namespaces", "err", err)
			}
			return
		}
		for _, kv := range resp.Kvs {
			ns := s.lay.nameFromNsmeta(string(kv.Key))
			n, err := s.Compact(ctx, ns)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("store: compactor", "namespace", ns, "err", err)
			}
			removed += n
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return
		}
		from = afterKey(string(resp.Kvs[len(resp.Kvs)-1].Key))
	}
}
