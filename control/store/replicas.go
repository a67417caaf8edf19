package store

// Control replicas.
//
// Every control replica registers itself while it runs (RunReplica):
//
//	replicas/<address>                        lehrpb.ControlReplica
//
// attached to a lease of ReplicaTTL that the replica renews every third
// of it. A replica that stops revokes its lease, which removes the key at
// once; one that is killed, or cut off from etcd, disappears when the
// lease expires, with no sweeper. A replica whose lease was lost (etcd
// unreachable for longer than the TTL) registers again.
//
// The address is the key: a second replica advertising an address already
// registered under a live lease is not registered (it logs why, and tries
// again until that lease expires — the case of a replica restarted within
// the TTL of its killed predecessor).
//
// Replicas lists them, with when each last renewed its lease (etcd's
// remaining TTL says so, to a second); StrategistLeader names the replica
// leading the strategist's election; EtcdStatus sums up the etcd cluster.
// All three are for operators (lehr control status), a few requests each.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/proto/lehrpb"
)

// ReplicaTTL is the lease a replica's registration lives on: a replica
// that dies without stopping is listed for at most this long.
const ReplicaTTL = 10 * time.Second

// ErrReplicaTaken is wrapped when a replica's address is registered by
// another live lease.
var ErrReplicaTaken = errors.New("store: replica address registered by another replica")

// replicaRetry paces registrations that failed.
var replicaRetry = backoff.Policy{Min: 200 * time.Millisecond, Max: ReplicaTTL / 2}

// RunReplica registers r (its address and what else it says) until ctx
// ends, then removes it; see the comment at the top of this file. It
// returns nil when ctx ends, or an error for a record it cannot register
// at all (ErrInvalid).
func (s *Store) RunReplica(ctx context.Context, r *lehrpb.ControlReplica) error {
	if a := r.GetAddress(); a == "" || strings.Contains(a, "/") {
		return fmt.Errorf("store: register replica: %w", invalidf("address %q: want host:port", a))
	}
	b, err := encode(r)
	if err != nil {
		return fmt.Errorf("store: register replica %s: %w", r.GetAddress(), err)
	}
	for attempt := 0; ; attempt++ {
		renewed, err := s.registerReplica(ctx, r.GetAddress(), b)
		if ctx.Err() != nil {
			return nil
		}
		if renewed {
			attempt = 0
		}
		wait := replicaRetry.Full(attempt)
		if errors.Is(err, ErrReplicaTaken) {
			wait = ReplicaTTL / 2
		}
		s.log.Warn("store: control replica not registered; retrying", "replica", r.GetAddress(), "err", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// registerReplica registers b under address on a new lease and renews the
// lease until ctx ends (the lease is then revoked) or it is lost.
// renewed says the registration held for a while.
func (s *Store) registerReplica(ctx context.Context, address string, b []byte) (renewed bool, err error) {
	lease, err := s.grant(ctx, int64(ReplicaTTL/time.Second))
	if err != nil {
		return false, fmt.Errorf("grant a lease: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		s.revoke(rctx, lease.ID)
		cancel()
	}()
	key := s.lay.replica(address)
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))},
		[]clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return false, fmt.Errorf("register: %w", err)
	}
	if !resp.Succeeded {
		holder := ""
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			holder = fmt.Sprintf(" (lease %x)", kvs[0].Lease)
		}
		return false, fmt.Errorf("%w%s: another replica advertises %s, or this one's previous run has not expired yet", ErrReplicaTaken, holder, address)
	}
	last := time.Now()
	t := time.NewTicker(ReplicaTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-t.C:
		}
		switch err := s.keepAlive(ctx, lease.ID); {
		case err == nil:
			last, renewed = time.Now(), true
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return renewed, fmt.Errorf("lease %x expired", lease.ID)
		case time.Since(last) > ReplicaTTL:
			return renewed, fmt.Errorf("lease %x not renewed for %v: %w", lease.ID, time.Since(last).Round(time.Second), err)
		}
	}
}

// Replicas returns the registered control replicas, by address, each with
// when it last renewed its registration (LastSeenTime).
func (s *Store) Replicas(ctx context.Context) ([]*lehrpb.ControlReplica, error) {
	resp, err := s.get(ctx, s.lay.replicasPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list replicas: %w", err)
	}
	now := s.opts.Now()
	out := make([]*lehrpb.ControlReplica, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := new(lehrpb.ControlReplica)
		if err := decode(string(kv.Key), kv.Value, r); err != nil {
			return nil, err
		}
		ttl, err := call(s, ctx, "lease_ttl", func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
			return s.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		})
		switch {
		case err != nil:
			return nil, fmt.Errorf("store: list replicas: lease of %s: %w", r.GetAddress(), err)
		case ttl.TTL < 0:
			continue // expired since the get
		}
		r.LastSeenTime = timestamppb.New(now.Add(-time.Duration(ttl.GrantedTTL-ttl.TTL) * time.Second))
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *lehrpb.ControlReplica) int { return cmp.Compare(a.GetAddress(), b.GetAddress()) })
	return out, nil
}

// StrategistLeader returns the value of the leader of the election at
// prefix electionKey (etcd's concurrency.Election: the candidate whose key
// is oldest), "" when nobody campaigns.
func (s *Store) StrategistLeader(ctx context.Context, electionKey string) (string, error) {
	resp, err := s.get(ctx, electionKey+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("store: strategist leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// EtcdStatus sums up the etcd cluster holding the store: its id, its
// members, which leads, and the answering member's version.
func (s *Store) EtcdStatus(ctx context.Context) (*lehrpb.EtcdClusterStatus, error) {
	ml, err := call(s, ctx, "member_list", func(ctx context.Context) (*clientv3.MemberListResponse, error) {
		return s.maint.MemberList(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("store: etcd members: %w", err)
	}
	var st *clientv3.StatusResponse
	var errs []error
	for _, ep := range s.endpoints() {
		st, err = call(s, ctx, "status", func(ctx context.Context) (*clientv3.StatusResponse, error) {
			return s.maint.Status(ctx, ep)
		})
		if err == nil {
			break
		}
		errs = append(errs, fmt.Errorf("status of %q: %w", ep, err))
	}
	if st == nil {
		return nil, fmt.Errorf("store: etcd status: %w", errors.Join(errs...))
	}
	out := &lehrpb.EtcdClusterStatus{ClusterId: fmt.Sprintf("%x", ml.Header.GetClusterId()), Version: st.Version}
	for _, m := range ml.Members {
		name := cmp.Or(m.GetName(), fmt.Sprintf("%x (not started)", m.GetID()))
		out.Members = append(out.Members, name)
		if m.GetID() == st.Leader {
			out.Leader = name
		}
	}
	slices.Sort(out.Members)
	return out, nil
}
