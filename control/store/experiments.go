package store

// Policy experiments (AIP-236, docs/preview.md): one record per experiment
// under experiments/<ns>/<id>. Every change is a transaction guarded by the
// record's mod revision, which is what the service's etag checks and the
// atomic commit (Commit.Experiment) rest on.

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// StoredExperiment is an experiment and the etcd mod revision of its
// record, which guards a later change.
type StoredExperiment struct {
	*lehrpb.PolicyExperiment
	ID          string
	ModRevision int64
	// CreateRevision is the etcd create revision of its record, which
	// tells it from an experiment deleted and created again under its id;
	// 0 where not read (PutExperiment's answer).
	CreateRevision int64
}

// ExperimentCapError refuses an experiment beyond a policy's cap. It wraps
// ErrInvalid: nothing was changed.
type ExperimentCapError struct {
	Namespace string
	Cap       int
}

func (e *ExperimentCapError) Error() string {
	return fmt.Sprintf("store: %s has %d experiments already, the most a policy may have", e.Namespace, e.Cap)
}

// Unwrap returns ErrInvalid.
func (e *ExperimentCapError) Unwrap() error { return ErrInvalid }

// CreateExperiment stores a new experiment id of namespace ns, unless one
// with that id exists (ErrAlreadyExists), the namespace does not
// (*NotFoundError), or ns has maxPerPolicy experiments already
// (*ExperimentCapError), or the policy is deleted (*NotFoundError).
// Concurrent creates cannot exceed the cap, nor outlive a concurrent
// DeletePolicy commit: the transaction fails if any experiment of ns or
// its head changed since they were read, and is retried.
func (s *Store) CreateExperiment(ctx context.Context, ns, id string, e *lehrpb.PolicyExperiment, maxPerPolicy int) (*StoredExperiment, error) {
	b, err := encode(e)
	if err != nil {
		return nil, err
	}
	key, prefix := s.lay.experiment(ns, id), s.lay.experimentsOf(ns)
	var created *StoredExperiment
	err = optimistic(ctx, "create experiment "+ns+"/"+id, func(int) (bool, error) {
		hkey := s.lay.nsmeta(ns)
		rs, rev, err := s.readAt(ctx,
			clientv3.OpGet(hkey),
			clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		if err != nil {
			return false, fmt.Errorf("store: create experiment %s/%s: %w", ns, id, err)
		}
		if len(rs[0].Kvs) == 0 {
			return false, &NotFoundError{What: "namespace", Name: ns}
		}
		head := new(lehrpb.Namespace)
		if err := decode(hkey, rs[0].Kvs[0].Value, head); err != nil {
			return false, err
		}
		if head.GetDeleteTime() != nil {
			return false, &NotFoundError{What: "policy", Name: ns}
		}
		for _, kv := range rs[1].Kvs {
			if string(kv.Key) == key {
				return false, fmt.Errorf("store: experiment %s/%s: %w", ns, id, ErrAlreadyExists)
			}
		}
		if len(rs[1].Kvs) >= maxPerPolicy {
			return false, &ExperimentCapError{Namespace: ns, Cap: maxPerPolicy}
		}
		resp, err := s.txn(ctx, []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(hkey), "=", rs[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(prefix), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		}, []clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
		if err != nil {
			return false, fmt.Errorf("store: create experiment %s/%s: %w", ns, id, err)
		}
		if resp.Succeeded {
			created = &StoredExperiment{PolicyExperiment: e, ID: id, ModRevision: resp.Header.Revision, CreateRevision: resp.Header.Revision}
		}
		return resp.Succeeded, nil
	})
	if err != nil {
		return nil, err
	}
	return created, nil
}

// Experiment reads one experiment; *NotFoundError when there is none.
func (s *Store) Experiment(ctx context.Context, ns, id string) (*StoredExperiment, error) {
	key := s.lay.experiment(ns, id)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: read experiment %s/%s: %w", ns, id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &NotFoundError{What: "experiment", Name: ns + "/" + id}
	}
	e := new(lehrpb.PolicyExperiment)
	if err := decode(key, resp.Kvs[0].Value, e); err != nil {
		return nil, err
	}
	return &StoredExperiment{PolicyExperiment: e, ID: id, ModRevision: resp.Kvs[0].ModRevision, CreateRevision: resp.Kvs[0].CreateRevision}, nil
}

// PreviewState is what a policy's preview namespace is built from, read at
// one revision: every experiment of the policy, by id, and the preview
// namespace's latest version then (0: none yet).
type PreviewState struct {
	Experiments   []*StoredExperiment
	PreviewLatest uint64
}

// Experiments reads every experiment of ns, sorted by id, and the latest
// version of the namespace preview (the policy's preview namespace), at
// one revision.
func (s *Store) Experiments(ctx context.Context, ns, preview string) (PreviewState, error) {
	prefix := s.lay.experimentsOf(ns)
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(prefix, clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.nsmeta(preview)))
	if err != nil {
		return PreviewState{}, fmt.Errorf("store: list experiments of %s: %w", ns, err)
	}
	var st PreviewState
	for _, kv := range rs[0].Kvs {
		e := new(lehrpb.PolicyExperiment)
		if err := decode(string(kv.Key), kv.Value, e); err != nil {
			return PreviewState{}, err
		}
		st.Experiments = append(st.Experiments, &StoredExperiment{
			PolicyExperiment: e, ID: string(kv.Key[len(prefix):]), ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision,
		})
	}
	if len(rs[1].Kvs) > 0 {
		head := new(lehrpb.Namespace)
		if err := decode(preview, rs[1].Kvs[0].Value, head); err != nil {
			return PreviewState{}, err
		}
		st.PreviewLatest = head.GetLatestVersion()
	}
	return st, nil
}

// PutExperiment replaces experiment id of ns if its record is still at
// modRevision; ErrConflict if it changed, *NotFoundError if it is gone.
func (s *Store) PutExperiment(ctx context.Context, ns, id string, e *lehrpb.PolicyExperiment, modRevision int64) (*StoredExperiment, error) {
	b, err := encode(e)
	if err != nil {
		return nil, err
	}
	key := s.lay.experiment(ns, id)
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)},
		[]clientv3.Op{clientv3.OpPut(key, string(b))}, []clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())})
	if err != nil {
		return nil, fmt.Errorf("store: update experiment %s/%s: %w", ns, id, err)
	}
	if !resp.Succeeded {
		return nil, s.experimentGuardError(ns, id, resp)
	}
	return &StoredExperiment{PolicyExperiment: e, ID: id, ModRevision: resp.Header.Revision}, nil
}

// DeleteExperiment deletes experiment id of ns if its record is still at
// modRevision; ErrConflict if it changed, *NotFoundError if it is gone.
func (s *Store) DeleteExperiment(ctx context.Context, ns, id string, modRevision int64) error {
	key := s.lay.experiment(ns, id)
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)},
		[]clientv3.Op{clientv3.OpDelete(key)}, []clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())})
	if err != nil {
		return fmt.Errorf("store: delete experiment %s/%s: %w", ns, id, err)
	}
	if !resp.Succeeded {
		return s.experimentGuardError(ns, id, resp)
	}
	return nil
}

// experimentGuardError explains a failed guard: the record is gone, or it
// changed.
func (s *Store) experimentGuardError(ns, id string, resp *clientv3.TxnResponse) error {
	if resp.Responses[0].GetResponseRange().GetCount() == 0 {
		return &NotFoundError{What: "experiment", Name: ns + "/" + id}
	}
	return fmt.Errorf("store: experiment %s/%s changed concurrently: %w", ns, id, ErrConflict)
}
