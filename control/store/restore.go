package store

// Backups and restores of the store.
//
//	backup                                    lehrpb.BackupRecord, the last backup's time (rewritten by each)
//	restore                                   lehrpb.RestoreRecord, the last restore (kept for good)
//
// A backup is etcd's maintenance snapshot, taken just after the backup
// record is written, so every backup carries its own time. A restore
// (lehr control restore) puts the snapshot back into a fresh etcd and then
// writes the restore record with a version floor: hosts may hold versions
// the lost store committed after the backup, under the numbers the
// restored store would hand out again with other content, and every host
// compares version numbers (docs/design.md, "Version numbers never repeat
// under a name"). The floor is above any number the lost store can have
// given: the highest version the backup holds (heads, tombstones, an
// earlier restore's floor) plus one per millisecond between the backup and
// the restore — no namespace commits a version a millisecond, each commit
// being at least two etcd round trips and a disk sync, serialized by the
// head's guard — plus RestoreMargin for the clocks of the backup's and the
// restore's hosts. Every version committed afterwards is numbered above it
// (Commit), and until the record's resync_time is set the first control
// replica to start re-commits each namespace's latest version above it
// with every zone's goal (control.go), so every host — also one that held
// a newer version of the lost store — converges to the restored content.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// RestoreMargin is what a restore's version floor adds beyond one version
// a millisecond since the backup: it covers a backup host's clock up to
// about 16 minutes ahead of the restoring host's.
const RestoreMargin = 1_000_000

func (l layout) backup() string  { return l.prefix + "backup" }
func (l layout) restore() string { return l.prefix + "restore" }

// BackupKey is the key of the backup record under prefix ("" for
// DefaultPrefix): lehr control restore reads it from a snapshot file.
func BackupKey(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return layout{prefix: prefix}.backup()
}

// Snapshot is a consistent snapshot of the etcd the store is in.
type Snapshot struct {
	// Revision is the etcd revision the snapshot is taken at: its backup
	// record's (etcd's snapshot stream names none), which writes of others
	// between the record and the snapshot may have passed.
	Revision int64
	// Time is when it was taken (its BackupRecord's time).
	Time time.Time
	// Data is the snapshot, as etcd's snapshot save writes it (the bbolt
	// database followed by its SHA-256); the caller closes it.
	Data io.ReadCloser
}

// Backup writes the backup record (at the time of Options.Now, naming
// author) and takes etcd's snapshot, which holds it.
func (s *Store) Backup(ctx context.Context, author string) (*Snapshot, error) {
	now := s.opts.Now()
	b, err := encode(&lehrpb.BackupRecord{BackupTime: timestamppb.New(now), Author: author})
	if err != nil {
		return nil, err
	}
	put, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpPut(s.lay.backup(), string(b))}, nil)
	if err != nil {
		return nil, fmt.Errorf("store: backup: write the backup record: %w", err)
	}
	// Not through call: the snapshot's stream outlives any request timeout.
	resp, err := s.maint.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: backup: etcd snapshot: %w", err)
	}
	// etcd's snapshot stream names no revision: the backup record's is
	// the snapshot's, but for writes that came between the two.
	rev := max(resp.Header.GetRevision(), put.Header.GetRevision())
	return &Snapshot{Revision: rev, Time: now, Data: resp.Snapshot}, nil
}

// RestoreFloor returns the version floor of a restore at restoreTime of a
// backup taken at backupTime whose highest version is highest.
func RestoreFloor(highest uint64, backupTime, restoreTime time.Time) uint64 {
	elapsed := max(restoreTime.Sub(backupTime).Milliseconds(), 0)
	return highest + uint64(elapsed) + RestoreMargin
}

// RecordRestore writes the restore record of a store just restored from a
// backup — with its version floor, RestoreFloor of the highest version the
// store holds — and an audit record saying so, in one transaction, and
// returns it. rec names the backup (sha256, revision, revision_bump) and
// who restores; its id, times and floor are set here. The backup's time is
// the store's backup record's, or rec's backup_time if the store has none
// (a snapshot not taken by BackupStore).
func (s *Store) RecordRestore(ctx context.Context, rec *lehrpb.RestoreRecord) (*lehrpb.RestoreRecord, error) {
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.backup()),
		clientv3.OpGet(s.lay.restore()),
		clientv3.OpGet(s.lay.nsmetaPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.tombstonesPrefix(), clientv3.WithPrefix()))
	if err != nil {
		return nil, fmt.Errorf("store: restore: %w", err)
	}
	var highest uint64
	if len(rs[0].Kvs) > 0 {
		b := new(lehrpb.BackupRecord)
		if err := decode(s.lay.backup(), rs[0].Kvs[0].Value, b); err != nil {
			return nil, err
		}
		rec.BackupTime = b.GetBackupTime()
	}
	if rec.GetBackupTime() == nil {
		return nil, fmt.Errorf("store: restore: %w: the store holds no backup record and no backup time was given", ErrInvalid)
	}
	if len(rs[1].Kvs) > 0 {
		prev := new(lehrpb.RestoreRecord)
		if err := decode(s.lay.restore(), rs[1].Kvs[0].Value, prev); err != nil {
			return nil, err
		}
		highest = prev.GetVersionFloor()
	}
	for _, kv := range rs[2].Kvs {
		h := new(lehrpb.Namespace)
		if err := decode(string(kv.Key), kv.Value, h); err != nil {
			return nil, err
		}
		highest = max(highest, h.GetLatestVersion())
	}
	for _, kv := range rs[3].Kvs {
		t := new(lehrpb.Tombstone)
		if err := decode(string(kv.Key), kv.Value, t); err != nil {
			return nil, err
		}
		highest = max(highest, t.GetLastVersion())
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("store: restore: %w", err)
	}
	now := s.opts.Now()
	rec.Id = hex.EncodeToString(id[:])
	rec.RestoreTime = timestamppb.New(now)
	rec.ResyncTime = nil
	rec.VersionFloor = RestoreFloor(highest, rec.GetBackupTime().AsTime(), now)
	b, err := encode(rec)
	if err != nil {
		return nil, err
	}
	audit := &lehrpb.AuditRecord{
		Time: rec.GetRestoreTime(), Method: "RestoreStore", Author: rec.GetAuthor(), TransportIdentity: "lehr control restore",
		Code: "OK",
		Detail: fmt.Sprintf("restored the backup taken %s at etcd revision %d (sha256 %s); etcd's revision raised by %d; versions continue above %d",
			rec.GetBackupTime().AsTime().UTC().Format(time.RFC3339), rec.GetBackupRevision(), rec.GetBackupSha256(), rec.GetRevisionBump(), rec.GetVersionFloor()),
	}
	ab, err := encode(audit)
	if err != nil {
		return nil, err
	}
	// Without a lease: the audit leases of the backup's time are gone
	// from the restored store. The compactor bounds the log by count.
	akey := fmt.Sprintf("%s%020d-%s", s.lay.auditPrefix(), now.UnixNano(), rec.GetId()[:8])
	if _, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpPut(s.lay.restore(), string(b)), clientv3.OpPut(akey, string(ab))}, nil); err != nil {
		return nil, fmt.Errorf("store: restore: %w", err)
	}
	return rec, nil
}

// Restored returns the store's restore record, nil if it was never
// restored.
func (s *Store) Restored(ctx context.Context) (*lehrpb.RestoreRecord, error) {
	rs, _, err := s.readAt(ctx, clientv3.OpGet(s.lay.restore()))
	if err != nil {
		return nil, fmt.Errorf("store: restore record: %w", err)
	}
	return decodeRestore(s.lay.restore(), rs[0])
}

// decodeRestore decodes the restore record of a read, nil if there is none.
func decodeRestore(key string, r *clientv3.GetResponse) (*lehrpb.RestoreRecord, error) {
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	rec := new(lehrpb.RestoreRecord)
	if err := decode(key, r.Kvs[0].Value, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// ResyncDone sets the resync time of the restore record id, unless it is
// set already or the record is another restore's.
func (s *Store) ResyncDone(ctx context.Context, id string) error {
	rs, _, err := s.readAt(ctx, clientv3.OpGet(s.lay.restore()))
	if err != nil {
		return fmt.Errorf("store: restore record: %w", err)
	}
	rec, err := decodeRestore(s.lay.restore(), rs[0])
	if err != nil || rec == nil || rec.GetId() != id || rec.GetResyncTime() != nil {
		return err
	}
	rec.ResyncTime = timestamppb.New(s.opts.Now())
	b, err := encode(rec)
	if err != nil {
		return err
	}
	key := s.lay.restore()
	_, err = s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rs[0].Kvs[0].ModRevision)},
		[]clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
	if err != nil {
		return fmt.Errorf("store: restore record: %w", err)
	}
	return nil
}

// Heads returns every namespace's name and latest version (0 for one
// without a version).
func (s *Store) Heads(ctx context.Context) (map[string]uint64, error) {
	rs, _, err := s.readAt(ctx, clientv3.OpGet(s.lay.nsmetaPrefix(), clientv3.WithPrefix()))
	if err != nil {
		return nil, fmt.Errorf("store: heads: %w", err)
	}
	out := make(map[string]uint64, len(rs[0].Kvs))
	for _, kv := range rs[0].Kvs {
		h := new(lehrpb.Namespace)
		if err := decode(string(kv.Key), kv.Value, h); err != nil {
			return nil, err
		}
		out[s.lay.nameFromNsmeta(string(kv.Key))] = h.GetLatestVersion()
	}
	return out, nil
}
