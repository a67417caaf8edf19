package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// PolicyHistoryKept is how many records of a scope's rollout-policy
// history the store keeps; each change drops the oldest beyond it.
const PolicyHistoryKept = 100

// GenerationError reports an expected generation that is not the scope's
// current one. It wraps ErrConflict.
type GenerationError struct {
	Scope             string
	Expected, Current uint64
}

func (e *GenerationError) Error() string {
	return fmt.Sprintf("store: rollout policy of %s: expected generation %d, current is %d", e.Scope, e.Expected, e.Current)
}

// Unwrap returns ErrConflict.
func (e *GenerationError) Unwrap() error { return ErrConflict }

// owner is a key that must exist for a policy scope to be set.
type owner struct{ key, what, name string }

// policyScope checks a scope ("domain" or "domain/name") and returns what
// must exist for it: the domain, and the namespace for a namespace scope.
func (s *Store) policyScope(scope string) ([]owner, error) {
	if !strings.Contains(scope, "/") {
		if err := names.Domain(scope); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return []owner{{s.lay.domain(scope), "domain", scope}}, nil
	}
	d, _, err := names.Namespace(scope)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return []owner{{s.lay.domain(d), "domain", d}, {s.lay.nsmeta(scope), "namespace", scope}}, nil
}

// PutRolloutPolicy stores rec as the next generation of its scope's rollout
// policy (rec.Deleted: removes it) and appends it to the scope's history,
// in one transaction. The store fills scope, generation and update_time.
// The scope's domain, and for a namespace scope the namespace, must exist
// (*NotFoundError). With expected != 0 the scope's current generation must
// be expected (*GenerationError). Storing the policy the scope already has,
// or deleting one it does not have, changes nothing and returns the current
// record (nil if none).
func (s *Store) PutRolloutPolicy(ctx context.Context, scope string, rec *lehrpb.RolloutPolicyRecord, expected uint64) (*lehrpb.RolloutPolicyRecord, error) {
	must, err := s.policyScope(scope)
	if err != nil {
		return nil, fmt.Errorf("store: put rollout policy: %w", err)
	}
	key := s.lay.policy(scope)
	var stored *lehrpb.RolloutPolicyRecord
	err = optimistic(ctx, "put rollout policy of "+scope, func(int) (bool, error) {
		ops := []clientv3.Op{clientv3.OpGet(key)}
		for _, o := range must {
			ops = append(ops, clientv3.OpGet(o.key, clientv3.WithCountOnly()))
		}
		rs, _, err := s.readAt(ctx, ops...)
		if err != nil {
			return false, fmt.Errorf("store: put rollout policy of %s: %w", scope, err)
		}
		for i, o := range must {
			if rs[i+1].Count == 0 {
				return false, &NotFoundError{What: o.what, Name: o.name}
			}
		}
		var cur *lehrpb.RolloutPolicyRecord
		var curRev int64
		if len(rs[0].Kvs) > 0 {
			cur = new(lehrpb.RolloutPolicyRecord)
			if err := decode(key, rs[0].Kvs[0].Value, cur); err != nil {
				return false, fmt.Errorf("store: put rollout policy of %s: %w", scope, err)
			}
			curRev = rs[0].Kvs[0].ModRevision
		}
		gen := cur.GetGeneration()
		if expected != 0 && expected != gen {
			return false, &GenerationError{Scope: scope, Expected: expected, Current: gen}
		}
		switch {
		case rec.GetDeleted() && (cur == nil || cur.GetDeleted()):
			return true, nil // nothing to delete: stored stays nil
		case !rec.GetDeleted() && cur != nil && !cur.GetDeleted() && proto.Equal(cur.GetPolicy(), rec.GetPolicy()):
			stored = cur
			return true, nil
		}
		next := proto.CloneOf(rec)
		next.Scope, next.Generation, next.UpdateTime = scope, gen+1, timestamppb.New(s.opts.Now())
		if next.Deleted {
			next.Policy = nil
		}
		b, err := encode(next)
		if err != nil {
			return false, fmt.Errorf("store: put rollout policy of %s: %w", scope, err)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", curRev)}
		for _, o := range must {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(o.key), ">", 0))
		}
		then := []clientv3.Op{
			clientv3.OpPut(key, string(b)),
			clientv3.OpPut(s.lay.policyHistory(scope, next.Generation), string(b)),
		}
		if next.Generation > PolicyHistoryKept {
			then = append(then, clientv3.OpDelete(s.lay.policyHistory(scope, next.Generation-PolicyHistoryKept)))
		}
		resp, err := s.txn(ctx, cmps, then, nil)
		if err != nil {
			return false, fmt.Errorf("store: put rollout policy of %s: %w", scope, err)
		}
		if resp.Succeeded {
			stored = next
		}
		// Else another writer, or the scope went away: read again.
		return resp.Succeeded, nil
	})
	if err != nil {
		return nil, err
	}
	return stored, nil
}

// RolloutPolicy returns the scope's current rollout-policy record, nil if
// none was ever set. A removed policy is returned as its deletion record.
func (s *Store) RolloutPolicy(ctx context.Context, scope string) (*lehrpb.RolloutPolicyRecord, error) {
	if _, err := s.policyScope(scope); err != nil {
		return nil, fmt.Errorf("store: get rollout policy: %w", err)
	}
	key := s.lay.policy(scope)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: get rollout policy of %s: %w", scope, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	rec := new(lehrpb.RolloutPolicyRecord)
	if err := decode(key, resp.Kvs[0].Value, rec); err != nil {
		return nil, fmt.Errorf("store: get rollout policy of %s: %w", scope, err)
	}
	return rec, nil
}

// RolloutPolicyHistory returns up to limit records of the scope's history,
// newest first, older than generation before (0: from the newest). A
// limit <= 0 means 100; at most 1000 are returned.
func (s *Store) RolloutPolicyHistory(ctx context.Context, scope string, before uint64, limit int) ([]*lehrpb.RolloutPolicyRecord, error) {
	if _, err := s.policyScope(scope); err != nil {
		return nil, fmt.Errorf("store: rollout policy history: %w", err)
	}
	from := s.lay.policyHistoryPrefix(scope)
	end := prefixEnd(from)
	if before > 0 {
		end = s.lay.policyHistory(scope, before)
	}
	resp, err := s.get(ctx, from, clientv3.WithRange(end),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(listLimit(limit)))
	if err != nil {
		return nil, fmt.Errorf("store: rollout policy history of %s: %w", scope, err)
	}
	out := make([]*lehrpb.RolloutPolicyRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rec := new(lehrpb.RolloutPolicyRecord)
		if err := decode(string(kv.Key), kv.Value, rec); err != nil {
			return nil, fmt.Errorf("store: rollout policy history of %s: %w", scope, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
