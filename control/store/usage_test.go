package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// storedOnDisk sums the keys and values under ns's data prefix: what its
// versions really take when every blob is referenced (no failed commit
// left any behind).
func storedOnDisk(t *testing.T, s *Store, ns string) int64 {
	t.Helper()
	resp, err := s.cli.Get(testCtx(t), s.lay.prefix+"data/"+ns+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, kv := range resp.Kvs {
		n += int64(len(kv.Key) + len(kv.Value))
	}
	return n
}

// usageOf returns a domain's stored bytes as recorded, and the sum of its
// namespaces' heads.
func usageOf(t *testing.T, s *Store, domain string, nss ...string) (recorded, heads int64) {
	t.Helper()
	recorded, _, err := s.DomainUsage(testCtx(t), domain)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		h, err := s.GetNamespace(testCtx(t), ns)
		if err != nil {
			t.Fatal(err)
		}
		heads += h.GetStoredBytes()
	}
	return recorded, heads
}

// TestUsageCountsEveryCommit: concurrent commits of one domain's
// namespaces are each charged exactly once (the domain's record is the
// sum of the heads), a charge equals what the version put, and history
// compaction recounts a namespace exactly.
func TestUsageCountsEveryCommit(t *testing.T) {
	s := newTestStore(t, Options{})
	mustDomain(t, s, "d")
	nss := []string{"d/a", "d/b", "d/c"}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 6 {
		wg.Go(func() {
			for i := range 5 {
				ns := nss[(w+i)%len(nss)]
				_, err := s.Commit(testCtx(t), Commit{Namespace: ns, Create: true, Rebase: true,
					Content: snap(t, "k", fmt.Sprintf("w%d-%d", w, i), "big", fmt.Sprintf("%0*d", 1000*(w+1), i)),
					Info:    &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent commit: %v", err)
	}
	recorded, heads := usageOf(t, s, "d", nss...)
	if recorded != heads || recorded == 0 {
		t.Fatalf("domain usage %d, heads sum to %d: want equal and non-zero", recorded, heads)
	}
	// Every version here is a snapshot of new values, so what each put is
	// what is on disk: the charges are exact.
	for _, ns := range nss {
		h, _ := s.GetNamespace(testCtx(t), ns)
		if disk := storedOnDisk(t, s, ns); h.GetStoredBytes() != disk {
			t.Errorf("%s: head says %d bytes stored, its keys and values take %d", ns, h.GetStoredBytes(), disk)
		}
	}

	// A rollback re-puts content an older version has: over-counted at
	// commit, exact after the compactor's recount.
	_, first, err := s.Content(testCtx(t), "d/a", 1)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, Commit{Namespace: "d/a", Rebase: true, Content: first,
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: 1}})
	if h, _ := s.GetNamespace(testCtx(t), "d/a"); h.GetStoredBytes() <= storedOnDisk(t, s, "d/a") {
		t.Errorf("a rollback to version 1 re-put blobs that exist: want the head's charge above what the keys take")
	}
	if _, err := s.Compact(testCtx(t), "d/a"); err != nil {
		t.Fatal(err)
	}
	h, _ := s.GetNamespace(testCtx(t), "d/a")
	if disk := storedOnDisk(t, s, "d/a"); h.GetStoredBytes() != disk {
		t.Errorf("after recount: head says %d bytes, disk %d", h.GetStoredBytes(), disk)
	}
	if recorded, heads := usageOf(t, s, "d", nss...); recorded != heads {
		t.Errorf("after recount: domain usage %d, heads %d", recorded, heads)
	}

	// CompactHistory frees what the removed versions alone held.
	before := h.GetStoredBytes()
	removed, err := s.CompactHistory(testCtx(t), "d/a", 1)
	if err != nil || removed == 0 {
		t.Fatalf("CompactHistory: removed %d, %v", removed, err)
	}
	h, _ = s.GetNamespace(testCtx(t), "d/a")
	if disk := storedOnDisk(t, s, "d/a"); h.GetStoredBytes() != disk || disk >= before {
		t.Errorf("after CompactHistory: head %d bytes, disk %d, before %d: want head = disk < before", h.GetStoredBytes(), disk, before)
	}
	if recorded, heads := usageOf(t, s, "d", nss...); recorded != heads {
		t.Errorf("after CompactHistory: domain usage %d, heads %d", recorded, heads)
	}
	if _, err := s.CompactHistory(testCtx(t), "d/a", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("CompactHistory keep 0: %v, want ErrInvalid", err)
	}
}

// TestDomainQuota: a commit beyond the domain's stored-bytes quota is
// refused and changes nothing; a rollback is not refused (the safety
// path); compacting history makes room again.
func TestDomainQuota(t *testing.T) {
	s := newTestStore(t, Options{})
	mustDomain(t, s, "q")
	limits := DomainLimits{StoredBytes: 64 << 10}
	v1 := commit(t, s, Commit{Namespace: "q/n", Create: true, Rebase: true, Limits: limits, Content: randomSnap(t, 1, 20<<10),
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}})
	var qe *QuotaError
	var last *lehrpb.VersionInfo
	for i := range 10 {
		info, err := s.Commit(testCtx(t), Commit{Namespace: "q/n", Rebase: true, Limits: limits, Content: randomSnap(t, 1, 20<<10),
			Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}})
		if errors.As(err, &qe) {
			break
		}
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		last = info
	}
	if qe == nil || !errors.Is(qe, ErrQuota) {
		t.Fatalf("no QuotaError after filling a 64 KiB quota with 20 KiB versions")
	}
	if qe.Domain != "q" || qe.Limit != limits.StoredBytes || qe.Used+qe.Adding <= qe.Limit {
		t.Errorf("QuotaError %+v: want domain q, limit %d, used+adding above it", qe, limits.StoredBytes)
	}
	before, _ := usageOf(t, s, "q")
	head, _ := s.GetNamespace(testCtx(t), "q/n")
	if head.GetLatestVersion() != last.GetSeq() || before != qe.Used {
		t.Fatalf("a refused commit changed something: latest %d (want %d), usage %d (refusal saw %d)", head.GetLatestVersion(), last.GetSeq(), before, qe.Used)
	}

	// The rollback goes through, charged.
	_, old, err := s.Content(testCtx(t), "q/n", v1.GetSeq())
	if err != nil {
		t.Fatal(err)
	}
	rb := commit(t, s, Commit{Namespace: "q/n", Rebase: true, Limits: limits, Content: old,
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, RollbackOf: v1.GetSeq()}})
	if after, _ := usageOf(t, s, "q"); after <= before {
		t.Errorf("rollback was not charged: usage %d, before %d", after, before)
	}

	// Freed by compaction, the domain publishes again.
	if _, err := s.CompactHistory(testCtx(t), "q/n", 1); err != nil {
		t.Fatal(err)
	}
	if used, _ := usageOf(t, s, "q"); used >= limits.StoredBytes/2 {
		t.Fatalf("after CompactHistory keep 1 the domain still stores %d bytes", used)
	}
	next := commit(t, s, Commit{Namespace: "q/n", Rebase: true, Limits: limits, Content: randomSnap(t, 1, 20<<10),
		Info: &lehrpb.VersionInfo{Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}})
	if next.GetSeq() != rb.GetSeq()+1 {
		t.Errorf("version after compaction is %d, want %d", next.GetSeq(), rb.GetSeq()+1)
	}
}

// TestPublishRate: the domain's token bucket is taken in the commit's own
// transaction, shared by every replica (two Stores here); a rollback may
// overdraw it by a burst, no more.
func TestPublishRate(t *testing.T) {
	clock := newFakeClock()
	prefix := testPrefix(t)
	s1 := newTestStore(t, Options{Prefix: prefix, Now: clock.Now})
	s2 := newTestStore(t, Options{Prefix: prefix, Now: clock.Now})
	mustDomain(t, s1, "r")
	limits := DomainLimits{PublishesPerSecond: 1, PublishBurst: 2}
	publish := func(s *Store, source lehrpb.VersionSource) error {
		_, err := s.Commit(testCtx(t), Commit{Namespace: "r/n", Create: true, Rebase: true, Limits: limits,
			Content: randomSnap(t, 1, 16), Info: &lehrpb.VersionInfo{Source: source}})
		return err
	}
	snapshot, rollback := lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK
	if err := publish(s1, snapshot); err != nil {
		t.Fatal(err)
	}
	if err := publish(s2, snapshot); err != nil {
		t.Fatal(err)
	}
	var re *RateError
	if err := publish(s1, snapshot); !errors.As(err, &re) || re.Wait <= 0 || re.Wait > time.Second {
		t.Fatalf("third publish within the burst of 2: %v, want a RateError with a wait of at most 1s", err)
	}
	for i := range 2 {
		if err := publish(s2, rollback); err != nil {
			t.Fatalf("rollback %d overdrawing the bucket: %v", i, err)
		}
	}
	if err := publish(s1, rollback); !errors.As(err, &re) {
		t.Fatalf("rollback beyond a burst of debt: %v, want a RateError", err)
	}
	clock.Advance(5 * time.Second) // 2 in debt + 1 for the next
	if err := publish(s1, snapshot); err != nil {
		t.Fatalf("publish after the bucket refilled: %v", err)
	}
}

// TestPublishBytesRate: the domain's bucket of bytes of new content holds
// a burst of at least twice the largest namespace; beyond it a publish
// waits for what it adds, while a smaller one may fit sooner; a rollback
// may overdraw by a burst.
func TestPublishBytesRate(t *testing.T) {
	clock := newFakeClock()
	s := newTestStore(t, Options{Now: clock.Now})
	mustDomain(t, s, "b")
	limits := DomainLimits{PublishBytesPerSecond: 1 << 20} // burst 32 MiB
	publish := func(size int, source lehrpb.VersionSource) error {
		_, err := s.Commit(testCtx(t), Commit{Namespace: "b/n", Create: true, Rebase: true, Limits: limits,
			Content: randomSnap(t, max(1, size/(512<<10)), min(size, 512<<10)), Info: &lehrpb.VersionInfo{Source: source}})
		return err
	}
	snapshot, rollback := lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK
	if err := publish(20<<20, snapshot); err != nil {
		t.Fatalf("20 MiB within a 32 MiB burst: %v", err)
	}
	var re *RateError
	if err := publish(20<<20, snapshot); !errors.As(err, &re) || !re.Bytes || re.Wait < 8*time.Second || re.Wait > 9*time.Second {
		t.Fatalf("another 20 MiB: %v, want a bytes RateError with a wait of 8 s and a bit (what is over the burst, at 1 MiB/s)", err)
	}
	if err := publish(8<<20, snapshot); err != nil {
		t.Fatalf("8 MiB, which fits what is left: %v", err)
	}
	if err := publish(20<<20, rollback); err != nil {
		t.Fatalf("a 20 MiB rollback overdrawing the bucket: %v", err)
	}
	if err := publish(1<<20, snapshot); !errors.As(err, &re) || re.Wait < 16*time.Second {
		t.Fatalf("1 MiB with the bucket overdrawn: %v, want a RateError waiting the debt out", err)
	}
	clock.Advance(30 * time.Second)
	if err := publish(1<<20, snapshot); err != nil {
		t.Fatalf("after the bucket refilled: %v", err)
	}
}

// TestTinyRateWaitsADay: a rate so small that its wait would overflow a
// time.Duration (the issue: "due in -2562047h") reports a day.
func TestTinyRateWaitsADay(t *testing.T) {
	u := domainUsage{rec: &lehrpb.DomainUsageRecord{}}
	l := DomainLimits{PublishesPerSecond: 1e-300, PublishBurst: 1}
	next, err := u.charge("d", 10, l, time.Unix(1e9, 0), false)
	if err != nil {
		t.Fatalf("first publish, a full bucket: %v", err)
	}
	_, err = domainUsage{rec: next}.charge("d", 10, l, time.Unix(1e9, 0), false)
	var re *RateError
	if !errors.As(err, &re) || re.Wait != maxRateWait {
		t.Fatalf("second publish: %v, want a RateError waiting %v", err, maxRateWait)
	}
}
