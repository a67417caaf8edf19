package store

// Propagation measurements: the record of the most recent updates'
// propagation times (control/propagation), one key,
//
//	propagation                               lehrpb.PropagationRecord
//
// written by the leader of the rollout strategist (guarded by its
// leadership) and read by every replica for GetPropagationStatus.

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// Propagation returns the stored propagation record, or an empty one
// when none was written yet.
func (s *Store) Propagation(ctx context.Context) (*lehrpb.PropagationRecord, error) {
	resp, err := s.get(ctx, s.lay.propagation())
	if err != nil {
		return nil, fmt.Errorf("store: propagation: %w", err)
	}
	rec := new(lehrpb.PropagationRecord)
	if len(resp.Kvs) == 0 {
		return rec, nil
	}
	if err := decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value, rec); err != nil {
		return nil, fmt.Errorf("store: propagation: %w", err)
	}
	return rec, nil
}

// PutPropagation replaces the propagation record with rec if g holds
// (the zero Guard guards nothing); ErrNotLeader if it does not.
func (s *Store) PutPropagation(ctx context.Context, g Guard, rec *lehrpb.PropagationRecord) error {
	b, err := encode(rec)
	if err != nil {
		return fmt.Errorf("store: put propagation: %w", err)
	}
	if len(b) > MaxZoneReportPartBytes {
		return fmt.Errorf("store: put propagation: %w", invalidf("the record is %d bytes encoded; at most %d", len(b), MaxZoneReportPartBytes))
	}
	var cmps []clientv3.Cmp
	if g.Key != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
	}
	resp, err := s.txn(ctx, cmps, []clientv3.Op{clientv3.OpPut(s.lay.propagation(), string(b))}, nil)
	if err != nil {
		return fmt.Errorf("store: put propagation: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: put propagation: %w", ErrNotLeader)
	}
	return nil
}
