package store

// Canary history: what control learned of a namespace's checks from its
// kept evaluations (docs/canary.md, "Learning from history"), one record
// per namespace,
//
//	canaryhist/<domain>/<name>  lehrpb.CanaryHistory
//
// Every byte of it — key and value — is charged to the namespace's domain
// (usage/<domain>, stored_bytes), in the write's own transaction, and
// credited back when the record shrinks or goes. It is charged, not held
// to the domain's quota, as an experiment's history is
// (experimenthist.go): it is bounded (evaluation.MaxHistoryBytes), and
// refusing it would only make the judge forget. What a write adds is
// admitted against the store's space as a version's content is
// (space.go).
//
// A record goes with ForgetCanaryHistory, or when its namespace is gone,
// by PruneCanaryHistories (the strategist runs it now and then): a
// namespace's deletion is a transaction that knows nothing of it.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

func (l layout) canaryHistPrefix() string         { return l.prefix + "canaryhist/" }
func (l layout) canaryHist(ns string) string      { return l.canaryHistPrefix() + ns }
func (l layout) nsFromCanaryHist(k string) string { return strings.TrimPrefix(k, l.canaryHistPrefix()) }

// StoredCanaryHistory is a namespace's canary history as read, with what
// it takes in the store.
type StoredCanaryHistory struct {
	Record *lehrpb.CanaryHistory
	// ModRevision of the record; 0 when none is stored.
	ModRevision int64
	// Bytes is what the record takes (key and value): what its domain is
	// charged for it.
	Bytes int64
}

// CanaryHistory reads the canary history of ns; an empty record
// (ModRevision 0) when none is stored.
func (s *Store) CanaryHistory(ctx context.Context, ns string) (StoredCanaryHistory, error) {
	key := s.lay.canaryHist(ns)
	resp, err := s.get(ctx, key)
	if err != nil {
		return StoredCanaryHistory{}, fmt.Errorf("store: read the canary history of %s: %w", ns, err)
	}
	h := StoredCanaryHistory{Record: &lehrpb.CanaryHistory{Namespace: ns}}
	if len(resp.Kvs) == 0 {
		return h, nil
	}
	if err := decode(key, resp.Kvs[0].Value, h.Record); err != nil {
		return StoredCanaryHistory{}, err
	}
	h.ModRevision, h.Bytes = resp.Kvs[0].ModRevision, putSize(key, resp.Kvs[0].Value)
	h.Record.StoredBytes = h.Bytes
	return h, nil
}

// PutCanaryHistory replaces the canary history of ns, read as old, with
// rec — nil deletes it — and charges (or credits) ns's domain the
// difference in bytes, in one transaction that also requires g to hold
// (ErrNotLeader if not; the zero Guard guards nothing), the namespace to
// exist when rec is written (*NotFoundError if not) and the history to
// be still as old was read (ErrConflict). It returns the history as
// stored.
func (s *Store) PutCanaryHistory(ctx context.Context, g Guard, ns string, rec *lehrpb.CanaryHistory, old StoredCanaryHistory) (StoredCanaryHistory, error) {
	domain, _, ok := strings.Cut(ns, "/")
	if !ok {
		return StoredCanaryHistory{}, fmt.Errorf("store: put the canary history of %s: %w", ns, invalidf("not a namespace"))
	}
	key, hkey, ukey := s.lay.canaryHist(ns), s.lay.nsmeta(ns), s.lay.usage(domain)
	var b []byte
	var size int64
	if rec != nil {
		rec = proto.CloneOf(rec)
		rec.Namespace, rec.StoredBytes = ns, 0
		var err error
		if b, err = encode(rec); err != nil {
			return StoredCanaryHistory{}, fmt.Errorf("store: put the canary history of %s: %w", ns, err)
		}
		size = putSize(key, b)
	}
	var out StoredCanaryHistory
	err := optimistic(ctx, "put the canary history of "+ns, func(attempt int) (bool, error) {
		resp, err := s.get(ctx, ukey)
		if err != nil {
			return false, err
		}
		u, err := decodeUsage(resp)
		if err != nil {
			return false, err
		}
		if grow := size - old.Bytes; attempt == 0 && grow > 0 {
			if err := s.admitSpace(grow, false, u.rec.GetStoredBytes()); err != nil {
				return false, err
			}
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", old.ModRevision)}
		if rec != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(hkey), ">", 0))
		}
		if g.Key != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
		}
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		if rec != nil {
			ops = []clientv3.Op{clientv3.OpPut(key, string(b))}
		}
		var next *lehrpb.DomainUsageRecord
		if u.mod != 0 || rec != nil {
			cmps = append(cmps, u.guard(ukey))
			next = proto.CloneOf(u.rec)
			next.StoredBytes = max(0, next.GetStoredBytes()+size-old.Bytes)
			ub, err := encode(next)
			if err != nil {
				return false, err
			}
			ops = append(ops, clientv3.OpPut(ukey, string(ub)))
		}
		tr, err := s.txn(ctx, cmps, ops, []clientv3.Op{
			clientv3.OpGet(hkey, clientv3.WithKeysOnly()), clientv3.OpGet(key, clientv3.WithKeysOnly()),
		})
		if err != nil {
			return false, err
		}
		if tr.Succeeded {
			out = StoredCanaryHistory{Record: rec, ModRevision: tr.Header.Revision, Bytes: size}
			if rec == nil {
				out = StoredCanaryHistory{Record: &lehrpb.CanaryHistory{Namespace: ns}}
			} else {
				out.Record.StoredBytes = size
			}
			if next != nil && s.opts.OnDomainUsage != nil {
				s.opts.OnDomainUsage(domain, next.GetStoredBytes())
			}
			return true, nil
		}
		if g.Key != "" {
			lr, err := s.get(ctx, g.Key, clientv3.WithKeysOnly())
			if err != nil {
				return false, err
			}
			if len(lr.Kvs) == 0 || lr.Kvs[0].CreateRevision != g.Rev {
				return false, ErrNotLeader
			}
		}
		if rec != nil && len(tr.Responses[0].GetResponseRange().GetKvs()) == 0 {
			return false, &NotFoundError{What: "namespace", Name: ns}
		}
		if h := tr.Responses[1].GetResponseRange().GetKvs(); (len(h) == 0 && old.ModRevision != 0) || (len(h) > 0 && h[0].ModRevision != old.ModRevision) {
			return false, fmt.Errorf("store: the canary history of %s changed concurrently: %w", ns, ErrConflict)
		}
		return false, nil // only the usage moved: charge its new sum
	})
	if err != nil {
		return StoredCanaryHistory{}, fmt.Errorf("store: put the canary history of %s: %w", ns, err)
	}
	return out, nil
}

// PruneCanaryHistories deletes the canary history of every namespace
// that is gone, crediting its bytes back to its domain (if the domain's
// usage record is still there: a deleted domain's went with it), each
// in a transaction that requires g to hold (ErrNotLeader). It returns
// how many it deleted.
func (s *Store) PruneCanaryHistories(ctx context.Context, g Guard) (int, error) {
	hp, np := s.lay.canaryHistPrefix(), s.lay.nsmetaPrefix()
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(hp, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(np, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	if err != nil {
		return 0, fmt.Errorf("store: prune canary histories: %w", err)
	}
	live := make(map[string]bool, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		live[s.lay.nameFromNsmeta(string(kv.Key))] = true
	}
	n := 0
	var errs []error
	for _, kv := range rs[0].Kvs {
		ns := s.lay.nsFromCanaryHist(string(kv.Key))
		if live[ns] {
			continue
		}
		old, err := s.CanaryHistory(ctx, ns)
		if err == nil && old.ModRevision != 0 {
			_, err = s.PutCanaryHistory(ctx, g, ns, nil, old)
		}
		switch {
		case errors.Is(err, ErrNotLeader):
			return n, err
		case err != nil:
			errs = append(errs, err)
		default:
			n++
		}
	}
	return n, errors.Join(errs...)
}
