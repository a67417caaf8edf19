package devcluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/control/backup"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// TestBackupRestore: publish v1..v3, back up, publish v4 and v5, stop
// control, restore the backup into a fresh data directory, start control.
// Every agent — each of which held v5 — converges to the backup's content
// (v3's checksum, under a version above the restore's floor), a version
// published afterwards reaches every agent byte for byte, and the audit
// log records the backup and the restore.
func TestBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync:              true,
		Dir:                 t.TempDir(),
		Zones:               []string{zoneA, zoneB},
		DistributorsPerZone: 1,
		AgentsPerZone:       2,
		Domains:             []string{domain},
		Logger:              controltest.Logger(t, slog.LevelError),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	e := &env{c: c, ctx: ctx}
	const ns, quiet = domain + "/restored", domain + "/quiet"

	// A subscriber on every agent, so every agent holds both namespaces.
	type host struct {
		a    *devcluster.AgentHandle
		subs map[string]*consumer.Subscription
	}
	var hosts []host
	for _, z := range []string{zoneA, zoneB} {
		for i := range c.Agents(z) {
			cl := e.consumerOf(t, z, i)
			h := host{a: e.agent(t, z, i), subs: map[string]*consumer.Subscription{}}
			for _, n := range []string{ns, quiet} {
				sub, err := cl.Subscribe(ctx, n)
				if err != nil {
					t.Fatalf("Subscribe %s: %v", n, err)
				}
				h.subs[n] = sub
			}
			hosts = append(hosts, h)
		}
	}
	// converged waits until every agent and every consumer holds want of
	// namespace n: the version, and the checksum of the bytes on disk.
	converged := func(what, n string, want *lehrpb.VersionInfo) {
		t.Helper()
		for _, h := range hosts {
			wait.For(t, fmt.Sprintf("%s: %s at %s@%d (%s)", what, h.a.HostID, n, want.GetSeq(), want.GetChecksum()), func() bool {
				st := nsStatus(e.status(t, h.a), n)
				v := h.subs[n].View()
				return st.GetVersion() == want.GetSeq() && st.GetChecksum() == want.GetChecksum() &&
					v.Version() == want.GetSeq() && v.Checksum() == want.GetChecksum()
			})
			st := nsStatus(e.status(t, h.a), n)
			if _, err := os.Stat(st.GetPath()); err != nil {
				t.Errorf("%s: %s's file: %v", what, h.a.HostID, err)
			}
		}
	}

	var v []*lehrpb.VersionInfo
	for i := 1; i <= 3; i++ {
		v = append(v, e.publish(t, ns, "k", fmt.Sprintf("before the backup %d", i)))
	}
	q := e.publish(t, quiet, "k", "never changes")
	converged("before the backup", ns, v[2])
	converged("before the backup", quiet, q)

	file := filepath.Join(t.TempDir(), "control.db")
	stream, err := c.Producer().RPC().BackupStore(ctx, &lehrpb.BackupStoreRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := backup.Write(file, stream.Recv)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if got.GetRevision() == 0 || got.GetSizeBytes() == 0 || len(got.GetSha256()) != 64 {
		t.Fatalf("backup: %v; want a revision, a size and a SHA-256", got)
	}

	// Newer content under v4 and v5, which the backup does not hold.
	for i := 4; i <= 5; i++ {
		v = append(v, e.publish(t, ns, "k", fmt.Sprintf("after the backup %d", i), "extra", "lost"))
	}
	converged("after the backup", ns, v[4])

	if err := c.StopControl(); err != nil {
		t.Fatalf("StopControl: %v", err)
	}
	etcdDir := filepath.Join(c.ControlDataDir(), "etcd")
	if err := os.Rename(etcdDir, etcdDir+".lost"); err != nil {
		t.Fatal(err)
	}
	rec, err := backup.Restore(ctx, backup.RestoreOptions{File: file, SHA256: got.GetSha256(), EtcdDir: etcdDir, Author: "unix:test"})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if rec.GetVersionFloor() < 3+store.RestoreMargin || rec.GetRevisionBump() < 1_000_000_000 || rec.GetBackupRevision() < got.GetRevision() {
		t.Errorf("restore record %v; want a floor above 3+%d, a revision bump of a billion or more, the backup's revision", rec, store.RestoreMargin)
	}
	if err := c.RestartControl(ctx); err != nil {
		t.Fatalf("RestartControl: %v", err)
	}

	// Every agent converges to the backup's content, above the floor.
	restored, _, err := c.Producer().HistoryPage(ctx, ns, 1, "")
	if err != nil || len(restored) != 1 {
		t.Fatalf("History after the restore: %v, %v", restored, err)
	}
	r := restored[0]
	if r.GetSeq() != rec.GetVersionFloor()+1 || r.GetChecksum() != v[2].GetChecksum() || r.GetRollbackOf() != 3 {
		t.Errorf("latest after the restore: v%d %s rollback of %d; want v%d with v3's checksum %s", r.GetSeq(), r.GetChecksum(), r.GetRollbackOf(),
			rec.GetVersionFloor()+1, v[2].GetChecksum())
	}
	converged("after the restore", ns, r)
	qs, _, err := c.Producer().HistoryPage(ctx, quiet, 1, "")
	if err != nil || len(qs) != 1 || qs[0].GetChecksum() != q.GetChecksum() {
		t.Fatalf("History of %s after the restore: %v, %v", quiet, qs, err)
	}
	converged("after the restore", quiet, qs[0])

	// The next publish goes above the floor and reaches every agent.
	next := e.publish(t, ns, "k", "after the restore")
	if next.GetSeq() <= rec.GetVersionFloor() {
		t.Errorf("publish after the restore got v%d; want above the floor %d", next.GetSeq(), rec.GetVersionFloor())
	}
	converged("published after the restore", ns, next)

	resp, err := c.Producer().RPC().ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]int{}
	for _, a := range resp.GetRecords() {
		methods[a.GetMethod()]++
	}
	// The backup's record is written after the snapshot: the restored log
	// lacks it, and records the restore (the restore itself, each
	// namespace committed again, the end).
	if methods["RestoreStore"] != 4 {
		t.Errorf("audit: %d RestoreStore records; want 4 (the restore, 2 namespaces, the end): %v", methods["RestoreStore"], methods)
	}
}
