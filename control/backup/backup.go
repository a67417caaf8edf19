// Package backup writes a backup of control's store to a file and restores
// one, offline, for lehr control backup and lehr control restore
// (docs/operations.md, "Backup and restore"; control/store, restore.go).
//
// A backup is etcd's own snapshot file, streamed by control's BackupStore;
// Write puts it in place atomically and checks it against the SHA-256 and
// size control sent. Restore puts it back into a fresh embedded etcd with
// etcd's restore code (etcdutl's, copied in etcdrestore.go), raising etcd's revision and marking
// it compacted, then records the restore in the store — its version floor
// and an audit record — for control to finish at its next start.
//
// Imported by cmd/lehr.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Error is a backup that could not be written or restored for a reason of
// its own (not the call to control failing): a file, a checksum, a data
// directory.
type Error struct{ msg string }

func (e *Error) Error() string { return "backup: " + e.msg }

func errorf(format string, args ...any) error { return &Error{msg: fmt.Sprintf(format, args...)} }

// Write writes the backup recv yields — BackupStore's messages, until
// io.EOF — to file, atomically: into a temporary file beside it, synced,
// checked against the SHA-256 and size of the last message, then renamed
// over file. It returns the first message's revision and time with the
// last one's checksum and size.
func Write(file string, recv func() (*lehrpb.BackupStoreResponse, error)) (*lehrpb.BackupStoreResponse, error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-")
	if err != nil {
		return nil, errorf("%v", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	defer tmp.Close()
	h := sha256.New()
	var size int64
	out := new(lehrpb.BackupStoreResponse)
	first, last := true, false
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if first {
			out.Revision, out.BackupTime, first = m.GetRevision(), m.GetBackupTime(), false
		}
		if m.GetSha256() != "" {
			out.Sha256, out.SizeBytes, last = m.GetSha256(), m.GetSizeBytes(), true
		}
		if len(m.GetChunk()) > 0 {
			if _, err := tmp.Write(m.GetChunk()); err != nil {
				return nil, errorf("write %s: %v", tmp.Name(), err)
			}
			h.Write(m.GetChunk())
			size += int64(len(m.GetChunk()))
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	switch {
	case !last:
		return nil, errorf("control's stream ended before the backup did (%d bytes received, no checksum): %s is left as it was; try again", size, file)
	case got != out.GetSha256() || size != out.GetSizeBytes():
		return nil, errorf("received %d bytes with SHA-256 %s; control sent %d bytes with %s: %s is left as it was; try again", size, got, out.GetSizeBytes(), out.GetSha256(), file)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return nil, errorf("%v", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, errorf("sync %s: %v", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, errorf("%v", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return nil, errorf("%v", err)
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		d.Sync()
		d.Close()
	}
	return out, nil
}

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// File is the backup.
	File string
	// SHA256, if set, is the hex SHA-256 File must have.
	SHA256 string
	// EtcdDir is the embedded etcd's data directory to restore into
	// (control's DATA-DIR/etcd); it must not exist. Empty: etcd was
	// restored already (an external cluster, with etcdutl), and
	// EtcdEndpoints names it: only the restore record is written, once
	// the cluster's revision is found raised above the backup's at least
	// by RevisionBump (etcdutl's --bump-revision).
	EtcdDir string
	// EtcdEndpoints, EtcdCA, EtcdCert and EtcdKey reach an external
	// cluster (without EtcdDir).
	EtcdEndpoints             []string
	EtcdCA, EtcdCert, EtcdKey string
	// Prefix is the store's key prefix; "" for store.DefaultPrefix.
	Prefix string
	// Author is who restores, for the restore and audit records.
	Author string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives etcd's log at warning and above; default a
	// discarding one.
	Logger *slog.Logger
	// QuotaBackendBytes is the embedded etcd's quota while the restore
	// is recorded: control's --store-quota; 0 is etcd's default (2 GiB),
	// too small for a larger backup.
	QuotaBackendBytes int64
}

// Restore restores a backup (see the package comment) and returns the
// restore record it wrote.
func Restore(ctx context.Context, o RestoreOptions) (*lehrpb.RestoreRecord, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if (o.EtcdDir == "") == (len(o.EtcdEndpoints) == 0) {
		return nil, errorf("restore: want an embedded etcd's data directory or an external cluster's endpoints, one of them")
	}
	if o.EtcdDir != "" {
		if _, err := os.Stat(o.EtcdDir); err == nil {
			return nil, errorf("%s exists: restore into a fresh data directory — stop control and move %s away (keep it until the restore is verified)", o.EtcdDir, o.EtcdDir)
		}
	}
	sum, size, err := fileSHA256(o.File)
	if err != nil {
		return nil, errorf("%v", err)
	}
	if o.SHA256 != "" && o.SHA256 != sum {
		return nil, errorf("%s has SHA-256 %s, not %s: not the backup meant, or damaged", o.File, sum, o.SHA256)
	}
	info, err := Inspect(o.File, o.Prefix)
	if err != nil {
		return nil, err
	}
	rec := &lehrpb.RestoreRecord{Author: o.Author, BackupRevision: info.Revision, BackupSha256: sum}
	if !info.Time.IsZero() {
		rec.BackupTime = timestamppb.New(info.Time)
	} else {
		// A snapshot not taken by lehr control backup (etcdctl's): the
		// file's time is the best guess of when it was taken.
		st, err := os.Stat(o.File)
		if err != nil {
			return nil, errorf("%v", err)
		}
		rec.BackupTime = timestamppb.New(st.ModTime())
	}
	var cli *clientv3.Client
	if o.EtcdDir != "" {
		rec.RevisionBump = RevisionBump(info.Time, o.Now())
		if info.Time.IsZero() {
			rec.RevisionBump = RevisionBump(rec.GetBackupTime().AsTime(), o.Now())
		}
		zl := zap.NewNop()
		if err := (&etcdRestorer{lg: zl}).Restore(etcdRestoreConfig{
			SnapshotPath:        o.File,
			Name:                "lehr",
			OutputDataDir:       o.EtcdDir,
			PeerURLs:            []string{"https://127.0.0.1:2380"},
			InitialCluster:      "lehr=https://127.0.0.1:2380",
			InitialClusterToken: "lehr-restore",
			RevisionBump:        rec.GetRevisionBump(),
			MarkCompacted:       true,
		}); err != nil {
			os.RemoveAll(o.EtcdDir)
			return nil, errorf("restore %s (%d bytes) into %s: %v", o.File, size, o.EtcdDir, err)
		}
		srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: o.EtcdDir, Name: "lehr", Logger: o.Logger, QuotaBackendBytes: o.QuotaBackendBytes})
		if err != nil {
			return nil, errorf("start the restored etcd in %s: %v", o.EtcdDir, err)
		}
		defer srv.Close()
		cli = srv.InProcessClient()
	} else {
		cfg := clientv3.Config{Endpoints: o.EtcdEndpoints, DialTimeout: 10 * time.Second, Context: ctx}
		if o.EtcdCA != "" || o.EtcdCert != "" {
			if cfg.TLS, err = tlsconfig.Client(o.EtcdCert, o.EtcdKey, o.EtcdCA, ""); err != nil {
				return nil, errorf("etcd TLS: %v", err)
			}
		}
		if cli, err = clientv3.New(cfg); err != nil {
			return nil, errorf("etcd: %v", err)
		}
	}
	defer cli.Close()
	if o.EtcdDir == "" {
		// etcdutl restored the cluster: it must have raised the revision
		// at least as a restore here would (and so marked it compacted:
		// etcdutl does with any bump), or a distributor that watched the
		// lost store could resume its watch among the lost store's
		// revisions. What it raised it by goes into the record.
		resp, err := cli.Get(ctx, store.BackupKey(o.Prefix))
		if err != nil {
			return nil, errorf("etcd: %v", err)
		}
		need := RevisionBump(rec.GetBackupTime().AsTime(), o.Now())
		raised := resp.Header.GetRevision() - info.Revision
		if raised < 0 || uint64(raised) < need {
			return nil, errorf("etcd's revision is %d, %d above the backup's %d: the cluster was not restored from %s with a revision bump large enough for a backup taken %s ago — "+
				"restore every member again with etcdutl snapshot restore --bump-revision %d --mark-compacted (or more: a revision per microsecond since the backup, plus a billion), so no distributor resumes a watch of the lost store",
				resp.Header.GetRevision(), raised, info.Revision, o.File, o.Now().Sub(rec.GetBackupTime().AsTime()).Round(time.Second), need)
		}
		rec.RevisionBump = uint64(raised)
	}
	st := store.New(cli, store.Options{Prefix: o.Prefix, Now: o.Now, Logger: o.Logger})
	out, err := st.RecordRestore(ctx, rec)
	if err != nil {
		return nil, errorf("record the restore: %v", err)
	}
	return out, nil
}

// RevisionBump is how far a restore at now raises etcd's revision over a
// backup taken at backup: a revision per microsecond since (no etcd
// writes a million times a second), plus a billion for the clocks.
func RevisionBump(backup, now time.Time) uint64 {
	return uint64(max(now.Sub(backup).Microseconds(), 0)) + 1_000_000_000
}

// Info is what a backup file says of itself.
type Info struct {
	// Revision is the etcd revision of the snapshot.
	Revision int64
	// Time is when lehr control backup took it (its backup record);
	// zero for a snapshot taken otherwise.
	Time time.Time
}

// Inspect reads a backup file's revision and backup record (under the
// store prefix prefix, "" for the default) without restoring it.
func Inspect(file, prefix string) (Info, error) {
	src, err := os.Open(file)
	if err != nil {
		return Info{}, errorf("%v", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return Info{}, errorf("%v", err)
	}
	// etcd's snapshot is the bbolt database followed by its SHA-256.
	size := st.Size()
	if size%512 == sha256.Size {
		size -= sha256.Size
	}
	tmp, err := os.CreateTemp("", "lehr-backup-inspect-")
	if err != nil {
		return Info{}, errorf("%v", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := io.Copy(tmp, io.LimitReader(src, size)); err != nil {
		return Info{}, errorf("read %s: %v", file, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, errorf("%v", err)
	}
	db, err := bolt.Open(tmp.Name(), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return Info{}, errorf("%s is not an etcd snapshot: %v", file, err)
	}
	defer db.Close()
	key := []byte(store.BackupKey(prefix))
	var info Info
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errorf("%s is not an etcd snapshot: it has no key bucket", file)
		}
		c := b.Cursor()
		// Newest first: the backup record is among the last writes.
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if info.Revision == 0 && len(k) >= 8 {
				info.Revision = int64(binary.BigEndian.Uint64(k[:8]))
			}
			kv := new(mvccpb.KeyValue)
			if err := proto.Unmarshal(v, kv); err != nil {
				continue
			}
			if bytes.Equal(kv.Key, key) && len(kv.Value) > 0 {
				rec := new(lehrpb.BackupRecord)
				if err := proto.Unmarshal(kv.Value, rec); err == nil {
					info.Time = rec.GetBackupTime().AsTime()
				}
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	return info, nil
}

// fileSHA256 returns the hex SHA-256 of a file and its size.
func fileSHA256(name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}
