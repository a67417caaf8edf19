package store

import (
	"context"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// TakePublishToken takes one token from domain's publish budget: a token
// bucket refilled at rate tokens per second up to burst, kept in etcd at
// budgets/<domain> so that every control replica draws on the same budget
// (N replicas allow the domain's rate, not N times it). It returns false,
// with how long until a token is due, when the bucket is empty; nothing is
// written then. Each take is one etcd read and one guarded transaction,
// retried when another replica took a token in between.
//
// now is the caller's clock; the bucket's time never moves backwards, so a
// replica whose clock is behind refills nothing rather than draining.
func (s *Store) TakePublishToken(ctx context.Context, domain string, rate float64, burst int, now time.Time) (ok bool, wait time.Duration, err error) {
	if err := names.Domain(domain); err != nil {
		return false, 0, fmt.Errorf("store: publish budget: %w: %w", ErrInvalid, err)
	}
	if !(rate > 0) || math.IsInf(rate, 0) || burst < 1 {
		return false, 0, fmt.Errorf("store: publish budget of %s: %w: rate %v, burst %d", domain, ErrInvalid, rate, burst)
	}
	key := s.lay.budget(domain)
	for range maxCommitAttempts {
		resp, err := s.get(ctx, key)
		if err != nil {
			return false, 0, fmt.Errorf("store: read the publish budget of %s: %w", domain, err)
		}
		b := &lehrpb.PublishBudget{Tokens: float64(burst), Time: timestamppb.New(now)}
		var mod int64
		if len(resp.Kvs) > 0 {
			mod = resp.Kvs[0].ModRevision
			if err := decode(key, resp.Kvs[0].Value, b); err != nil {
				return false, 0, err
			}
		}
		at := b.GetTime().AsTime()
		if now.After(at) {
			b.Tokens += now.Sub(at).Seconds() * rate
			at = now
		}
		b.Tokens = min(b.Tokens, float64(burst))
		if b.Tokens < 1 {
			return false, time.Duration((1 - b.Tokens) / rate * float64(time.Second)), nil
		}
		b.Tokens--
		b.Time = timestamppb.New(at)
		v, err := encode(b)
		if err != nil {
			return false, 0, err
		}
		guard := clientv3.Compare(clientv3.ModRevision(key), "=", mod)
		if mod == 0 {
			guard = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		}
		tr, err := s.txn(ctx, []clientv3.Cmp{guard}, []clientv3.Op{clientv3.OpPut(key, string(v))}, nil)
		if err != nil {
			return false, 0, fmt.Errorf("store: take a publish token of %s: %w", domain, err)
		}
		if tr.Succeeded {
			return true, 0, nil
		}
	}
	return false, 0, fmt.Errorf("store: take a publish token of %s: %w", domain, ErrContention)
}
