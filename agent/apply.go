package agent

import (
	"context"
	"errors"
	"fmt"

	"lehr.dev/lehr/agent/cache"
	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
)

// handler is the agent as upstream.Handler.
type handler Agent

var _ upstream.Handler = (*handler)(nil)

// Cached lists every namespace in the cache with its version and checksum.
func (h *handler) Cached() []*lehrpb.CachedNamespace {
	a := (*Agent)(h)
	var out []*lehrpb.CachedNamespace
	for _, ns := range a.heldList() {
		st := a.get(ns)
		if st.version > 0 {
			out = append(out, &lehrpb.CachedNamespace{Namespace: ns, Version: st.version, Checksum: st.checksum})
		}
	}
	return out
}

// Held returns what the cache holds of ns.
func (h *handler) Held(ns string) (uint64, string) {
	st := (*Agent)(h).get(ns)
	return st.version, st.checksum
}

// Apply applies one update: to the cache in one verified transaction, then
// to the file if the namespace is wanted.
func (h *handler) Apply(ctx context.Context, u *lehrpb.Update) upstream.Result {
	a := (*Agent)(h)
	ns := u.GetNamespace()
	unlock := a.lock(ns)
	defer unlock()
	held := a.get(ns)
	res := upstream.Result{Version: held.version, Checksum: held.checksum}
	if u.GetVersion() <= held.version {
		res.Outcome = upstream.Stale
		return res
	}
	if !u.GetSnapshot() {
		switch {
		case u.GetBaseVersion() > held.version:
			res.Outcome = upstream.Gap
			return res
		case u.GetBaseVersion() != held.version || u.GetBaseChecksum() != held.checksum:
			res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH
			res.Err = fmt.Errorf("patch %s@%d needs base %d (%s), agent holds %d (%s)",
				ns, u.GetVersion(), u.GetBaseVersion(), u.GetBaseChecksum(), held.version, held.checksum)
			a.met.applyErrors.Inc()
			return res
		}
	}
	if err := ctx.Err(); err != nil {
		res.Outcome, res.Err = upstream.Failed, err
		return res
	}
	meta := cache.Meta{Version: u.GetVersion(), Checksum: u.GetChecksum(), Kind: u.GetKind(), Info: u.GetInfo()}
	cu, err := cacheUpdate(u)
	if err != nil {
		a.met.applyErrors.Inc()
		res.Outcome, res.Err = upstream.Failed, err
		return res
	}
	snap, err := a.cache.Apply(ns, meta, cu)
	if errors.Is(err, cache.ErrStale) {
		res.Outcome = upstream.Stale
		return res
	}
	if err != nil {
		a.met.applyErrors.Inc()
		a.update(ns, func(st *nsState) { st.applyErrors++ })
		res.Err = err
		switch {
		case errors.Is(err, cache.ErrCorrupt):
			a.dropCorruptLocked(ns, err)
			res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT
			res.Version, res.Checksum = 0, ""
		case errors.Is(err, cache.ErrBaseMismatch), errors.Is(err, cache.ErrNotFound):
			res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH
		case errors.Is(err, cache.ErrChecksumMismatch):
			res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH
		case errors.Is(err, content.ErrMissingKey):
			res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_PATCH_CONFLICT
		default:
			res.Outcome = upstream.Failed
		}
		a.log.Warn("update refused", "namespace", ns, "version", u.GetVersion(),
			"snapshot", u.GetSnapshot(), "outcome", res.Outcome, "err", err)
		return res
	}
	a.update(ns, func(st *nsState) {
		st.version, st.checksum, st.kind, st.info = meta.Version, meta.Checksum, meta.Kind, meta.Info
	})
	a.met.applied(u.GetSnapshot())
	a.met.setVersion(ns, meta.Version)
	a.log.Debug("update applied", "namespace", ns, "version", meta.Version, "snapshot", u.GetSnapshot())
	if a.leases.Wanted(ns) {
		a.writeFileLocked(ns, meta, snap)
	}
	res.Outcome, res.Version, res.Checksum = upstream.Applied, meta.Version, meta.Checksum
	return res
}

// cacheUpdate converts a wire update (already validated by the wire
// decoder) to the cache's form.
func cacheUpdate(u *lehrpb.Update) (cache.Update, error) {
	if !u.GetSnapshot() {
		return cache.PatchUpdate(u.GetBaseVersion(), content.Patch{Set: content.FromProto(u.GetSet()), Delete: u.GetDelete()}), nil
	}
	s, err := content.New(content.FromProto(u.GetSet()))
	if err != nil {
		return cache.Update{}, fmt.Errorf("snapshot %s@%d: %w", u.GetNamespace(), u.GetVersion(), err)
	}
	return cache.SnapshotUpdate(s), nil
}

// writeFileLocked writes the namespace's file from verified content. A
// failure is retried by the maintenance loop. The caller holds the lock.
func (a *Agent) writeFileLocked(ns string, meta cache.Meta, snap content.Snapshot) {
	f := nsfile.File{Namespace: ns, Version: meta.Version, Kind: meta.Kind, Checksum: meta.Checksum, Content: snap}
	if info := meta.Info; info != nil {
		f.Author, f.Message = info.GetAuthor(), info.GetMessage()
		if ts := info.GetCreateTime(); ts != nil {
			f.CreateTime = ts.AsTime()
		}
	}
	if err := a.writer.Write(a.filesDir, f); err != nil {
		a.met.applyErrors.Inc()
		a.log.Error("cannot write namespace file; will retry", "namespace", ns, "version", meta.Version, "err", err)
		a.update(ns, func(st *nsState) { st.fileStale = true; st.applyErrors++ })
		return
	}
	a.update(ns, func(st *nsState) { st.fileVersion, st.fileStale = meta.Version, false })
}

// dropCorrupt drops a namespace whose cached copy failed verification and
// asks for a fresh snapshot. The file keeps the last verified version.
func (a *Agent) dropCorrupt(ns string, cause error) {
	unlock := a.lock(ns)
	defer unlock()
	// Check again under the lock: an update may have replaced the copy.
	if _, _, err := a.cache.Get(ns); !errors.Is(err, cache.ErrCorrupt) {
		return
	}
	a.dropCorruptLocked(ns, cause)
}

func (a *Agent) dropCorruptLocked(ns string, cause error) {
	a.log.Error("cached namespace is corrupt; dropping it and fetching a fresh snapshot", "namespace", ns, "err", cause)
	a.met.corruptions.Inc()
	if err := a.cache.Drop(ns); err != nil && !errors.Is(err, cache.ErrNotFound) {
		a.log.Error("cannot drop corrupt namespace", "namespace", ns, "err", err)
	}
	a.update(ns, func(st *nsState) { st.version, st.checksum, st.info = 0, "", nil })
	a.met.setVersion(ns, 0)
	a.up.Resync(ns, lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT, cause.Error())
}

// Report summarises the subscribed namespaces for the distributor.
func (h *handler) Report() *lehrpb.Report {
	a := (*Agent)(h)
	r := &lehrpb.Report{}
	leaseCount := map[string]int{}
	for _, n := range a.leases.Namespaces() {
		leaseCount[n.Name] = n.Leases
	}
	for _, ns := range a.up.Subscriptions() {
		st := a.get(ns)
		nr := &lehrpb.NamespaceReport{
			Namespace:      ns,
			Version:        st.version,
			Clients:        uint32(leaseCount[ns]),
			ApplyErrors:    st.applyErrors,
			CallbackErrors: st.callbackErrs,
		}
		if st.version > 0 {
			nr.Checksum = st.checksum
		}
		if st.reportVersion == st.version {
			nr.ClientsApplied = uint32(len(st.applied))
		}
		r.Namespaces = append(r.Namespaces, nr)
	}
	return r
}
