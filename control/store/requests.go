package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"lehr.dev/lehr/proto/lehrpb"
)

// Request records (lehrpb.RequestRecord, under requests/<ns>/<request_id>)
// are written in the commit's own transaction and attached to an etcd
// lease, so etcd removes them: no compactor scan. One lease serves every
// record written during a bucket of requestBucket and is granted with TTL
// Retention.Requests + requestBucket, so a record lives between
// Retention.Requests and ten minutes more. That costs one LeaseGrant per
// bucket per control process.
const requestBucket = 10 * time.Minute

// leaseBucket hands out the lease that records written during one bucket
// of time share: request records (requestBucket) and audit records
// (auditBucket, audit.go).
type leaseBucket struct {
	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time // monotonic; zero: none
}

// lease returns b's current lease, granting one with ttl when the bucket
// ran out. what names the records in errors.
func (s *Store) lease(ctx context.Context, b *leaseBucket, bucket, ttl time.Duration, what string) (clientv3.LeaseID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.id != 0 && time.Since(b.granted) < bucket {
		return b.id, nil
	}
	start := time.Now()
	resp, err := call(s, ctx, "lease_grant", func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return s.cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	})
	if err != nil {
		return 0, fmt.Errorf("grant the %s lease: %w", what, err)
	}
	b.id, b.granted = resp.ID, start
	return b.id, nil
}

// forget drops b's lease if it is id (etcd no longer has it).
func (b *leaseBucket) forget(id clientv3.LeaseID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.id == id {
		b.id = 0
	}
}

// requestLease returns the lease request records are attached to now.
func (s *Store) requestLease(ctx context.Context) (clientv3.LeaseID, error) {
	return s.lease(ctx, &s.requests, requestBucket, s.opts.Retention.Requests+requestBucket, "request")
}

// forgetRequestLease drops the current request lease (etcd no longer has it).
func (s *Store) forgetRequestLease(id clientv3.LeaseID) { s.requests.forget(id) }

// isLeaseGone reports whether err says a lease does not exist (revoked or
// expired under us).
func isLeaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// Request returns the version the publish request id committed to ns, if
// the store still remembers it (Retention.Requests). ok is false when it
// does not: the request never committed, or long ago.
func (s *Store) Request(ctx context.Context, ns, id string) (info *lehrpb.VersionInfo, ok bool, err error) {
	if id == "" {
		return nil, false, nil
	}
	key := s.lay.request(ns, id)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("store: request %s of %s: %w", id, ns, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	rec := new(lehrpb.RequestRecord)
	if err := decode(key, resp.Kvs[0].Value, rec); err != nil {
		return nil, false, fmt.Errorf("store: request %s of %s: %w", id, ns, err)
	}
	return rec.GetInfo(), true, nil
}
