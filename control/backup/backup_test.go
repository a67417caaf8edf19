package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// stream yields msgs, then io.EOF (or err after them, if set).
func stream(err error, msgs ...*lehrpb.BackupStoreResponse) func() (*lehrpb.BackupStoreResponse, error) {
	return func() (*lehrpb.BackupStoreResponse, error) {
		if len(msgs) == 0 {
			if err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

func sumOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestWrite: a whole backup replaces the file; a cut or damaged one leaves
// the file as it was and no temporary file behind.
func TestWrite(t *testing.T) {
	at := timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	data := []byte("etcd snapshot bytes")
	first := &lehrpb.BackupStoreResponse{Chunk: data[:5], Revision: 42, BackupTime: at}
	rest := &lehrpb.BackupStoreResponse{Chunk: data[5:]}
	for _, tc := range []struct {
		name   string
		recv   func() (*lehrpb.BackupStoreResponse, error)
		wantOK bool
	}{
		{"whole", stream(nil, first, rest, &lehrpb.BackupStoreResponse{Sha256: sumOf(data), SizeBytes: int64(len(data))}), true},
		{"no checksum: cut short", stream(nil, first, rest), false},
		{"stream fails", stream(errors.New("connection reset"), first), false},
		{"other checksum", stream(nil, first, rest, &lehrpb.BackupStoreResponse{Sha256: sumOf([]byte("x")), SizeBytes: int64(len(data))}), false},
		{"other size", stream(nil, first, rest, &lehrpb.BackupStoreResponse{Sha256: sumOf(data), SizeBytes: 3}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "b.db")
			if err := os.WriteFile(file, []byte("old backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Write(file, tc.recv)
			b, rerr := os.ReadFile(file)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.wantOK {
				if err != nil || string(b) != string(data) || got.GetRevision() != 42 || got.GetSha256() != sumOf(data) || !got.GetBackupTime().AsTime().Equal(at.AsTime()) {
					t.Errorf("Write = %v, %v, file %q; want the backup at revision 42", got, err, b)
				}
			} else if err == nil || string(b) != "old backup" {
				t.Errorf("Write = %v, file %q; want an error and the old file", err, b)
			}
			if es, _ := os.ReadDir(dir); len(es) != 1 {
				t.Errorf("%d files left in the directory; want only b.db", len(es))
			}
			if info, err := os.Stat(file); err == nil && tc.wantOK && info.Mode().Perm() != 0o600 {
				t.Errorf("mode %v; want 0600", info.Mode().Perm())
			}
		})
	}
}

func TestRevisionBump(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, want := RevisionBump(at, at.Add(time.Second)), uint64(1_000_000+1_000_000_000); got != want {
		t.Errorf("RevisionBump one second on = %d; want %d", got, want)
	}
	if got, want := RevisionBump(at.Add(time.Hour), at), uint64(1_000_000_000); got != want {
		t.Errorf("RevisionBump with the backup's clock ahead = %d; want %d", got, want)
	}
}

func TestRestoreRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.db")
	if err := os.WriteFile(file, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    RestoreOptions
	}{
		{"another checksum", RestoreOptions{File: file, SHA256: sumOf([]byte("x")), EtcdDir: filepath.Join(dir, "etcd")}},
		{"not a snapshot", RestoreOptions{File: file, EtcdDir: filepath.Join(dir, "etcd")}},
		{"existing data dir", RestoreOptions{File: file, EtcdDir: dir}}, // checked first
		{"no target", RestoreOptions{File: file}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var be *Error
			if _, err := Restore(t.Context(), tc.o); !errors.As(err, &be) {
				t.Errorf("Restore = %v; want a *backup.Error", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
				t.Errorf("Restore left %s/etcd", dir)
			}
		})
	}
}

// TestRestoreRecordOnly: for an external cluster restored with etcdutl,
// Restore only records the restore, with the backup's time and revision
// read from the file and what the cluster's revision was raised by — and
// refuses a cluster whose revision was not raised enough (not restored
// with --bump-revision, or not at all), naming the bump it needs.
func TestRestoreRecordOnly(t *testing.T) {
	ctx := t.Context()
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: filepath.Join(t.TempDir(), "etcd"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st := store.New(cli, store.Options{})
	snap, err := st.Backup(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.db")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, snap.Data); err != nil {
		t.Fatal(err)
	}
	snap.Data.Close()
	f.Close()
	info, err := Inspect(file, "")
	if err != nil || info.Revision < snap.Revision || !info.Time.Equal(snap.Time) {
		t.Fatalf("Inspect = %+v, %v; want revision %d or later and time %v", info, err, snap.Revision, snap.Time)
	}

	// The cluster the backup was taken of, not restored.
	var be *Error
	_, err = Restore(ctx, RestoreOptions{File: file, EtcdEndpoints: srv.Endpoints(), Author: "unix:ops"})
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "--bump-revision") {
		t.Errorf("Restore --record-only into a cluster not restored = %v; want a *backup.Error naming --bump-revision", err)
	}
	t.Logf("refused: %v", err)
	if rec, err := st.Restored(ctx); err != nil || rec != nil {
		t.Errorf("after the refusal: restore record %v, %v; want none", rec, err)
	}

	// Restored as etcdutl does, with the bump the docs give.
	const bump = 1_000_000_000_000
	dir := filepath.Join(t.TempDir(), "etcd")
	if err := (&etcdRestorer{lg: zap.NewNop()}).Restore(etcdRestoreConfig{
		SnapshotPath: file, Name: "lehr", OutputDataDir: dir,
		PeerURLs: []string{"https://127.0.0.1:2380"}, InitialCluster: "lehr=https://127.0.0.1:2380", InitialClusterToken: "etcd-cluster",
		RevisionBump: bump, MarkCompacted: true,
	}); err != nil {
		t.Fatal(err)
	}
	restored, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, Name: "lehr", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	rec, err := Restore(ctx, RestoreOptions{File: file, EtcdEndpoints: restored.Endpoints(), Author: "unix:ops"})
	if err != nil {
		t.Fatal(err)
	}
	rcli, err := restored.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	got, err := store.New(rcli, store.Options{}).Restored(ctx)
	if err != nil || got.GetId() != rec.GetId() || got.GetVersionFloor() < store.RestoreMargin || !got.GetBackupTime().AsTime().Equal(snap.Time) ||
		got.GetBackupRevision() != info.Revision || got.GetRevisionBump() < bump {
		t.Errorf("restore record %v, %v; want %v with the backup's time and revision, etcdutl's revision bump (%d or more)", got, err, rec, bump)
	}
}
