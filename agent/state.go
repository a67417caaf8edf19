package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lehr.dev/lehr/agent/cache"
	"lehr.dev/lehr/agent/leases"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// nsState is what the agent knows of one namespace it holds or wants.
type nsState struct {
	// held is the version in the cache (zero when nothing is), kind and
	// info its namespace's kind and its metadata.
	held content.Ref
	kind lehrpb.NamespaceKind
	info *lehrpb.VersionInfo

	// fileVersion is the version in the namespace's file (0: none);
	// fileStale says the last write failed and must be retried. fileSize
	// and fileMtime are the file as the agent left it, to notice a file
	// changed or removed by someone else (checkFileLocked).
	fileVersion uint64
	fileStale   bool
	fileSize    int64
	fileMtime   time.Time

	// unwantedSince is when the namespace stopped being wanted (or, for
	// what the cache held at start, when the agent started); zero while it
	// is wanted. After Options.CacheRetention it is evicted.
	unwantedSince time.Time

	// Consumer reports for reportVersion.
	reportVersion uint64
	applied       map[string]bool // lease ids that applied reportVersion
	rejected      map[string]bool // lease ids that rejected it
	applyErrors   uint64          // agent-side apply failures since start
	callbackErrs  uint64          // consumer rejections since start

	// tally sums the policy-preview counts consumers reported since the
	// agent started, by experiment and etag pair, at most maxPreviewPairs;
	// preview is a copy of it for reports, replaced (never changed) as
	// counts come in.
	tally   *preview.Tally
	preview []*lehrpb.HostPreviewCounts

	// appliedAt is when the agent applied version (zero: before it
	// started); leasesExpired counts consumer leases that lapsed since.
	appliedAt     time.Time
	leasesExpired uint32
}

// Locks of the agent, in the order they may be taken (a lock is never
// acquired while holding one that comes after it):
//
//  1. the namespace's lock (lock(ns)): serialises applying an update,
//     reading for repair, and writing or removing the file of one
//     namespace; held across calls into the cache and the file writer;
//  2. inside the cache, cache.closeMu (read) and then its own lock of the
//     namespace, each held only within one cache call;
//  3. nsMu: guards state; held only to read or change it (get, update,
//     heldList…), never across a call out.
//
// The lease table and the upstream client have their own mutexes, which
// they never hold while calling back into the agent. A method named
// …Locked expects its caller to hold the lock the same work would
// otherwise take — here, the namespace's lock (lock(ns)).
//
// lock locks the namespace's lock (internal/keylock: it lives only while
// held or waited for), which serialises applying, reading for repair, and
// file changes of one namespace; calling the returned function unlocks
// it.
func (a *Agent) lock(ns string) func() { return a.locks.Lock(ns) }

// get returns a copy of the state of ns (zero if unknown).
func (a *Agent) get(ns string) nsState {
	a.nsMu.Lock()
	defer a.nsMu.Unlock()
	if st := a.state[ns]; st != nil {
		return *st
	}
	return nsState{}
}

// update changes the state of ns under the state lock.
func (a *Agent) update(ns string, f func(st *nsState)) {
	a.nsMu.Lock()
	defer a.nsMu.Unlock()
	st := a.state[ns]
	if st == nil {
		st = &nsState{}
		a.state[ns] = st
	}
	f(st)
}

// forget removes ns from the state if it holds and wants nothing.
func (a *Agent) forgetIfIdle(ns string) {
	a.nsMu.Lock()
	defer a.nsMu.Unlock()
	if st := a.state[ns]; st != nil && st.held.Seq == 0 && st.fileVersion == 0 && !st.fileStale {
		delete(a.state, ns)
	}
}

// heldList returns every namespace held in the cache, sorted.
func (a *Agent) heldList() []string {
	a.nsMu.Lock()
	defer a.nsMu.Unlock()
	var out []string
	for ns, st := range a.state {
		if st.held.Seq > 0 {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// known returns every namespace in the state, sorted.
func (a *Agent) known() []string {
	a.nsMu.Lock()
	defer a.nsMu.Unlock()
	out := make([]string, 0, len(a.state))
	for ns := range a.state {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// loadState reads what the cache holds.
func (a *Agent) loadState() error {
	list, err := a.cache.List()
	if err != nil {
		return fmt.Errorf("agent: list cache: %w", err)
	}
	now := a.now()
	for _, e := range list {
		a.update(e.Namespace, func(st *nsState) {
			st.held = e.Ref
			st.unwantedSince = now // until a lease or a file wants it
		})
		a.met.setVersion(e.Namespace, e.Ref.Seq)
	}
	return nil
}

// scrub reads every cached namespace once, verifying its checksum, and
// drops the corrupt ones so the distributor sends them afresh. It runs
// before the first connection, so Hello never announces a corrupt copy.
func (a *Agent) scrub() {
	for _, ns := range a.heldList() {
		unlock := a.lock(ns)
		v, err := a.cache.Get(ns)
		if err == nil {
			a.update(ns, func(st *nsState) { st.kind, st.info = v.Kind, v.Info })
		}
		unlock()
		if errors.Is(err, cache.ErrCorrupt) {
			a.dropCorrupt(ns, err)
		} else if err != nil && !errors.Is(err, cache.ErrNotFound) {
			a.log.Warn("cannot read cached namespace", "namespace", ns, "err", err)
		}
	}
}

// restoreFiles brings the files a previous run left up to date with the
// cache and holds their namespaces for one grace period: consumers of the
// previous run are expected back. Temporary files of interrupted writes
// are removed. Files are otherwise trusted: they were written from
// verified content, and readers verify them.
func (a *Agent) restoreFiles() {
	if n, err := nsfile.CleanTemp(a.filesDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn("cannot clean temporary files", "dir", a.filesDir, "err", err)
	} else if n > 0 {
		a.log.Info("removed temporary files of interrupted writes", "count", n)
	}
	for _, ns := range a.filesOnDisk() {
		path, _ := nsfile.Path(a.filesDir, ns)
		f, err := nsfile.Read(path)
		if err != nil {
			a.log.Warn("namespace file unreadable; it will be rewritten", "path", path, "err", err)
		} else {
			a.update(ns, func(st *nsState) { st.fileVersion = f.Version })
		}
		a.transition(a.leases.Hold(ns))
	}
}

// filesOnDisk lists the namespaces that have a file in the files directory.
func (a *Agent) filesOnDisk() []string {
	var out []string
	domains, err := os.ReadDir(a.filesDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("cannot list namespace files", "dir", a.filesDir, "err", err)
		}
		return nil
	}
	for _, d := range domains {
		if !d.IsDir() || names.Domain(d.Name()) != nil {
			continue
		}
		files, err := os.ReadDir(filepath.Join(a.filesDir, d.Name()))
		if err != nil {
			continue
		}
		for _, f := range files {
			name, ok := strings.CutSuffix(f.Name(), nsfile.Ext)
			if !ok || !f.Type().IsRegular() || nsfile.IsTemp(f.Name()) {
				continue
			}
			ns := d.Name() + "/" + name
			if _, _, err := names.Namespace(ns); err == nil {
				out = append(out, ns)
			}
		}
	}
	return out
}

// transition acts on lease transitions.
func (a *Agent) transition(trs []leases.Transition) {
	for _, tr := range trs {
		a.sync(tr.Namespace)
	}
}

// sync makes the upstream subscription and the file of ns match whether
// it is wanted now. It is idempotent, so transitions handled out of order
// by concurrent callers still converge on the lease table's truth.
func (a *Agent) sync(ns string) {
	unlock := a.lock(ns)
	defer unlock()
	if a.leases.Wanted(ns) {
		a.update(ns, func(st *nsState) { st.unwantedSince = time.Time{} })
		a.sig.store.Hold(ns, a.get(ns).held.Seq)
		a.up.Subscribe(ns)
		a.ensureFileLocked(ns)
		a.checkFileLocked(ns)
		return
	}
	a.up.Unsubscribe(ns)
	a.sig.store.Release(ns)
	a.sig.host.release(ns)
	if err := a.writer.Remove(a.filesDir, ns); err != nil {
		a.log.Warn("cannot remove namespace file", "namespace", ns, "err", err)
	}
	now := a.now()
	a.update(ns, func(st *nsState) {
		st.fileVersion, st.fileStale = 0, false
		st.reportVersion, st.applied, st.rejected = 0, nil, nil
		st.unwantedSince = now
	})
	a.forgetIfIdle(ns)
}

// evictUnwanted drops from the cache every namespace no lease has wanted
// for Options.CacheRetention: a consumer that comes back after that costs
// one snapshot, and the agent holds (and would announce) only what its
// consumers use.
func (a *Agent) evictUnwanted() {
	if a.opts.CacheRetention < 0 {
		return
	}
	cutoff := a.now().Add(-a.opts.CacheRetention)
	for _, ns := range a.known() {
		st := a.get(ns)
		if st.held.Seq == 0 || st.unwantedSince.IsZero() || st.unwantedSince.After(cutoff) {
			continue
		}
		unlock := a.lock(ns)
		if st := a.get(ns); !a.leases.Wanted(ns) && !st.unwantedSince.IsZero() && !st.unwantedSince.After(cutoff) {
			if err := a.cache.Drop(ns); err != nil {
				a.log.Warn("cannot evict an unwanted namespace from the cache", "namespace", ns, "err", err)
			} else {
				a.update(ns, func(st *nsState) { st.held, st.info = content.Ref{}, nil })
				a.met.setVersion(ns, 0)
				a.met.evictions.Inc()
				a.log.Info("evicted a namespace no consumer wanted", "namespace", ns, "unwanted_since", st.unwantedSince)
				a.forgetIfIdle(ns)
			}
		}
		unlock()
	}
}

// ensureFileLocked writes the file of ns from the cache if it is missing,
// stale or failed to write. The caller holds the namespace's lock.
func (a *Agent) ensureFileLocked(ns string) {
	st := a.get(ns)
	if st.held.Seq == 0 || (st.fileVersion == st.held.Seq && !st.fileStale) {
		return
	}
	v, err := a.cache.Get(ns)
	switch {
	case errors.Is(err, cache.ErrCorrupt):
		a.dropCorruptLocked(ns, err)
		return
	case err != nil:
		a.log.Warn("cannot read namespace to write its file", "namespace", ns, "err", err)
		return
	}
	a.writeFileLocked(v)
}

// fileCheckInterval is how often the maintenance loop checks that the
// files of wanted namespaces are still as the agent wrote them.
const fileCheckInterval = 5 * time.Second

// checkFileLocked writes the file of ns again if it is not as the agent
// left it and does not hold the version the agent wrote — removed,
// truncated, overwritten — so consumers never wait on a file the agent
// holds the content of. A stat finds most changes at no cost; only a
// changed stat makes it read and verify the file. The caller holds the
// namespace's lock.
func (a *Agent) checkFileLocked(ns string) {
	st := a.get(ns)
	if st.held.Seq == 0 || st.fileVersion == 0 || st.fileStale {
		return
	}
	path, err := nsfile.Path(a.filesDir, ns)
	if err != nil {
		return
	}
	fi, err := os.Stat(path)
	if err == nil && fi.Size() == st.fileSize && fi.ModTime().Equal(st.fileMtime) {
		return
	}
	if f, rerr := nsfile.Read(path); rerr == nil && f.Version == st.fileVersion && f.Checksum == st.held.Checksum {
		a.update(ns, func(st *nsState) { st.fileSize, st.fileMtime = fi.Size(), fi.ModTime() })
		return // touched, but intact
	} else if rerr != nil {
		err = rerr
	}
	a.met.fileRepairs.Inc()
	a.log.Warn("namespace file was changed or removed outside the agent; writing it again", "namespace", ns, "version", st.held.Seq, "err", err)
	a.update(ns, func(st *nsState) { st.fileStale = true })
	a.ensureFileLocked(ns)
}

// checkFiles runs checkFileLocked for every wanted namespace.
func (a *Agent) checkFiles() {
	for _, ns := range a.known() {
		if !a.leases.Wanted(ns) {
			continue
		}
		unlock := a.lock(ns)
		a.checkFileLocked(ns)
		unlock()
	}
}

// retryFiles rewrites the files whose last write failed.
func (a *Agent) retryFiles() {
	for _, ns := range a.known() {
		if st := a.get(ns); st.fileStale && a.leases.Wanted(ns) {
			unlock := a.lock(ns)
			a.ensureFileLocked(ns)
			unlock()
		}
	}
}
