package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/agent/cache"
	"lehr.dev/lehr/agent/leases"
	"lehr.dev/lehr/agent/localapi"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// backend is the agent as localapi.Backend.
type backend Agent

var _ localapi.Backend = (*backend)(nil)

// Subscribe grants a lease. When it is the namespace's first, the agent
// subscribes upstream and, if the namespace is cached, writes its file
// before answering, so the consumer finds it at once.
func (b *backend) Subscribe(_ context.Context, req *lehrpb.SubscribeRequest) (*lehrpb.SubscribeResponse, error) {
	a := (*Agent)(b)
	ns := req.GetNamespace()
	l, trs, err := a.leases.Subscribe(ns, req.GetClientId(), req.GetService(), time.Duration(req.GetTtlSeconds())*time.Second)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", ns, err)
	}
	a.transition(trs)
	a.sig.lease(l.ID, ns, req.GetMetricsUrl())
	if len(trs) == 0 {
		// Already wanted: still make sure the file is there and intact (a
		// write that failed, a file someone else damaged).
		unlock := a.lock(ns)
		a.ensureFileLocked(ns)
		a.checkFileLocked(ns)
		unlock()
	}
	path, err := nsfile.Path(a.filesDir, ns)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", ns, err)
	}
	resp := &lehrpb.SubscribeResponse{LeaseId: l.ID, TtlSeconds: uint32(l.TTL / time.Second), Path: path, Unavailable: a.up.Unavailable(ns)}
	if st := a.get(ns); st.fileVersion > 0 && st.fileVersion == st.held.Seq {
		resp.Version, resp.Checksum = st.held.Seq, st.held.Checksum
	}
	a.log.Debug("lease granted", "namespace", ns, "client", req.GetClientId(), "service", req.GetService(), "ttl", l.TTL)
	return resp, nil
}

// KeepAlive renews a lease, and says why the distributor cannot serve its
// namespace, if it said so.
func (b *backend) KeepAlive(_ context.Context, id string) (*lehrpb.KeepAliveResponse, error) {
	a := (*Agent)(b)
	l, err := a.leases.KeepAlive(id)
	if err != nil {
		return nil, err
	}
	return &lehrpb.KeepAliveResponse{TtlSeconds: uint32(l.TTL / time.Second), Unavailable: a.up.Unavailable(l.Namespace)}, nil
}

// Unsubscribe ends a lease.
func (b *backend) Unsubscribe(_ context.Context, id string) error {
	a := (*Agent)(b)
	trs, err := a.leases.Unsubscribe(id)
	if err != nil {
		return err
	}
	a.transition(trs)
	return nil
}

// Get reads a namespace from the cache, verifying it. A corrupt copy is
// dropped and fetched again; the caller gets UNAVAILABLE meanwhile.
func (b *backend) Get(_ context.Context, req *lehrpb.AgentGetRequest) (*lehrpb.AgentGetResponse, error) {
	a := (*Agent)(b)
	ns := req.GetNamespace()
	v, err := a.cache.Get(ns)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		return nil, fmt.Errorf("namespace %s is not cached on this host (subscribe to it first): %w", ns, localapi.ErrNotFound)
	case errors.Is(err, cache.ErrCorrupt):
		a.dropCorrupt(ns, err)
		return nil, fmt.Errorf("namespace %s: cached copy failed verification and is being fetched again: %w", ns, localapi.ErrUnavailable)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", ns, err)
	}
	props := v.Content.Props()
	if keys := req.GetKeys(); len(keys) > 0 {
		props = nil
		for _, k := range keys {
			if p, ok := v.Content.Get(k); ok {
				props = append(props, p)
			}
		}
	}
	return &lehrpb.AgentGetResponse{Version: versionInfo(v), Kind: v.Kind, Properties: content.ToProto(props)}, nil
}

// Status describes the agent.
func (b *backend) Status(context.Context) (*lehrpb.StatusResponse, error) {
	a := (*Agent)(b)
	up := a.up.Status()
	resp := &lehrpb.StatusResponse{
		HostId:      a.opts.HostID,
		Zone:        a.opts.Zone,
		Distributor: up.Distributor,
		Connected:   up.Connected,
	}
	if n, err := a.cache.Size(); err == nil {
		resp.CacheBytes = n
	}
	leaseCount := map[string]int{}
	for _, n := range a.leases.Namespaces() {
		leaseCount[n.Name] = n.Leases
	}
	seen := map[string]bool{}
	add := func(ns string) {
		if seen[ns] {
			return
		}
		seen[ns] = true
		st := a.get(ns)
		path, _ := nsfile.Path(a.filesDir, ns)
		s := &lehrpb.NamespaceStatus{
			Namespace:   ns,
			Version:     st.held.Seq,
			Checksum:    st.held.Checksum,
			Subscribers: int32(leaseCount[ns]),
			Upstream:    a.up.Subscribed(ns),
			Path:        path,
			// NOT_FOUND once the namespace has no goal in the zone (deleted
			// upstream): the file stays, at the version held.
			Unavailable: a.up.Unavailable(ns),
		}
		if st.reportVersion == st.held.Seq && st.held.Seq > 0 {
			s.Applied, s.ApplyErrors = int32(len(st.applied)), int32(len(st.rejected))
		}
		s.HostChecks = a.hostChecksOf(ns)
		resp.Namespaces = append(resp.Namespaces, s)
	}
	for _, ns := range a.known() {
		add(ns)
	}
	for _, n := range a.leases.Namespaces() {
		add(n.Name)
	}
	return resp, nil
}

// ReportApply records a consumer's verdict on a version. Only reports for
// the version the agent holds count; older ones are ignored.
func (b *backend) ReportApply(_ context.Context, req *lehrpb.ReportApplyRequest) error {
	a := (*Agent)(b)
	l, ok := a.leases.Lookup(req.GetLeaseId())
	if !ok {
		return fmt.Errorf("report for lease %q: %w", req.GetLeaseId(), leases.ErrNotFound)
	}
	ns := req.GetNamespace()
	if l.Namespace != ns {
		return fmt.Errorf("lease %q holds %s, not %s: %w", l.ID, l.Namespace, ns, localapi.ErrNotFound)
	}
	current, appliedAt := false, time.Time{}
	a.update(ns, func(st *nsState) {
		if !req.GetOk() {
			st.callbackErrs++
		}
		if req.GetVersion() != st.held.Seq {
			return
		}
		current, appliedAt = true, st.appliedAt
		if st.reportVersion != st.held.Seq {
			st.reportVersion, st.applied, st.rejected = st.held.Seq, map[string]bool{}, map[string]bool{}
		}
		if req.GetOk() {
			st.applied[l.ID] = true
			delete(st.rejected, l.ID)
		} else {
			st.rejected[l.ID] = true
			delete(st.applied, l.ID)
		}
	})
	if current {
		a.reportSignals(ns, req, appliedAt)
	}
	if !req.GetOk() {
		a.log.Warn("consumer rejected a version", "namespace", ns, "version", req.GetVersion(),
			"client", l.ClientID, "error", req.GetError())
	}
	return nil
}

// versionInfo describes the cached version of ns for consumers. A compact
// Update (wire.CapCompactUpdate) leaves out of its info what the agent
// knows anyway, so the fields derivable from the cache are filled in here:
// namespace, seq and checksum from the cache's metadata, size_bytes and
// property_count from the content. transport_identity stays with control.
func versionInfo(v content.Version) *lehrpb.VersionInfo {
	info := &lehrpb.VersionInfo{}
	if v.Info != nil {
		info = proto.Clone(v.Info).(*lehrpb.VersionInfo)
	}
	if info.Namespace == "" {
		info.Namespace = v.Namespace
	}
	if info.Seq == 0 {
		info.Seq = v.Seq
	}
	if info.Checksum == "" {
		info.Checksum = v.Checksum
	}
	if info.SizeBytes == 0 && info.PropertyCount == 0 {
		info.SizeBytes, info.PropertyCount = v.Content.Size(), int32(v.Content.Len())
	}
	return info
}

// maxPreviewPairs bounds the preview counts the agent keeps per
// namespace: (experiment, live etag, experiment etag) triples; beyond it
// the triple added to least recently is dropped (preview.Tally).
const maxPreviewPairs = 64

// ReportPreview adds a consumer's policy-preview counts to the
// namespace's totals, which go up in every Report, and its live decisions
// to the namespace's signals.
func (b *backend) ReportPreview(_ context.Context, req *lehrpb.ReportPreviewRequest) error {
	a := (*Agent)(b)
	l, ok := a.leases.Lookup(req.GetLeaseId())
	if !ok {
		return fmt.Errorf("preview report for lease %q: %w", req.GetLeaseId(), leases.ErrNotFound)
	}
	ns := req.GetNamespace()
	if l.Namespace != ns {
		return fmt.Errorf("lease %q holds %s, not %s: %w", l.ID, l.Namespace, ns, localapi.ErrNotFound)
	}
	a.update(ns, func(st *nsState) {
		if st.tally == nil {
			st.tally = preview.NewTally(maxPreviewPairs)
		}
		for _, in := range req.GetCounts() {
			if in.GetExperiment() == preview.ComparisonKey {
				continue // an older consumer's: no experiment (localapi)
			}
			c := in.GetCounts()
			st.tally.Add(preview.Key{Namespace: ns, Experiment: in.GetExperiment(), LiveEtag: c.GetLiveEtag(), ExperimentEtag: c.GetExperimentEtag()}, c)
		}
		// A copy for the reports: a Report may hold the previous one
		// (get copies nsState shallowly).
		st.preview = nil
		if nps := st.tally.Namespaces(); len(nps) > 0 {
			st.preview = nps[0].GetCounts()
		}
	})
	if d := req.GetLiveDecisions(); d > 0 {
		a.sig.store.Add(ns, canary.MetricPolicyDecisions, float64(d))
		a.sig.store.Add(ns, canary.MetricPolicyDenies, float64(req.GetLiveDenies()))
		// A consumer that does not count changed decisions leaves the
		// signal alone: reporting none would tell a committed version's
		// canary analysis that nothing changed on this host.
		if req.LiveChanged != nil {
			a.sig.store.Add(ns, canary.MetricPolicyChanged, float64(req.GetLiveChanged()))
		}
	}
	a.met.previewReports.Inc()
	return nil
}
