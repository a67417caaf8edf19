package store

// The store's identity.
//
//	identity                                  lehrpb.StoreIdentity
//
// The first control replica to start on a store makes its identity — a
// random id and the time — in a transaction that writes it only if no
// identity exists, so replicas starting together on a new store agree on
// one; a store made by a release without identities gets one at its first
// start after the upgrade. The identity is never rewritten: replicas
// sharing one etcd serve one id, and a replica started on a store of its
// own (an embedded etcd, for want of --etcd-endpoints) shows another on
// every response (internal/storeid), which clients pin.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// Identity is the store's identity as EnsureIdentity found or made it.
type Identity struct {
	// Store is the identity.
	Store *lehrpb.StoreIdentity
	// Created says this call made it: the store is new, or older than
	// identities.
	Created bool
	// Empty says this call made it on a store holding no key under the
	// prefix: a new, empty store.
	Empty bool
}

// EnsureIdentity returns the store's identity, making it first if the
// store has none (one transaction: of replicas racing on a new store, one
// makes it and the others read it).
func (s *Store) EnsureIdentity(ctx context.Context) (Identity, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Identity{}, fmt.Errorf("store: make the store's identity: %w", err)
	}
	id := &lehrpb.StoreIdentity{Id: hex.EncodeToString(raw[:]), CreateTime: timestamppb.New(s.opts.Now())}
	b, err := encode(id)
	if err != nil {
		return Identity{}, err
	}
	key := s.lay.identity()
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		// Counted before the put: the keys besides the identity.
		[]clientv3.Op{clientv3.OpGet(s.lay.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()), clientv3.OpPut(key, string(b))},
		[]clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return Identity{}, fmt.Errorf("store: the store's identity: %w", err)
	}
	if resp.Succeeded {
		return Identity{Store: id, Created: true, Empty: resp.Responses[0].GetResponseRange().GetCount() == 0}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return Identity{}, fmt.Errorf("store: the store's identity: %w: %s vanished", ErrCorrupt, key)
	}
	got := new(lehrpb.StoreIdentity)
	if err := decode(key, kvs[0].Value, got); err != nil {
		return Identity{}, err
	}
	if got.GetId() == "" {
		return Identity{}, fmt.Errorf("store: the store's identity: %w: %s holds no id", ErrCorrupt, key)
	}
	return Identity{Store: got}, nil
}
