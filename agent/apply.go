package agent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/agent/cache"
	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/proto/lehrpb"
)

// handler is the agent as upstream.Handler.
type handler Agent

var _ upstream.Handler = (*handler)(nil)

// Held returns what the cache holds of ns.
func (h *handler) Held(ns string) content.Ref { return (*Agent)(h).get(ns).held }

// Apply applies one update: to the cache, which decides with
// internal/update and verifies the result in one transaction, then to the
// file if the namespace is wanted.
func (h *handler) Apply(ctx context.Context, u *lehrpb.Update) upstream.Result {
	a := (*Agent)(h)
	ns := u.GetNamespace()
	unlock := a.lock(ns)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return upstream.Result{Outcome: upstream.Failed, Held: a.get(ns).held, Err: err}
	}
	v, err := a.cache.Apply(u)
	if err == nil {
		// Crash point of the kill matrix (testenv/chaos): the cache
		// committed, the file not written.
		// gofail: var agentAfterCacheCommit struct{}
		a.update(ns, func(st *nsState) {
			if st.held != v.Ref() {
				st.appliedAt, st.leasesExpired = a.now(), 0
			}
			st.held, st.kind, st.info = v.Ref(), v.Kind, v.Info
		})
		a.met.applied(u.GetSnapshot())
		a.met.setVersion(ns, v.Seq)
		a.sig.store.SetVersion(ns, v.Seq)
		a.log.Debug("update applied", "namespace", ns, "version", v.Seq, "snapshot", u.GetSnapshot())
		if a.leases.Wanted(ns) {
			a.writeFileLocked(v)
		}
		return upstream.Result{Outcome: upstream.Applied, Held: v.Ref()}
	}
	res := upstream.Result{Held: a.get(ns).held, Err: err}
	res.Outcome, res.Reason = upstream.OutcomeOf(err)
	switch {
	case res.Outcome == upstream.Stale, res.Outcome == upstream.Gap:
		res.Err = nil
		return res
	case errors.Is(err, cache.ErrCorrupt):
		a.dropCorruptLocked(ns, err)
		res.Outcome, res.Reason = upstream.Rejected, lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT
		res.Held = content.Ref{}
	}
	a.met.applyErrors.Inc()
	a.update(ns, func(st *nsState) { st.applyErrors++ })
	a.log.Warn("update refused", "namespace", ns, "version", u.GetVersion(),
		"snapshot", u.GetSnapshot(), "outcome", res.Outcome, "err", err)
	return res
}

// writeFileLocked writes the namespace's file from verified content. A
// failure is retried by the maintenance loop. The caller holds the lock.
func (a *Agent) writeFileLocked(v content.Version) {
	// The stat of the file as written, not of whatever is at the path a
	// moment later: a file changed right after it appeared must still be
	// noticed (checkFileLocked).
	fi, err := a.writer.WriteStat(a.filesDir, nsfile.FromVersion(v))
	if err != nil {
		a.met.applyErrors.Inc()
		a.log.Error("cannot write namespace file; will retry", "namespace", v.Namespace, "version", v.Seq, "err", err)
		a.update(v.Namespace, func(st *nsState) { st.fileStale = true; st.applyErrors++ })
		return
	}
	a.update(v.Namespace, func(st *nsState) {
		st.fileVersion, st.fileStale, st.fileSize, st.fileMtime = v.Seq, false, fi.Size(), fi.ModTime()
	})
}

// dropCorrupt drops a namespace whose cached copy failed verification and
// asks for a fresh snapshot. The file keeps the last verified version.
func (a *Agent) dropCorrupt(ns string, cause error) {
	unlock := a.lock(ns)
	defer unlock()
	// Check again under the lock: an update may have replaced the copy.
	if _, err := a.cache.Get(ns); !errors.Is(err, cache.ErrCorrupt) {
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
	a.update(ns, func(st *nsState) { st.held, st.info = content.Ref{}, nil })
	a.met.setVersion(ns, 0)
	a.sig.store.SetVersion(ns, 0)
	a.up.Resync(ns, lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT, cause.Error())
}

// Report summarises the subscribed namespaces for the distributor.
func (h *handler) Report() *lehrpb.Report {
	a := (*Agent)(h)
	r := &lehrpb.Report{}
	if q := a.quarantined.Load(); q != 0 {
		r.CacheQuarantineTime = timestamppb.New(time.Unix(0, q))
	}
	leaseCount := map[string]int{}
	svcs := map[string][]*lehrpb.ServiceConsumers{}
	for _, n := range a.leases.Namespaces() {
		leaseCount[n.Name] = n.Leases
		svcs[n.Name] = services.Top(n.Services)
	}
	for _, ns := range a.up.Subscriptions() {
		st := a.get(ns)
		nr := &lehrpb.NamespaceReport{
			Namespace:      ns,
			Version:        st.held.Seq,
			Clients:        uint32(leaseCount[ns]),
			Services:       svcs[ns],
			ApplyErrors:    st.applyErrors,
			CallbackErrors: st.callbackErrs,
		}
		if st.held.Seq > 0 {
			nr.Checksum = st.held.Checksum
		}
		if st.reportVersion == st.held.Seq {
			nr.ClientsApplied = uint32(len(st.applied))
			nr.ClientsRejected = uint32(len(st.rejected))
		}
		nr.LeasesExpired = st.leasesExpired
		nr.Preview = st.preview // never modified in place (ReportPreview)
		nr.HostChecks = a.hostChecksOf(ns)
		nr.UntrustedUpdates = a.up.Untrusted(ns)
		if !st.appliedAt.IsZero() {
			nr.AppliedTime = timestamppb.New(st.appliedAt)
		}
		r.Namespaces = append(r.Namespaces, nr)
	}
	return r
}
