package store

// Policy experiments' history: the counts the leader of the rollout
// strategist samples of each active experiment (control/previewhist), one
// record per experiment,
//
//	experimenthist/<domain>/<name>/<experiment id>  lehrpb.PolicyExperimentHistoryRecord
//
// Every byte of it — key and value — is charged to the experiment's
// domain (usage/<domain>, stored_bytes), in the write's own transaction,
// and credited back when the record goes. It is charged, not held to the
// domain's quota: it is bounded (previewhist.MaxBytes per experiment, at
// most five experiments per policy), and refusing it would only lose the
// record of an experiment the domain already runs. What a write adds is
// admitted against the store's space as a version's content is
// (space.go): above the high-water mark a domain beyond its fair share
// loses its samples, above the hard mark everyone does.
//
// A record goes when its experiment does, by PruneExperimentHistories,
// which the sampler runs on every pass: an experiment is committed or
// deleted by transactions that know nothing of its history (a commit's,
// a policy's or a namespace's deletion), so the history follows within
// a pass. Until then a history whose experiment is gone, or was created
// again under its id (experiment_revision differs), is nobody's:
// ExperimentHistory answers it as empty.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// StoredHistory is an experiment's history record as read, with what
// it takes in the store.
type StoredHistory struct {
	Record *lehrpb.PolicyExperimentHistoryRecord
	// ModRevision of the record; 0 when none is stored.
	ModRevision int64
	// Bytes is what the record takes (key and value): what its domain is
	// charged for it.
	Bytes int64
}

// NamedExperiment is an experiment and the policy namespace it is of.
type NamedExperiment struct {
	Namespace string
	*StoredExperiment
}

// AllExperiments reads every experiment of every policy, in key order
// (namespace, then id). A policy has at most a handful, so this is
// bounded by the policies that run experiments, not the catalog.
func (s *Store) AllExperiments(ctx context.Context) ([]NamedExperiment, error) {
	prefix := s.lay.experimentsPrefix()
	resp, err := s.get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list experiments: %w", err)
	}
	out := make([]NamedExperiment, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rest := string(kv.Key[len(prefix):])
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return nil, fmt.Errorf("store: list experiments: %w: key %q", ErrCorrupt, kv.Key)
		}
		e := new(lehrpb.PolicyExperiment)
		if err := decode(string(kv.Key), kv.Value, e); err != nil {
			return nil, err
		}
		out = append(out, NamedExperiment{Namespace: rest[:i], StoredExperiment: &StoredExperiment{
			PolicyExperiment: e, ID: rest[i+1:], ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision}})
	}
	return out, nil
}

// ExperimentHistory reads the history of experiment id of ns; an empty
// record (ModRevision 0) when none is stored.
func (s *Store) ExperimentHistory(ctx context.Context, ns, id string) (StoredHistory, error) {
	key := s.lay.experimentHist(ns, id)
	resp, err := s.get(ctx, key)
	if err != nil {
		return StoredHistory{}, fmt.Errorf("store: read the history of experiment %s/%s: %w", ns, id, err)
	}
	h := StoredHistory{Record: new(lehrpb.PolicyExperimentHistoryRecord)}
	if len(resp.Kvs) == 0 {
		return h, nil
	}
	if err := decode(key, resp.Kvs[0].Value, h.Record); err != nil {
		return StoredHistory{}, err
	}
	h.ModRevision, h.Bytes = resp.Kvs[0].ModRevision, putSize(key, resp.Kvs[0].Value)
	return h, nil
}

// PutExperimentHistory replaces the history of experiment id of ns,
// read as old, with rec, and charges ns's domain the difference in
// bytes, in one transaction that also requires g to hold (ErrNotLeader
// if not; the zero Guard guards nothing), the experiment's record to be
// the one created at rec.experiment_revision (*NotFoundError if it is
// gone or another) and the history to be still as old was read
// (ErrConflict). It returns the history as stored.
func (s *Store) PutExperimentHistory(ctx context.Context, g Guard, ns, id string, rec *lehrpb.PolicyExperimentHistoryRecord, old StoredHistory) (StoredHistory, error) {
	domain, _, ok := strings.Cut(ns, "/")
	if !ok {
		return StoredHistory{}, fmt.Errorf("store: put the history of experiment %s/%s: %w", ns, id, invalidf("not a namespace"))
	}
	key, ekey, ukey := s.lay.experimentHist(ns, id), s.lay.experiment(ns, id), s.lay.usage(domain)
	b, err := encode(rec)
	if err != nil {
		return StoredHistory{}, fmt.Errorf("store: put the history of experiment %s/%s: %w", ns, id, err)
	}
	size := putSize(key, b)
	var out StoredHistory
	err = optimistic(ctx, "put the history of experiment "+ns+"/"+id, func(attempt int) (bool, error) {
		resp, err := s.get(ctx, ukey)
		if err != nil {
			return false, err
		}
		u, err := decodeUsage(resp)
		if err != nil {
			return false, err
		}
		// What the record grows by is new content, admitted as a
		// version's is (space.go): refused above the high-water mark
		// from a domain beyond its fair share, and from everyone above
		// the hard mark.
		if grow := size - old.Bytes; attempt == 0 && grow > 0 {
			if err := s.admitSpace(grow, false, u.rec.GetStoredBytes()); err != nil {
				return false, err
			}
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(ekey), "=", rec.GetExperimentRevision()),
			clientv3.Compare(clientv3.ModRevision(key), "=", old.ModRevision),
			u.guard(ukey),
		}
		if g.Key != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
		}
		next := proto.CloneOf(u.rec)
		next.StoredBytes = max(0, next.GetStoredBytes()+size-old.Bytes)
		ub, err := encode(next)
		if err != nil {
			return false, err
		}
		ops := []clientv3.Op{clientv3.OpPut(key, string(b)), clientv3.OpPut(ukey, string(ub))}
		tr, err := s.txn(ctx, cmps, ops, []clientv3.Op{
			clientv3.OpGet(ekey, clientv3.WithKeysOnly()), clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(ukey, clientv3.WithKeysOnly()),
		})
		if err != nil {
			return false, err
		}
		if tr.Succeeded {
			out = StoredHistory{Record: rec, ModRevision: tr.Header.Revision, Bytes: size}
			if s.opts.OnDomainUsage != nil {
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
		if e := tr.Responses[0].GetResponseRange().GetKvs(); len(e) == 0 || e[0].CreateRevision != rec.GetExperimentRevision() {
			return false, &NotFoundError{What: "experiment", Name: ns + "/" + id}
		}
		if h := tr.Responses[1].GetResponseRange().GetKvs(); (len(h) == 0 && old.ModRevision != 0) || (len(h) > 0 && h[0].ModRevision != old.ModRevision) {
			return false, fmt.Errorf("store: the history of experiment %s/%s changed concurrently: %w", ns, id, ErrConflict)
		}
		return false, nil // only the usage moved: charge its new sum
	})
	if err != nil {
		return StoredHistory{}, fmt.Errorf("store: put the history of experiment %s/%s: %w", ns, id, err)
	}
	return out, nil
}

// PruneExperimentHistories deletes every history whose experiment is
// gone (committed, deleted, or deleted with its policy, namespace or
// domain) and credits its bytes back to its domain, each in a
// transaction that requires g to hold (ErrNotLeader) and the experiment
// to be still gone. It returns how many it deleted.
func (s *Store) PruneExperimentHistories(ctx context.Context, g Guard) (int, error) {
	hp, ep := s.lay.experimentHistPrefix(), s.lay.experimentsPrefix()
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(hp, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(ep, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	if err != nil {
		return 0, fmt.Errorf("store: prune experiment histories: %w", err)
	}
	live := make(map[string]bool, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		live[string(kv.Key[len(ep):])] = true
	}
	n := 0
	var errs []error
	for _, kv := range rs[0].Kvs {
		rest := string(kv.Key[len(hp):])
		if live[rest] {
			continue
		}
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			continue
		}
		switch err := s.deleteHistory(ctx, g, rest[:i], rest[i+1:]); {
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

// deleteHistory deletes the history of experiment id of ns if the
// experiment is gone, crediting its domain (if its usage record is
// still there: a deleted domain's went with it).
func (s *Store) deleteHistory(ctx context.Context, g Guard, ns, id string) error {
	domain, _, _ := strings.Cut(ns, "/")
	key, ekey, ukey := s.lay.experimentHist(ns, id), s.lay.experiment(ns, id), s.lay.usage(domain)
	return optimistic(ctx, "delete the history of experiment "+ns+"/"+id, func(int) (bool, error) {
		rs, _, err := s.readAt(ctx, clientv3.OpGet(key), clientv3.OpGet(ukey))
		if err != nil {
			return false, err
		}
		if len(rs[0].Kvs) == 0 {
			return true, nil // gone already
		}
		h := rs[0].Kvs[0]
		u, err := decodeUsage(rs[1])
		if err != nil {
			return false, err
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(ekey), "=", 0),
			clientv3.Compare(clientv3.ModRevision(key), "=", h.ModRevision),
			u.guard(ukey),
		}
		if g.Key != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev))
		}
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		var next *lehrpb.DomainUsageRecord
		if u.mod != 0 {
			next = proto.CloneOf(u.rec)
			next.StoredBytes = max(0, next.GetStoredBytes()-putSize(key, h.Value))
			ub, err := encode(next)
			if err != nil {
				return false, err
			}
			ops = append(ops, clientv3.OpPut(ukey, string(ub)))
		}
		tr, err := s.txn(ctx, cmps, ops, []clientv3.Op{clientv3.OpGet(ekey, clientv3.WithKeysOnly())})
		if err != nil {
			return false, err
		}
		if tr.Succeeded {
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
		if len(tr.Responses[0].GetResponseRange().GetKvs()) > 0 {
			return true, nil // created again meanwhile: its next sample replaces the history
		}
		return false, nil // the history or the usage moved: read again
	})
}
