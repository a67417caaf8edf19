package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Canary evaluations are stored one key each, next to the version they
// judge (evaluations/<ns>/<version>/<name>), so pruning a rollout prunes
// its evaluations. An evaluation's id is "<namespace>@<version>/<name>".

// MaxEvaluationNameBytes bounds the name part of an evaluation id.
const MaxEvaluationNameBytes = 63

// EvaluationID returns the id of evaluation name of version seq of ns.
func EvaluationID(ns string, seq uint64, name string) string {
	return fmt.Sprintf("%s@%d/%s", ns, seq, name)
}

// ParseEvaluationID splits an evaluation id into its namespace, version
// and name, checking each.
func ParseEvaluationID(id string) (ns string, seq uint64, name string, err error) {
	head, name, ok := strings.Cut(id, "/")
	if ok {
		// The namespace has one "/" itself: domain/name@seq/name.
		var rest string
		rest, name, ok = strings.Cut(name, "/")
		head += "/" + rest
	}
	at := strings.LastIndexByte(head, '@')
	if !ok || at < 0 {
		return "", 0, "", fmt.Errorf("%w: evaluation id %q: want <domain>/<namespace>@<version>/<name>", ErrInvalid, id)
	}
	ns = head[:at]
	if _, _, err := names.Namespace(ns); err != nil {
		return "", 0, "", fmt.Errorf("%w: evaluation id %q: %w", ErrInvalid, id, err)
	}
	if seq, err = strconv.ParseUint(head[at+1:], 10, 64); err != nil || seq == 0 {
		return "", 0, "", fmt.Errorf("%w: evaluation id %q: version %q is not a positive number", ErrInvalid, id, head[at+1:])
	}
	if err := checkEvaluationName(name); err != nil {
		return "", 0, "", fmt.Errorf("%w: evaluation id %q: %w", ErrInvalid, id, err)
	}
	return ns, seq, name, nil
}

func checkEvaluationName(name string) error {
	if name == "" || len(name) > MaxEvaluationNameBytes {
		return fmt.Errorf("name is %d bytes; want 1 to %d", len(name), MaxEvaluationNameBytes)
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q: %q at offset %d; want letters, digits, '-', '_' or '.'", name, r, i)
		}
	}
	return nil
}

func (s *Store) evaluationKey(id string) (string, error) {
	ns, seq, name, err := ParseEvaluationID(id)
	if err != nil {
		return "", err
	}
	return s.lay.evaluation(ns, seq, name), nil
}

// CreateEvaluation stores ev unless an evaluation with its id exists, and
// returns the one stored: ev, or the existing one (created false).
func (s *Store) CreateEvaluation(ctx context.Context, ev *lehrpb.CanaryEvaluation) (_ *lehrpb.CanaryEvaluation, created bool, err error) {
	key, err := s.evaluationKey(ev.GetId())
	if err != nil {
		return nil, false, fmt.Errorf("store: create evaluation: %w", err)
	}
	b, err := encode(ev)
	if err != nil {
		return nil, false, fmt.Errorf("store: create evaluation %s: %w", ev.GetId(), err)
	}
	resp, err := s.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, string(b))},
		[]clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return nil, false, fmt.Errorf("store: create evaluation %s: %w", ev.GetId(), err)
	}
	if resp.Succeeded {
		return ev, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, false, fmt.Errorf("store: create evaluation %s: %w: it vanished meanwhile", ev.GetId(), ErrConflict)
	}
	old := new(lehrpb.CanaryEvaluation)
	if err := decode(key, kvs[0].Value, old); err != nil {
		return nil, false, fmt.Errorf("store: create evaluation %s: %w", ev.GetId(), err)
	}
	return old, false, nil
}

// PutEvaluation writes an existing evaluation's new state, guarded by g
// (the strategist's leadership). ErrNotLeader when g no longer holds;
// a *NotFoundError when the evaluation is gone (pruned).
func (s *Store) PutEvaluation(ctx context.Context, g Guard, ev *lehrpb.CanaryEvaluation) error {
	key, err := s.evaluationKey(ev.GetId())
	if err != nil {
		return fmt.Errorf("store: put evaluation: %w", err)
	}
	b, err := encode(ev)
	if err != nil {
		return fmt.Errorf("store: put evaluation %s: %w", ev.GetId(), err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}
	if g.Key != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
	}
	resp, err := s.txn(ctx, cmps, []clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
	if err != nil {
		return fmt.Errorf("store: put evaluation %s: %w", ev.GetId(), err)
	}
	if !resp.Succeeded {
		if _, err := s.Evaluation(ctx, ev.GetId()); err != nil {
			return err
		}
		return fmt.Errorf("store: put evaluation %s: %w", ev.GetId(), ErrNotLeader)
	}
	return nil
}

// Evaluation returns the evaluation id, or a *NotFoundError.
func (s *Store) Evaluation(ctx context.Context, id string) (*lehrpb.CanaryEvaluation, error) {
	key, err := s.evaluationKey(id)
	if err != nil {
		return nil, fmt.Errorf("store: evaluation: %w", err)
	}
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: evaluation %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &NotFoundError{What: "canary evaluation", Name: id}
	}
	ev := new(lehrpb.CanaryEvaluation)
	if err := decode(key, resp.Kvs[0].Value, ev); err != nil {
		return nil, fmt.Errorf("store: evaluation %s: %w", id, err)
	}
	return ev, nil
}

// Evaluations returns the evaluations of ns ("" for every namespace), by
// namespace, version and name.
func (s *Store) Evaluations(ctx context.Context, ns string) ([]*lehrpb.CanaryEvaluation, error) {
	prefix := s.lay.evaluationsPrefix()
	if ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, fmt.Errorf("store: evaluations: %w: %w", ErrInvalid, err)
		}
		prefix = s.lay.evaluationsNS(ns)
	}
	resp, err := s.get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: evaluations: %w", err)
	}
	out := make([]*lehrpb.CanaryEvaluation, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ev := new(lehrpb.CanaryEvaluation)
		if err := decode(string(kv.Key), kv.Value, ev); err != nil {
			s.log.Error("store: skipping a canary evaluation", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, ev)
	}
	return out, nil
}
