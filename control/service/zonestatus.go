package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// Limits of ReportZoneStatus.
const (
	// DefaultReportTTL is how long a report stays valid when the request
	// says 0.
	DefaultReportTTL = 30 * time.Second
	// MaxReportTTLSeconds bounds ttl_seconds: a report is its
	// distributor's word, and must not outlive a dead (or distrusted)
	// distributor for long. A distributor reporting every 10 s asks for
	// 30 s; one reporting every 40 s or more for this bound
	// (distributor.MaxReportTTL).
	MaxReportTTLSeconds = 120
	// MaxVersionCounts bounds the version counts of one report. The encoded
	// report must also fit store.MaxZoneReportBytes.
	MaxVersionCounts = 100_000
	// MaxHostReports bounds the per-host detail of one report.
	MaxHostReports = 1000
	// MaxPreviewCounts bounds the policy-preview counts of one report.
	MaxPreviewCounts = 1000
	// MaxBuildCounts bounds the agent builds of one report (a distributor
	// sends at most fanout.MaxBuilds), and MaxBuildBytes each build, the
	// distributor's own included.
	MaxBuildCounts = 256
	MaxBuildBytes  = 128
	// MaxCacheQuarantines bounds the cache quarantines of one report (a
	// distributor sends at most fanout.MaxQuarantines), and
	// MaxHostIDBytes each one's host id (an agent's, from its certificate).
	MaxCacheQuarantines = 1000
	MaxHostIDBytes      = evaluation.MaxHostIDBytes
)

// leaseSweepInterval is how often expired entries leave the lease cache.
const leaseSweepInterval = time.Minute

// reportLeases caches the etcd lease of each distributor's report so that a
// report renews the lease of the previous one instead of granting a new one
// (see control/store/zonestatus.go). A lost entry costs one lease grant.
type reportLeases struct {
	mu        sync.Mutex
	m         map[reportKey]reportLease
	nextSweep time.Time
}

type reportKey struct{ zone, id string }

type reportLease struct {
	lease   store.ReportLease
	expires time.Time // when etcd drops the lease if it is not renewed
}

// get returns the cached lease of k, or the zero ReportLease.
func (r *reportLeases) get(k reportKey) store.ReportLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[k].lease
}

// set records the lease of k, or forgets k if l is the zero ReportLease,
// and drops entries that expired, at most once per leaseSweepInterval.
func (r *reportLeases) set(k reportKey, l store.ReportLease, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[reportKey]reportLease)
	}
	if l.ID == 0 {
		delete(r.m, k)
	} else {
		r.m[k] = reportLease{lease: l, expires: now.Add(l.TTL)}
	}
	if now.Before(r.nextSweep) {
		return
	}
	r.nextSweep = now.Add(leaseSweepInterval)
	for k, e := range r.m {
		if now.After(e.expires) {
			delete(r.m, k)
		}
	}
}

// ZoneMarkEvery is how often a replica records that a zone's distributors
// report (Zone.last_report_time): the rollout strategist tells a zone that
// never reported (skipped) from one that stopped (waited for), and a
// minute is fine enough for that.
const ZoneMarkEvery = time.Minute

// zoneMarks remembers when this replica last recorded each zone's report.
type zoneMarks struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether zone's report should be recorded at now, and if so
// notes it as recorded.
func (m *zoneMarks) due(zone string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.last[zone]) < ZoneMarkEvery {
		return false
	}
	if m.last == nil {
		m.last = make(map[string]time.Time)
	}
	m.last[zone] = now
	return true
}

// forget makes zone's next report due again (its recording failed).
func (m *zoneMarks) forget(zone string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, zone)
}

// len returns the number of cached leases.
func (r *reportLeases) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// ReportZoneStatus stores a distributor's report of how many of its agents
// hold each version, replacing its previous one. The report stays visible
// to GetZoneStatus (on every control replica) for ttl_seconds (0: 30 s)
// unless renewed by the next report.
func (s *Service) ReportZoneStatus(ctx context.Context, req *lehrpb.ReportZoneStatusRequest) (_ *lehrpb.ReportZoneStatusResponse, err error) {
	defer s.track(ctx, "ReportZoneStatus", time.Now(), &err)
	if err := checkReport(req); err != nil {
		return nil, err
	}
	ttl := DefaultReportTTL
	if req.GetTtlSeconds() > 0 {
		ttl = time.Duration(req.GetTtlSeconds()) * time.Second
	}
	st := &lehrpb.DistributorStatus{
		DistributorId: req.GetDistributorId(),
		Agents:        req.GetAgents(),
		Versions:      req.GetVersions(),
		Health:        req.GetHealth(),
		Hosts:         req.GetHosts(),
		Samples:       req.GetSamples(),
		Signals:       req.GetSignals(),
		Preview:       req.GetPreview(),
		// As reported; GetZoneStatus counts what older distributors
		// leave out as "unknown".
		DistributorBuild: req.GetDistributorBuild(),
		AgentBuilds:      req.GetAgentBuilds(),
		CacheQuarantines: req.GetCacheQuarantines(),
	}
	k := reportKey{zone: req.GetZone(), id: req.GetDistributorId()}
	lease, err := s.st.PutZoneStatus(ctx, k.zone, st, ttl, s.leases.get(k))
	// Even on error the lease returned is the one to try next time (zero
	// when the zone is unknown).
	s.leases.set(k, lease, s.now())
	if errors.Is(err, store.ErrInvalid) {
		// Everything else was checked above: the report is too large.
		return nil, invalid(apierror.ReasonInvalidArgument, "versions",
			"the report is too large to store: %v; report fewer or shorter namespaces", err).
			WithLimit("%d bytes encoded", store.MaxZoneReportBytes)
	}
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "zone")
	}
	s.metrics.GetOrCreateCounter(`lehr_control_zone_reports_total{zone="` + k.zone + `"}`).Inc()
	if now := s.now(); s.reported.due(k.zone, now) {
		if err := s.st.MarkZoneReported(ctx, k.zone, now); err != nil {
			s.reported.forget(k.zone)
			s.log.Warn("control: recording that a zone reports", "zone", k.zone, "err", err)
		}
	}
	n, err := s.st.ZoneReporters(ctx, k.zone)
	if err != nil {
		// Stored; the count is a hint the distributor keeps from before.
		s.log.Warn("control: counting a zone's distributors", "zone", k.zone, "err", err)
	}
	return &lehrpb.ReportZoneStatusResponse{Distributors: int32(n)}, nil
}

// checkReport validates a ReportZoneStatusRequest.
func checkReport(req *lehrpb.ReportZoneStatusRequest) error {
	if err := names.Zone(req.GetZone()); err != nil {
		return nameError("zone", err)
	}
	switch id := req.GetDistributorId(); {
	case id == "":
		return invalid(apierror.ReasonInvalidArgument, "distributor_id", "distributor_id is required")
	case len(id) > store.MaxDistributorIDBytes:
		return invalid(apierror.ReasonInvalidArgument, "distributor_id", "distributor_id is %d bytes; at most %d allowed",
			len(id), store.MaxDistributorIDBytes).WithLimit("%d bytes", store.MaxDistributorIDBytes)
	}
	if req.GetAgents() < 0 {
		return invalid(apierror.ReasonInvalidArgument, "agents", "agents is %d; it must not be negative", req.GetAgents())
	}
	if t := req.GetTtlSeconds(); t > MaxReportTTLSeconds {
		return invalid(apierror.ReasonInvalidArgument, "ttl_seconds", "ttl_seconds is %d; at most %d allowed (0 means %d)",
			t, MaxReportTTLSeconds, int(DefaultReportTTL/time.Second)).WithLimit("%d seconds", MaxReportTTLSeconds)
	}
	vs := req.GetVersions()
	if len(vs) > MaxVersionCounts {
		return invalid(apierror.ReasonInvalidArgument, "versions", "the report has %d version counts; at most %d allowed",
			len(vs), MaxVersionCounts).WithLimit("%d entries", MaxVersionCounts)
	}
	type nsVersion struct {
		ns string
		v  uint64
	}
	seen := make(map[nsVersion]int, len(vs))
	for i, vc := range vs {
		if _, _, err := names.Namespace(vc.GetNamespace()); err != nil {
			return nameError(propField("versions", i, "namespace"), err)
		}
		if vc.GetAgents() < 0 {
			return invalid(apierror.ReasonInvalidArgument, propField("versions", i, "agents"),
				"agents is %d; it must not be negative", vc.GetAgents())
		}
		if err := services.Validate(propField("versions", i, "services"), vc.GetServices(), vc.GetConsumers()); err != nil {
			return invalid(apierror.ReasonInvalidArgument, propField("versions", i, "services"), "%v", err)
		}
		k := nsVersion{vc.GetNamespace(), vc.GetVersion()}
		if j, dup := seen[k]; dup {
			return invalid(apierror.ReasonInvalidArgument, propField("versions", i, ""),
				"%s version %d is counted twice, in versions[%d] and versions[%d]; send one count per namespace and version",
				k.ns, k.v, j, i)
		}
		seen[k] = i
	}
	if n := len(req.GetHealth()); n > MaxVersionCounts {
		return invalid(apierror.ReasonInvalidArgument, "health", "the report has %d health entries; at most %d allowed", n, MaxVersionCounts).
			WithLimit("%d entries", MaxVersionCounts)
	}
	for i, h := range req.GetHealth() {
		if _, _, err := names.Namespace(h.GetNamespace()); err != nil {
			return nameError(propField("health", i, "namespace"), err)
		}
		if h.GetAgents() < 0 {
			return invalid(apierror.ReasonInvalidArgument, propField("health", i, "agents"), "agents is %d; it must not be negative", h.GetAgents())
		}
	}
	if n := len(req.GetCacheQuarantines()); n > MaxCacheQuarantines {
		return invalid(apierror.ReasonInvalidArgument, "cache_quarantines", "the report has %d cache quarantines; at most %d allowed", n, MaxCacheQuarantines).
			WithLimit("%d entries", MaxCacheQuarantines)
	}
	for i, q := range req.GetCacheQuarantines() {
		if id := q.GetHostId(); id == "" || len(id) > MaxHostIDBytes {
			return invalid(apierror.ReasonInvalidArgument, propField("cache_quarantines", i, "host_id"),
				"host_id is %d bytes; want 1 to %d", len(id), MaxHostIDBytes)
		}
		if !q.GetQuarantineTime().IsValid() {
			return invalid(apierror.ReasonInvalidArgument, propField("cache_quarantines", i, "quarantine_time"), "quarantine_time is required")
		}
	}
	if n := len(req.GetHosts()); n > MaxHostReports {
		return invalid(apierror.ReasonInvalidArgument, "hosts", "the report has %d host reports; at most %d allowed", n, MaxHostReports).
			WithLimit("%d entries", MaxHostReports)
	}
	if n := len(req.GetSamples()); n > MaxVersionCounts {
		return invalid(apierror.ReasonInvalidArgument, "samples", "the report has %d samples; at most %d allowed", n, MaxVersionCounts)
	}
	for i, smp := range req.GetSamples() {
		if _, _, err := names.Namespace(smp.GetNamespace()); err != nil {
			return nameError(propField("samples", i, "namespace"), err)
		}
		if n := len(smp.GetHosts()); n > MaxHostReports {
			return invalid(apierror.ReasonInvalidArgument, propField("samples", i, "hosts"), "%d hosts; at most %d allowed", n, MaxHostReports)
		}
	}
	if n := len(req.GetSignals()); n > MaxHostReports {
		return invalid(apierror.ReasonInvalidArgument, "signals", "the report has %d host signals; at most %d allowed", n, MaxHostReports).
			WithLimit("%d entries", MaxHostReports)
	}
	for i, h := range req.GetSignals() {
		if id := h.GetHostId(); id == "" || len(id) > 255 {
			return invalid(apierror.ReasonInvalidArgument, propField("signals", i, "host_id"), "host_id is %d bytes; want 1 to 255", len(id))
		}
		if _, _, err := names.Namespace(h.GetSignals().GetNamespace()); err != nil {
			return nameError(propField("signals", i, "signals.namespace"), err)
		}
		// The same rules as on the wire, where the distributor got them.
		if err := signals.Validate(propField("signals", i, "signals"), h.GetSignals()); err != nil {
			return invalid(apierror.ReasonInvalidArgument, propField("signals", i, "signals"), "%v", err)
		}
	}
	for i, h := range req.GetHosts() {
		if id := h.GetHostId(); id == "" || len(id) > 255 {
			return invalid(apierror.ReasonInvalidArgument, propField("hosts", i, "host_id"), "host_id is %d bytes; want 1 to 255", len(id))
		}
		if _, _, err := names.Namespace(h.GetReport().GetNamespace()); err != nil {
			return nameError(propField("hosts", i, "report.namespace"), err)
		}
	}
	if err := checkBuilds(req); err != nil {
		return err
	}
	n := 0
	for i, p := range req.GetPreview() {
		if _, _, err := names.Namespace(p.GetNamespace()); err != nil {
			return nameError(propField("preview", i, "namespace"), err)
		}
		for j, c := range p.GetCounts() {
			if err := names.Experiment(c.GetExperiment()); err != nil {
				return nameError(propField("preview", i, fmt.Sprintf("counts[%d].experiment", j)), err)
			}
		}
		if n += len(p.GetCounts()); n > MaxPreviewCounts {
			return invalid(apierror.ReasonInvalidArgument, "preview", "the report has more than %d preview counts", MaxPreviewCounts).
				WithLimit("%d entries", MaxPreviewCounts)
		}
	}
	return nil
}

// checkBuilds validates the builds of a report: the distributor's, and
// its agents' counts (each build once, not empty, at most MaxBuildBytes,
// counts not negative).
func checkBuilds(req *lehrpb.ReportZoneStatusRequest) error {
	if b := req.GetDistributorBuild(); len(b) > MaxBuildBytes {
		return invalid(apierror.ReasonInvalidArgument, "distributor_build", "distributor_build is %d bytes; at most %d allowed", len(b), MaxBuildBytes).
			WithLimit("%d bytes", MaxBuildBytes)
	}
	bs := req.GetAgentBuilds()
	if len(bs) > MaxBuildCounts {
		return invalid(apierror.ReasonInvalidArgument, "agent_builds", "the report has %d agent builds; at most %d allowed", len(bs), MaxBuildCounts).
			WithLimit("%d entries", MaxBuildCounts)
	}
	seen := make(map[string]int, len(bs))
	for i, bc := range bs {
		switch b := bc.GetBuild(); {
		case b == "" || len(b) > MaxBuildBytes:
			return invalid(apierror.ReasonInvalidArgument, propField("agent_builds", i, "build"), "build is %d bytes; want 1 to %d", len(b), MaxBuildBytes).
				WithLimit("%d bytes", MaxBuildBytes)
		case bc.GetCount() < 0:
			return invalid(apierror.ReasonInvalidArgument, propField("agent_builds", i, "count"), "count is %d; it must not be negative", bc.GetCount())
		}
		if j, dup := seen[bc.GetBuild()]; dup {
			return invalid(apierror.ReasonInvalidArgument, propField("agent_builds", i, "build"),
				"build %q is counted twice, in agent_builds[%d] and agent_builds[%d]; send one count per build", bc.GetBuild(), j, i)
		}
		seen[bc.GetBuild()] = i
	}
	return nil
}

// GetZoneStatus returns the live reports of a zone's distributors, sorted
// by distributor id, and their sum per namespace and version, sorted by
// namespace and version. NOT_FOUND if the zone is not registered.
func (s *Service) GetZoneStatus(ctx context.Context, req *lehrpb.GetZoneStatusRequest) (_ *lehrpb.GetZoneStatusResponse, err error) {
	defer s.track(ctx, "GetZoneStatus", time.Now(), &err)
	if err := names.Zone(req.GetZone()); err != nil {
		return nil, nameError("zone", err)
	}
	ns := req.GetNamespace()
	if ns != "" {
		if _, _, err := names.Namespace(ns); err != nil {
			return nil, nameError("namespace", err)
		}
	}
	view := req.GetView()
	if _, ok := lehrpb.ZoneStatusView_name[int32(view)]; !ok {
		return nil, invalid(apierror.ReasonInvalidArgument, "view", "view %d is not a ZoneStatusView: want ZONE_STATUS_VIEW_BASIC or ZONE_STATUS_VIEW_FULL", view)
	}
	sts, err := s.st.ZoneStatus(ctx, req.GetZone())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "zone")
	}
	if ns != "" {
		for _, st := range sts {
			onlyNamespace(st, ns)
		}
	}
	health, hosts := sumHealth(sts)
	dists, agents := sumBuilds(sts)
	resp := &lehrpb.GetZoneStatusResponse{
		Zone:              req.GetZone(),
		Distributors:      sts,
		Versions:          sumVersions(sts),
		Health:            health,
		Hosts:             hosts,
		DistributorBuilds: dists,
		AgentBuilds:       agents,
		CacheQuarantines:  allQuarantines(sts),
	}
	if view == lehrpb.ZoneStatusView_ZONE_STATUS_VIEW_BASIC {
		for _, st := range sts {
			st.Versions, st.Samples, st.Signals, st.Preview = nil, nil, nil, nil
		}
	}
	return resp, nil
}

// onlyNamespace keeps, of st, what concerns namespace ns.
func onlyNamespace(st *lehrpb.DistributorStatus, ns string) {
	st.Versions = slices.DeleteFunc(st.Versions, func(v *lehrpb.VersionCount) bool { return v.GetNamespace() != ns })
	st.Health = slices.DeleteFunc(st.Health, func(h *lehrpb.NamespaceHealth) bool { return h.GetNamespace() != ns })
	st.Hosts = slices.DeleteFunc(st.Hosts, func(h *lehrpb.HostReport) bool { return h.GetReport().GetNamespace() != ns })
	st.Samples = slices.DeleteFunc(st.Samples, func(s *lehrpb.CohortSample) bool { return s.GetNamespace() != ns })
	st.Signals = slices.DeleteFunc(st.Signals, func(s *lehrpb.HostSignals) bool { return s.GetSignals().GetNamespace() != ns })
	st.Preview = slices.DeleteFunc(st.Preview, func(p *lehrpb.NamespacePreviewCounts) bool { return p.GetNamespace() != ns })
}

// allQuarantines lists the cache quarantines of several reports, the most
// recent first (by host id among equals); a host reported by two
// distributors (it moved between them) is listed once, with its latest.
func allQuarantines(sts []*lehrpb.DistributorStatus) []*lehrpb.CacheQuarantine {
	latest := map[string]*lehrpb.CacheQuarantine{}
	for _, st := range sts {
		for _, q := range st.GetCacheQuarantines() {
			if old := latest[q.GetHostId()]; old == nil || q.GetQuarantineTime().AsTime().After(old.GetQuarantineTime().AsTime()) {
				latest[q.GetHostId()] = q
			}
		}
	}
	out := slices.Collect(maps.Values(latest))
	slices.SortFunc(out, func(a, b *lehrpb.CacheQuarantine) int {
		return cmp.Or(b.GetQuarantineTime().AsTime().Compare(a.GetQuarantineTime().AsTime()), cmp.Compare(a.GetHostId(), b.GetHostId()))
	})
	return out
}

// sumBuilds counts the distributors of several reports per build, and
// sums their agents per build, each sorted by build. A distributor older
// than builds being reported is counted as buildinfo.Unknown, and so are
// its agents: sts is changed to say so, so that every agent of the zone
// counts once.
func sumBuilds(sts []*lehrpb.DistributorStatus) (distributors, agents []*lehrpb.BuildCount) {
	dm, am := map[string]int64{}, map[string]int64{}
	for _, st := range sts {
		if st.GetDistributorBuild() == "" {
			st.DistributorBuild = buildinfo.Unknown
		}
		if len(st.GetAgentBuilds()) == 0 && st.GetAgents() > 0 {
			st.AgentBuilds = []*lehrpb.BuildCount{{Build: buildinfo.Unknown, Count: st.GetAgents()}}
		}
		dm[st.GetDistributorBuild()]++
		for _, bc := range st.GetAgentBuilds() {
			am[bc.GetBuild()] += int64(bc.GetCount())
		}
	}
	list := func(m map[string]int64) []*lehrpb.BuildCount {
		out := make([]*lehrpb.BuildCount, 0, len(m))
		for _, b := range slices.Sorted(maps.Keys(m)) {
			out = append(out, &lehrpb.BuildCount{Build: b, Count: int32(min(m[b], math.MaxInt32))})
		}
		return out
	}
	return list(dm), list(am)
}

// sumHealth adds up the health entries of several reports per namespace,
// version and cohort, and gathers their host reports (a host connected to
// one distributor at a time appears once; if a report still names it after
// it moved, the newest applied_time wins).
func sumHealth(sts []*lehrpb.DistributorStatus) ([]*lehrpb.NamespaceHealth, []*lehrpb.HostReport) {
	type key struct {
		ns        string
		v         uint64
		cohort    bool
		candidate uint64
	}
	sums := map[key]*lehrpb.NamespaceHealth{}
	type hostNS struct{ host, ns string }
	hosts := map[hostNS]*lehrpb.HostReport{}
	for _, st := range sts {
		for _, h := range st.GetHealth() {
			k := key{h.GetNamespace(), h.GetVersion(), h.GetCohort(), h.GetCandidate()}
			s := sums[k]
			if s == nil {
				s = &lehrpb.NamespaceHealth{Namespace: k.ns, Version: k.v, Cohort: k.cohort, Candidate: k.candidate}
				sums[k] = s
			}
			s.Agents += h.GetAgents()
			s.Consumers += h.GetConsumers()
			s.ConsumersApplied += h.GetConsumersApplied()
			s.ConsumersRejected += h.GetConsumersRejected()
			s.LeasesExpired += h.GetLeasesExpired()
		}
		for _, hr := range st.GetHosts() {
			k := hostNS{hr.GetHostId(), hr.GetReport().GetNamespace()}
			if old, ok := hosts[k]; ok && !old.GetReport().GetAppliedTime().AsTime().Before(hr.GetReport().GetAppliedTime().AsTime()) {
				continue
			}
			hosts[k] = hr
		}
	}
	health := make([]*lehrpb.NamespaceHealth, 0, len(sums))
	for _, s := range sums {
		health = append(health, s)
	}
	slices.SortFunc(health, func(a, b *lehrpb.NamespaceHealth) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetVersion(), b.GetVersion()),
			boolCmp(a.GetCohort(), b.GetCohort()), cmp.Compare(a.GetCandidate(), b.GetCandidate()))
	})
	out := make([]*lehrpb.HostReport, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *lehrpb.HostReport) int {
		return cmp.Or(cmp.Compare(a.GetHostId(), b.GetHostId()), cmp.Compare(a.GetReport().GetNamespace(), b.GetReport().GetNamespace()))
	})
	return health, out
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// sumVersions adds up the version counts of several reports per namespace
// and version — agents, consumers and consumers per service (the most
// consumers first, at most services.Max) — sorted by namespace, then
// version. A sum beyond int32 (uint32 for consumers) is capped.
func sumVersions(sts []*lehrpb.DistributorStatus) []*lehrpb.VersionCount {
	type nsVersion struct {
		ns string
		v  uint64
	}
	// A zone is mostly served by one distributor, or its namespaces
	// counted by one of them: a count reported once is answered as it is,
	// and only counts several distributors report are added up (their
	// services merged).
	type sum struct {
		first             *lehrpb.VersionCount
		agents, consumers int64
		services          map[string]int // nil while first is the only count
	}
	sums := make(map[nsVersion]*sum)
	for _, st := range sts {
		for _, vc := range st.GetVersions() {
			k := nsVersion{vc.GetNamespace(), vc.GetVersion()}
			s := sums[k]
			if s == nil {
				sums[k] = &sum{first: vc, agents: int64(vc.GetAgents()), consumers: int64(vc.GetConsumers())}
				continue
			}
			if s.services == nil {
				s.services = map[string]int{}
				for _, sv := range s.first.GetServices() {
					s.services[sv.GetService()] += int(sv.GetConsumers())
				}
			}
			s.agents += int64(vc.GetAgents())
			s.consumers += int64(vc.GetConsumers())
			for _, sv := range vc.GetServices() {
				s.services[sv.GetService()] += int(sv.GetConsumers())
			}
		}
	}
	out := make([]*lehrpb.VersionCount, 0, len(sums))
	for k, s := range sums {
		if s.services == nil { // one count: as reported (services.Max at most, checked)
			out = append(out, s.first)
			continue
		}
		out = append(out, &lehrpb.VersionCount{Namespace: k.ns, Version: k.v, Agents: int32(min(s.agents, math.MaxInt32)),
			Consumers: uint32(min(s.consumers, math.MaxUint32)), Services: services.Top(s.services)})
	}
	slices.SortFunc(out, func(a, b *lehrpb.VersionCount) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetVersion(), b.GetVersion()))
	})
	return out
}
