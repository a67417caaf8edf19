package service

import (
	"context"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// Replica is what a control replica says of itself in GetControlStatus.
type Replica struct {
	// Address is the gRPC address the replica advertises, as registered
	// in the store (store.RunReplica) and in the strategist's election.
	Address string
	// Store is the identity of the store it serves (store.EnsureIdentity).
	Store *lehrpb.StoreIdentity
	// EmbeddedEtcd says the store is an etcd inside the replica;
	// otherwise EtcdEndpoints are the external cluster's client URLs.
	EmbeddedEtcd  bool
	EtcdEndpoints []string
	// ElectionKey is the prefix of the strategist's election; "" when the
	// replica runs no strategist (rollouts off).
	ElectionKey string
}

// etcdStatusTimeout bounds the etcd summary of GetControlStatus: a member
// slow to answer leaves it out rather than holding the answer.
const etcdStatusTimeout = 2 * time.Second

// GetControlStatus returns the store this replica serves, its etcd, the
// control replicas registered in it, which one leads the strategist, and
// this replica's address. Every user may read it.
func (s *Service) GetControlStatus(ctx context.Context, _ *lehrpb.GetControlStatusRequest) (_ *lehrpb.ControlStatus, err error) {
	defer s.track(ctx, "GetControlStatus", time.Now(), &err)
	r := s.replica
	out := &lehrpb.ControlStatus{Store: r.Store, Replica: r.Address, EmbeddedEtcd: r.EmbeddedEtcd, EtcdEndpoints: r.EtcdEndpoints}
	if out.Replicas, err = s.st.Replicas(ctx); err != nil {
		return nil, s.apiError(ctx, err)
	}
	if r.ElectionKey != "" {
		if out.StrategistLeader, err = s.st.StrategistLeader(ctx, r.ElectionKey); err != nil {
			return nil, s.apiError(ctx, err)
		}
	}
	ectx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
	defer cancel()
	if out.Etcd, err = s.st.EtcdStatus(ectx); err != nil {
		s.log.Debug("control: status: etcd's own status unavailable", "err", err)
		out.Etcd, err = nil, nil
	}
	return out, nil
}
