package store

// What each domain holds in the store, and its publish budget.
//
// A namespace's head records stored_bytes: what its retained versions take
// in etcd, keys and values — each version's record and the blobs the
// version put, that is the manifest chunks and values its parent did not
// reference. usage/<domain> (lehrpb.DomainUsageRecord) holds the sum over
// the domain's namespaces and the domain's publish token bucket. A Commit
// reads it with the head, checks the domain's limits (DomainLimits) against
// it and updates it in the version's own transaction, guarded by its mod
// revision, so every control replica counts the same bytes and takes from
// the same bucket, and a version is charged exactly when it becomes
// visible. A commit that loses the guard to another commit of the same
// domain (and to nothing else) retries only its final transaction.
//
// A commit's charge is an upper bound: a blob the parent does not
// reference may already exist for an older version (a rollback re-puts
// its content). History compaction recounts each namespace it visits at
// one revision — every retained record, and every chunk and value they
// reference once — and corrects the head and the domain's sum; a
// namespace written by a release that did not count is counted so too.
// Blobs of a commit that never completed are in no count: the compactor
// collects them.

import (
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// DomainLimits are the limits of a namespace's domain a Commit enforces.
// A rollback (Info.Source VERSION_SOURCE_ROLLBACK) is the safety path: it
// is never refused for StoredBytes (it is charged all the same) and may
// take the publish bucket down to minus PublishBurst tokens, so a tenant
// that used up its quota or its rate can still undo a change — and a
// flood of rollbacks is still bounded by the rate.
type DomainLimits struct {
	// StoredBytes bounds the domain's stored bytes after the commit; 0:
	// no bound.
	StoredBytes int64
	// PublishesPerSecond and PublishBurst are the domain's publish token
	// bucket, shared by every control replica; a rate of 0: no limit. A
	// burst below 1 is the rate rounded up.
	PublishesPerSecond float64
	PublishBurst       int
	// PublishBytesPerSecond is the domain's bucket of bytes of new content
	// (what its versions add to the store), with a burst of
	// bytesBurst; 0: no limit.
	PublishBytesPerSecond int64
}

func (l DomainLimits) burst() int {
	if l.PublishBurst >= 1 {
		return l.PublishBurst
	}
	return max(1, int(math.Ceil(l.PublishesPerSecond)))
}

// maxRateWait bounds the wait a RateError reports: beyond it a rate is
// effectively none.
const maxRateWait = 24 * time.Hour

// minBytesBurst is the least byte burst: twice the largest namespace
// (validate.MaxNamespaceBytes), so any version can be published at once.
const minBytesBurst = 32 << 20

// bytesBurst is the byte bucket's size: four seconds' worth, at least
// minBytesBurst.
func (l DomainLimits) bytesBurst() int64 { return max(minBytesBurst, 4*l.PublishBytesPerSecond) }

// QuotaError says a commit would take its domain beyond its stored-bytes
// quota. It wraps ErrQuota.
type QuotaError struct {
	Domain string
	// Used is what the domain stores, Adding what the commit would add,
	// Limit the quota; bytes.
	Used, Adding, Limit int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("store: domain %s stores %d bytes of its %d-byte quota; the version would add %d", e.Domain, e.Used, e.Limit, e.Adding)
}

// Unwrap returns ErrQuota.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// RateError says a domain's publish bucket is empty: of publishes, or
// of bytes of new content when Bytes. It wraps ErrQuota.
type RateError struct {
	Domain string
	Bytes  bool
	Rate   float64
	Burst  int
	// Wait is how long until the publish would fit.
	Wait time.Duration
}

func (e *RateError) Error() string {
	if e.Bytes {
		return fmt.Sprintf("store: domain %s allows %g bytes of new content per second (burst %d); this publish fits in %v", e.Domain, e.Rate, e.Burst, e.Wait)
	}
	return fmt.Sprintf("store: domain %s allows %g publishes per second (burst %d); the next is due in %v", e.Domain, e.Rate, e.Burst, e.Wait)
}

// Unwrap returns ErrQuota.
func (e *RateError) Unwrap() error { return ErrQuota }

// domainUsage is usage/<domain> as read: the record (zero if absent) and
// its mod revision (0 if absent).
type domainUsage struct {
	rec *lehrpb.DomainUsageRecord
	mod int64
}

// decodeUsage decodes the usage record from a read of its key.
func decodeUsage(resp *clientv3.GetResponse) (domainUsage, error) {
	u := domainUsage{rec: new(lehrpb.DomainUsageRecord)}
	if len(resp.Kvs) == 0 {
		return u, nil
	}
	u.mod = resp.Kvs[0].ModRevision
	return u, decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value, u.rec)
}

// guard compares the usage key with the state u was read in.
func (u domainUsage) guard(key string) clientv3.Cmp {
	if u.mod == 0 {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", u.mod)
}

// charge returns the usage record after a commit of domain adding bytes
// under limits at now, or a *QuotaError or *RateError. safety is a
// rollback's commit (see DomainLimits).
func (u domainUsage) charge(domain string, bytes int64, l DomainLimits, now time.Time, safety bool) (*lehrpb.DomainUsageRecord, error) {
	next := &lehrpb.DomainUsageRecord{
		StoredBytes:   u.rec.GetStoredBytes() + bytes,
		PublishTokens: u.rec.GetPublishTokens(),
		PublishBytes:  u.rec.GetPublishBytes(),
		PublishTime:   u.rec.GetPublishTime(),
	}
	if !safety && l.StoredBytes > 0 && next.StoredBytes > l.StoredBytes {
		return nil, &QuotaError{Domain: domain, Used: u.rec.GetStoredBytes(), Adding: bytes, Limit: l.StoredBytes}
	}
	// Both buckets refill from publish_time, which never moves backwards,
	// so a replica whose clock is behind refills nothing rather than
	// draining.
	at, elapsed := now, 0.0
	if t := u.rec.GetPublishTime(); t != nil {
		at = t.AsTime()
		if now.After(at) {
			elapsed, at = now.Sub(at).Seconds(), now
		}
	}
	fresh := u.rec.GetPublishTime() == nil
	take := func(have, rate, burst, want float64) (left float64, wait time.Duration, ok bool) {
		if fresh {
			have = burst
		}
		have = min(have+elapsed*rate, burst)
		floor := want // what must be there
		if safety {
			floor = want - burst
		}
		if have < floor {
			// A tiny rate (1e-300 is a valid float) must not overflow the
			// wait into the past.
			return 0, time.Duration(min((floor-have)/rate, maxRateWait.Seconds()) * float64(time.Second)), false
		}
		return have - want, 0, true
	}
	if r := l.PublishesPerSecond; r > 0 && !math.IsInf(r, 0) {
		left, wait, ok := take(u.rec.GetPublishTokens(), r, float64(l.burst()), 1)
		if !ok {
			return nil, &RateError{Domain: domain, Rate: r, Burst: l.burst(), Wait: wait}
		}
		next.PublishTokens = left
	}
	if r := l.PublishBytesPerSecond; r > 0 {
		left, wait, ok := take(u.rec.GetPublishBytes(), float64(r), float64(l.bytesBurst()), float64(bytes))
		if !ok {
			return nil, &RateError{Domain: domain, Bytes: true, Rate: float64(r), Burst: int(min(l.bytesBurst(), math.MaxInt)), Wait: wait}
		}
		next.PublishBytes = left
	}
	next.PublishTime = timestamppb.New(at)
	return next, nil
}

// putSize is what a put of key and value takes in the store, as counted
// against a domain.
func putSize(key string, value []byte) int64 { return int64(len(key) + len(value)) }
