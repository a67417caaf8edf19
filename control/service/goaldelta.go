package service

import (
	"context"
	"sync"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// maxGoalDelta bounds the bytes (keys, values, deleted keys) of a delta
// sent with a goal event: a larger change is fetched by the distributors
// that need it, so that one large change does not hold up a zone's other
// goal events on the stream.
const maxGoalDelta = 32 << 10

// goalDeltaMemo is how many computed deltas goalDeltas keeps: a publish
// makes one goal event per zone, each sent to every distributor of the
// zone, all with the same delta.
const goalDeltaMemo = 1024

// goalDeltas computes the deltas sent with goal events (WatchGoals with
// deltas set), each once for all the streams that send it.
type goalDeltas struct {
	mu    sync.Mutex
	m     map[goalDeltaKey]*lehrpb.FetchDeltaResponse // nil: none for this change
	order []goalDeltaKey                              // oldest first, at most goalDeltaMemo
}

type goalDeltaKey struct {
	ns       string
	from, to content.Ref
}

// forGoal returns, for a goal event that replaced prev, the change from
// prev's version to the version the new goal names that prev did not (its
// version, else its candidate's), as FetchDelta answers it but without the
// kind (a namespace's kind never changes), when it is at most maxGoalDelta
// bytes and both versions' content is in control's memory
// (store.CachedContent: no blob is read on the watch's path). Otherwise
// nil: the distributors that need the version fetch it.
func (d *goalDeltas) forGoal(ctx context.Context, st *store.Store, prev *lehrpb.GoalState, ev *lehrpb.GoalEvent) *lehrpb.FetchDeltaResponse {
	g := ev.GetGoal()
	if ev.GetType() != lehrpb.GoalEvent_TYPE_PUT || prev.GetVersion() == 0 {
		return nil
	}
	to := content.Ref{Seq: g.GetVersion(), Checksum: g.GetChecksum()}
	if to.Seq == prev.GetVersion() || to.Seq == prev.GetCandidate().GetVersion() {
		to = content.Ref{Seq: g.GetCandidate().GetVersion(), Checksum: g.GetCandidate().GetChecksum()}
		if to.Seq == 0 || to.Seq == prev.GetVersion() || to.Seq == prev.GetCandidate().GetVersion() {
			return nil // it names no version the replaced goal did not
		}
	}
	k := goalDeltaKey{ns: g.GetNamespace(), from: content.Ref{Seq: prev.GetVersion(), Checksum: prev.GetChecksum()}, to: to}
	d.mu.Lock()
	r, ok := d.m[k]
	d.mu.Unlock()
	if ok {
		return r
	}
	r, ok = computeGoalDelta(ctx, st, k)
	if !ok {
		return nil // not remembered: the next stream may find the content
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[goalDeltaKey]*lehrpb.FetchDeltaResponse{}
	}
	if _, dup := d.m[k]; !dup {
		if len(d.order) == goalDeltaMemo {
			delete(d.m, d.order[0])
			d.order = d.order[1:]
		}
		d.order = append(d.order, k)
	}
	d.m[k] = r
	return r
}

// computeGoalDelta returns the delta k names, nil when it is larger than
// maxGoalDelta; ok is false when the content is not at hand.
func computeGoalDelta(ctx context.Context, st *store.Store, k goalDeltaKey) (r *lehrpb.FetchDeltaResponse, ok bool) {
	fromInfo, from, ok := st.CachedContent(ctx, k.ns, k.from)
	if !ok {
		return nil, false
	}
	toInfo, to, ok := st.CachedContent(ctx, k.ns, k.to)
	if !ok {
		return nil, false
	}
	p := content.Diff(from, to)
	if p.Size() > maxGoalDelta {
		return nil, true
	}
	return &lehrpb.FetchDeltaResponse{From: fromInfo, To: toInfo, Set: content.ToProto(p.Set), Delete: p.Delete}, true
}
