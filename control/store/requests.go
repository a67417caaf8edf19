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

// requestLeases hands out the lease of the current bucket.
type requestLeases struct {
	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time // monotonic; zero: none
}

// requestLease returns the lease request records are attached to now,
// granting a new one when the bucket ran out.
func (s *Store) requestLease(ctx context.Context) (clientv3.LeaseID, error) {
	r := &s.requests
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != 0 && time.Since(r.granted) < requestBucket {
		return r.id, nil
	}
	ttl := s.opts.Retention.Requests + requestBucket
	start := time.Now()
	resp, err := s.cli.Grant(reqCtx(ctx), int64((ttl+time.Second-1)/time.Second))
	s.observe("lease grant", start, err)
	if err != nil {
		return 0, fmt.Errorf("grant the request lease: %w", err)
	}
	r.id, r.granted = resp.ID, start
	return r.id, nil
}

// forgetRequestLease drops the current lease (etcd no longer has it).
func (s *Store) forgetRequestLease(id clientv3.LeaseID) {
	r := &s.requests
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id == id {
		r.id = 0
	}
}

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
