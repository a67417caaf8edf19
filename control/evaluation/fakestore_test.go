package evaluation_test

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// fakeStore is a fake evaluation.Store in memory: evaluations by id, the
// zone status of zones (none unless set), one canary history per
// namespace with a revision for its compare-and-swap. These tests exercise
// the judge, the metrics source and learning; the real store's
// evaluations and histories have their own tests on etcd (control/store,
// devcluster TestCanaryAnalysis).
type fakeStore struct {
	mu    sync.Mutex
	evs   map[string]*lehrpb.CanaryEvaluation
	zones map[string][]*lehrpb.DistributorStatus
	hist  map[string]store.StoredCanaryHistory
	rev   int64
}

func newFakeStore() *fakeStore {
	return &fakeStore{evs: map[string]*lehrpb.CanaryEvaluation{}, zones: map[string][]*lehrpb.DistributorStatus{},
		hist: map[string]store.StoredCanaryHistory{}}
}

// add stores ev as it is.
func (f *fakeStore) add(ev *lehrpb.CanaryEvaluation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evs[ev.GetId()] = proto.CloneOf(ev)
}

func (f *fakeStore) ZoneStatus(_ context.Context, zone string) ([]*lehrpb.DistributorStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.zones[zone], nil
}

func (f *fakeStore) CreateEvaluation(_ context.Context, ev *lehrpb.CanaryEvaluation) (*lehrpb.CanaryEvaluation, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.evs[ev.GetId()]; old != nil {
		return proto.CloneOf(old), false, nil
	}
	f.evs[ev.GetId()] = proto.CloneOf(ev)
	return proto.CloneOf(ev), true, nil
}

func (f *fakeStore) PutEvaluation(_ context.Context, _ store.Guard, ev *lehrpb.CanaryEvaluation) error {
	f.add(ev)
	return nil
}

func (f *fakeStore) Evaluation(_ context.Context, id string) (*lehrpb.CanaryEvaluation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.CloneOf(f.evs[id]), nil
}

// Evaluations returns ns's evaluations ("": every one), by id.
func (f *fakeStore) Evaluations(_ context.Context, ns string) ([]*lehrpb.CanaryEvaluation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*lehrpb.CanaryEvaluation
	for _, ev := range f.evs {
		if ns == "" || ev.GetNamespace() == ns {
			out = append(out, proto.CloneOf(ev))
		}
	}
	slices.SortFunc(out, func(a, b *lehrpb.CanaryEvaluation) int { return cmp.Compare(a.GetId(), b.GetId()) })
	return out, nil
}

func (f *fakeStore) CanaryHistory(_ context.Context, ns string) (store.StoredCanaryHistory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.hist[ns]; ok {
		return h, nil
	}
	return store.StoredCanaryHistory{Record: &lehrpb.CanaryHistory{Namespace: ns}}, nil
}

func (f *fakeStore) PutCanaryHistory(_ context.Context, _ store.Guard, ns string, rec *lehrpb.CanaryHistory, old store.StoredCanaryHistory) (store.StoredCanaryHistory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hist[ns].ModRevision != old.ModRevision {
		return store.StoredCanaryHistory{}, store.ErrConflict
	}
	if rec == nil {
		delete(f.hist, ns)
		return store.StoredCanaryHistory{Record: &lehrpb.CanaryHistory{Namespace: ns}}, nil
	}
	f.rev++
	h := store.StoredCanaryHistory{Record: proto.CloneOf(rec), ModRevision: f.rev, Bytes: int64(proto.Size(rec))}
	f.hist[ns] = h
	return h, nil
}

func (f *fakeStore) PruneCanaryHistories(context.Context, store.Guard) (int, error) { return 0, nil }
