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

	"google.golang.org/protobuf/types/known/durationpb"
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
	f := subscribeAll(t, e, ns, quiet)
	converged := f.converged

	var v []*lehrpb.VersionInfo
	for i := 1; i <= 3; i++ {
		v = append(v, e.publish(t, ns, "k", fmt.Sprintf("before the backup %d", i)))
	}
	q := e.publish(t, quiet, "k", "never changes")
	converged("before the backup", ns, v[2])
	converged("before the backup", quiet, q)

	file, got := takeBackup(t, ctx, c)

	// Newer content under v4 and v5, which the backup does not hold.
	for i := 4; i <= 5; i++ {
		v = append(v, e.publish(t, ns, "k", fmt.Sprintf("after the backup %d", i), "extra", "lost"))
	}
	converged("after the backup", ns, v[4])

	rec := restore(t, ctx, c, file, got.GetSha256())
	if rec.GetVersionFloor() < 3+store.RestoreMargin || rec.GetRevisionBump() < 1_000_000_000 || rec.GetBackupRevision() < got.GetRevision() {
		t.Errorf("restore record %v; want a floor above 3+%d, a revision bump of a billion or more, the backup's revision", rec, store.RestoreMargin)
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

// fleet is every agent of a devcluster with a consumer subscribed to some
// namespaces on each.
type fleet struct {
	t     *testing.T
	e     *env
	hosts []fleetHost
}

type fleetHost struct {
	a    *devcluster.AgentHandle
	subs map[string]*consumer.Subscription
}

// subscribeAll subscribes a consumer of every agent to nss.
func subscribeAll(t *testing.T, e *env, nss ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, e: e}
	for _, z := range e.c.Zones() {
		for i := range e.c.Agents(z) {
			cl := e.consumerOf(t, z, i)
			h := fleetHost{a: e.agent(t, z, i), subs: map[string]*consumer.Subscription{}}
			for _, n := range nss {
				sub, err := cl.Subscribe(e.ctx, n)
				if err != nil {
					t.Fatalf("Subscribe %s: %v", n, err)
				}
				h.subs[n] = sub
			}
			f.hosts = append(f.hosts, h)
		}
	}
	return f
}

// converged waits until every agent and every consumer holds want of
// namespace n: the version, and the checksum of the bytes on disk.
func (f *fleet) converged(what, n string, want *lehrpb.VersionInfo) {
	t := f.t
	t.Helper()
	for _, h := range f.hosts {
		wait.For(t, fmt.Sprintf("%s: %s at %s@%d (%s)", what, h.a.HostID, n, want.GetSeq(), want.GetChecksum()), func() bool {
			st := nsStatus(f.e.status(t, h.a), n)
			v := h.subs[n].View()
			return st.GetVersion() == want.GetSeq() && st.GetChecksum() == want.GetChecksum() &&
				v.Version() == want.GetSeq() && v.Checksum() == want.GetChecksum()
		})
		st := nsStatus(f.e.status(t, h.a), n)
		if _, err := os.Stat(st.GetPath()); err != nil {
			t.Errorf("%s: %s's file: %v", what, h.a.HostID, err)
		}
	}
}

// restore stops control, restores file into a fresh data directory and
// starts control again.
func restore(t *testing.T, ctx context.Context, c *devcluster.Cluster, file, sum string) *lehrpb.RestoreRecord {
	t.Helper()
	if err := c.StopControl(); err != nil {
		t.Fatalf("StopControl: %v", err)
	}
	etcdDir := filepath.Join(c.ControlDataDir(), "etcd")
	if err := os.Rename(etcdDir, etcdDir+".lost"); err != nil {
		t.Fatal(err)
	}
	rec, err := backup.Restore(ctx, backup.RestoreOptions{File: file, SHA256: sum, EtcdDir: etcdDir, Author: "unix:test"})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if err := c.RestartControl(ctx); err != nil {
		t.Fatalf("RestartControl: %v", err)
	}
	return rec
}

// takeBackup writes a backup of c's control to a file and returns it.
func takeBackup(t *testing.T, ctx context.Context, c *devcluster.Cluster) (string, *lehrpb.BackupStoreResponse) {
	t.Helper()
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
	return file, got
}

// TestRestoreEndsTheRolloutInFlight: a backup taken while a version's
// rollout bakes on a canary, restored after that version and a newer one
// reached every host: the restore's re-commit supersedes the restored
// rollout, and every host converges to the backup's latest content.
func TestRestoreEndsTheRolloutInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startRollouts(t, ctx, 2)
	e := &env{c: c, ctx: ctx}
	prod := c.Producer()
	ns := domain + "/rolled"
	canary := &lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(10 * time.Minute), ApplyDeadline: durationpb.New(time.Minute),
		Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}, Analysis: &lehrpb.CanaryAnalysis{Disabled: true}}
	rest := &lehrpb.RolloutStage{Name: "the rest", ApplyDeadline: durationpb.New(time.Minute),
		Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary, rest}}, "long canary bake", 0); err != nil {
		t.Fatal(err)
	}
	f := subscribeAll(t, e, ns)
	v1 := e.publish(t, ns, "k", "1")
	f.converged("the first version", ns, v1)
	v2 := e.publish(t, ns, "k", "2")
	wait.For(t, "v2's canary baking", func() bool {
		r, err := prod.GetRollout(ctx, ns, v2.GetSeq())
		return err == nil && r.GetStageAppliedTime() != nil
	})
	file, got := takeBackup(t, ctx, c)

	// After the backup: v2 promoted everywhere, then v3.
	promote := func(v *lehrpb.VersionInfo) {
		t.Helper()
		wait.For(t, fmt.Sprintf("v%d's canary baking", v.GetSeq()), func() bool {
			r, err := prod.GetRollout(ctx, ns, v.GetSeq())
			return err == nil && r.GetStageAppliedTime() != nil
		})
		if _, err := prod.UpdateRollout(ctx, ns, v.GetSeq(), lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE, "go"); err != nil {
			t.Fatal(err)
		}
		waitRollout(t, ctx, c, ns, v.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	}
	promote(v2)
	v3 := e.publish(t, ns, "k", "3, lost")
	promote(v3)
	f.converged("after the backup", ns, v3)

	rec := restore(t, ctx, c, file, got.GetSha256())
	waitRollout(t, ctx, c, ns, v2.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED)
	latest, _, err := prod.HistoryPage(ctx, ns, 1, "")
	if err != nil || len(latest) != 1 || latest[0].GetSeq() != rec.GetVersionFloor()+1 || latest[0].GetChecksum() != v2.GetChecksum() {
		t.Fatalf("latest after the restore: %v, %v; want v%d with v2's checksum", latest, err, rec.GetVersionFloor()+1)
	}
	f.converged("after the restore", ns, latest[0])
}
