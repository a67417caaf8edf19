package store

// The audit log: one record per mutating call under
// audit/<unix nanoseconds>-<random>, so keys sort by time. Records are
// written once and never changed; each is attached to a lease of
// Retention.Audit (granted once an hour per control process and shared by
// that hour's records), so etcd removes them when their time is up.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// auditBucket is how long one audit lease is shared.
const auditBucket = time.Hour

// auditLease returns the lease audit records are attached to now.
func (s *Store) auditLease(ctx context.Context) (clientv3.LeaseID, error) {
	return s.lease(ctx, &s.audit, auditBucket, s.opts.Retention.Audit+auditBucket, "audit")
}

// AppendAudit stores recs (each at its Time, which must be set), up to
// maxOpsPerTxn in one transaction.
func (s *Store) AppendAudit(ctx context.Context, recs ...*lehrpb.AuditRecord) error {
	ops := make([]clientv3.Op, 0, len(recs))
	for len(recs) > 0 {
		n := min(len(recs), maxOpsPerTxn)
		batch := recs[:n]
		recs = recs[n:]
		var written bool
		for range 2 {
			lease, err := s.auditLease(ctx)
			if err != nil {
				return fmt.Errorf("store: audit: %w", err)
			}
			ops = ops[:0]
			for _, rec := range batch {
				var r [4]byte
				rand.Read(r[:])
				key := fmt.Sprintf("%s%020d-%s", s.lay.auditPrefix(), rec.GetTime().AsTime().UnixNano(), hex.EncodeToString(r[:]))
				b, err := encode(rec)
				if err != nil {
					return err
				}
				ops = append(ops, clientv3.OpPut(key, string(b), clientv3.WithLease(lease)))
			}
			_, err = s.txn(ctx, nil, ops, nil)
			if isLeaseGone(err) {
				s.audit.forget(lease)
				continue
			}
			if err != nil {
				return fmt.Errorf("store: audit: %w", err)
			}
			written = true
			break
		}
		if !written {
			return fmt.Errorf("store: audit: the audit lease keeps vanishing")
		}
	}
	return nil
}

// AuditRecords returns up to limit records at or after since, after the key
// token (from a previous page; "" for the first), of domain ("" for all),
// oldest first, and the token of the next page ("" when there is none).
// Records are read in batches so a filter that matches few scans all.
func (s *Store) AuditRecords(ctx context.Context, domain string, since time.Time, token string, limit int) ([]*lehrpb.AuditRecord, string, error) {
	prefix := s.lay.auditPrefix()
	from := fmt.Sprintf("%s%020d", prefix, max(since.UnixNano(), 0))
	if token != "" {
		if t := prefix + token + "\x00"; t > from {
			from = t
		}
	}
	end := prefixEnd(prefix)
	var out []*lehrpb.AuditRecord
	last := ""
	for {
		resp, err := s.get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(500))
		if err != nil {
			return nil, "", fmt.Errorf("store: read the audit log: %w", err)
		}
		for _, kv := range resp.Kvs {
			rec := new(lehrpb.AuditRecord)
			if err := decode(string(kv.Key), kv.Value, rec); err != nil {
				return nil, "", err
			}
			if domain != "" && rec.GetDomain() != domain {
				continue
			}
			if len(out) == limit {
				return out, last[len(prefix):], nil
			}
			out = append(out, rec)
			last = string(kv.Key)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, "", nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// auditTrimBatch bounds the records one trimming transaction deletes.
const auditTrimBatch = 10_000

// TrimAudit removes the oldest audit records beyond
// Retention.AuditRecords, whatever their age, and returns how many it
// removed. The history compactor runs it after each pass.
func (s *Store) TrimAudit(ctx context.Context) (int, error) {
	prefix := s.lay.auditPrefix()
	resp, err := s.get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: count audit records: %w", err)
	}
	over := int(resp.Count) - s.opts.Retention.AuditRecords
	removed := 0
	for over > 0 && ctx.Err() == nil {
		n := min(over, auditTrimBatch)
		oldest, err := s.get(ctx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(n)))
		if err != nil {
			return removed, fmt.Errorf("store: trim the audit log: %w", err)
		}
		if len(oldest.Kvs) == 0 {
			break
		}
		last := string(oldest.Kvs[len(oldest.Kvs)-1].Key)
		del, err := call(s, ctx, "delete", func(ctx context.Context) (*clientv3.DeleteResponse, error) {
			return s.cli.Delete(ctx, prefix, clientv3.WithRange(afterKey(last)))
		})
		if err != nil {
			return removed, fmt.Errorf("store: trim the audit log: %w", err)
		}
		removed += int(del.Deleted)
		over -= len(oldest.Kvs)
	}
	return removed, nil
}
