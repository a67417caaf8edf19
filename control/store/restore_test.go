package store

import (
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestRestoreFloor(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		highest       uint64
		backup, restr time.Time
		want          uint64
	}{
		{highest: 3, backup: at, restr: at, want: 3 + RestoreMargin},
		{highest: 3, backup: at, restr: at.Add(time.Minute), want: 3 + 60_000 + RestoreMargin},
		// A backup clock ahead of the restore's counts nothing elapsed.
		{highest: 7, backup: at.Add(time.Minute), restr: at, want: 7 + RestoreMargin},
	} {
		if got := RestoreFloor(tc.highest, tc.backup, tc.restr); got != tc.want {
			t.Errorf("RestoreFloor(%d, %v, %v) = %d; want %d", tc.highest, tc.backup, tc.restr, got, tc.want)
		}
	}
}

// TestRestoreRecord: a restore record's floor is above every version and
// tombstone of the store plus the time since its backup, every commit
// after it goes above the floor, and the record and its audit entry stay.
func TestRestoreRecord(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	for i := range 3 {
		commit(t, s, Commit{Namespace: "d/n", Create: i == 0, ExpectedLatest: uint64(i), Content: snap(t, "k", string(rune('a'+i))), Goals: GoalsAllZones})
	}
	snapBackup, err := s.Backup(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, snapBackup.Data)
	snapBackup.Data.Close()
	if err != nil || n == 0 || snapBackup.Revision == 0 {
		t.Fatalf("snapshot: %d bytes at revision %d, %v; want bytes at a revision", n, snapBackup.Revision, err)
	}
	if got, err := s.Restored(ctx); err != nil || got != nil {
		t.Fatalf("Restored before a restore = %v, %v; want nil", got, err)
	}
	clock.Advance(2 * time.Second)
	rec, err := s.RecordRestore(ctx, &lehrpb.RestoreRecord{Author: "unix:root", BackupRevision: snapBackup.Revision, RevisionBump: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(3 + 2000 + RestoreMargin); rec.GetVersionFloor() != want {
		t.Errorf("floor = %d; want %d", rec.GetVersionFloor(), want)
	}
	if !rec.GetBackupTime().AsTime().Equal(snapBackup.Time) {
		t.Errorf("backup time = %v; want the backup record's %v", rec.GetBackupTime().AsTime(), snapBackup.Time)
	}
	info := commit(t, s, Commit{Namespace: "d/n", ExpectedLatest: 3, Content: snap(t, "k", "new"), Goals: GoalsAllZones})
	if info.GetSeq() != rec.GetVersionFloor()+1 || info.GetParent() != 3 {
		t.Errorf("commit after the restore: version %d, parent %d; want %d, parent 3", info.GetSeq(), info.GetParent(), rec.GetVersionFloor()+1)
	}
	fresh := commit(t, s, Commit{Namespace: "d/m", Create: true, Content: snap(t, "k", "x"), Goals: GoalsAllZones})
	if fresh.GetSeq() != rec.GetVersionFloor()+1 {
		t.Errorf("a new namespace's first version = %d; want %d", fresh.GetSeq(), rec.GetVersionFloor()+1)
	}
	if err := s.ResyncDone(ctx, rec.GetId()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Restored(ctx)
	if err != nil || got.GetResyncTime() == nil || got.GetId() != rec.GetId() {
		t.Errorf("Restored after ResyncDone = %v, %v; want the record with its resync time", got, err)
	}
	// A second restore (of a backup holding the first) floors above the
	// first floor and every version since.
	clock.Advance(time.Second)
	rec2, err := s.RecordRestore(ctx, &lehrpb.RestoreRecord{Author: "unix:root", BackupTime: timestamppb.New(clock.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if rec2.GetVersionFloor() <= info.GetSeq() {
		t.Errorf("second floor %d; want above %d", rec2.GetVersionFloor(), info.GetSeq())
	}
	recs, _, err := s.AuditRecords(ctx, "", time.Time{}, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var restores int
	for _, r := range recs {
		if r.GetMethod() == "RestoreStore" && r.GetAuthor() == "unix:root" {
			restores++
		}
	}
	if restores != 2 {
		t.Errorf("audit holds %d RestoreStore records; want 2: %v", restores, recs)
	}
}
