package console

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// The fleet page: every zone with its distributors' reports, what needs
// attention first, the rollouts in flight and the domains.

// zoneView is a zone as the fleet page shows it.
type zoneView struct {
	Zone   *lehrpb.Zone
	Status *lehrpb.GetZoneStatusResponse // nil if it could not be read
	Err    string
	// Goals by namespace (nil if they could not be read).
	Goals map[string]*lehrpb.GoalState
	// Agents connected to the zone's reporting distributors, and the
	// namespaces they hold.
	Agents, Namespaces int
	// State: "reporting", "silent" (reported once, no live report now)
	// or "never reported".
	State string
}

// problem is something of the fleet that needs attention.
type problem struct {
	Zone string `json:"zone"`
	// Kind: "silent zone", "behind goal", "untrusted updates", "host checks
	// failing", "consumers rejecting", "leases lapsed", "cache
	// quarantined", "unreadable".
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Host      string `json:"host,omitempty"`
	What      string `json:"what"`
}

type fleetPage struct {
	Zones    []zoneView
	Problems []problem
	Rollouts []*lehrpb.Rollout
	Domains  []*lehrpb.Domain
	// MoreDomains: the list is the first page of domains only.
	MoreDomains bool
}

// zoneViews reads every zone, its status and its goals, as the caller of
// r, and what needs attention in them.
func (c *Console) zoneViews(r *http.Request) ([]zoneView, []problem, error) {
	ctx := r.Context()
	zs, err := c.opts.Client.ListZones(ctx, &lehrpb.ListZonesRequest{})
	if err != nil {
		return nil, nil, err
	}
	// The zones are read concurrently, a few at a time: each is two
	// calls whose answers grow with the catalog.
	views := make([]zoneView, len(zs.GetZones()))
	zprobs := make([][]problem, len(views))
	var wg sync.WaitGroup
	sem := make(chan struct{}, zoneReads)
	for i, z := range zs.GetZones() {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			v := zoneView{Zone: z}
			st, err := c.opts.Client.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z.GetName(), View: lehrpb.ZoneStatusView_ZONE_STATUS_VIEW_BASIC})
			if err != nil {
				v.Err = err.Error()
				zprobs[i] = append(zprobs[i], problem{Zone: z.GetName(), Kind: "unreadable", What: "its status could not be read: " + err.Error()})
			} else {
				v.Status = st
			}
			if g, err := c.opts.Client.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: z.GetName()}); err == nil {
				v.Goals = map[string]*lehrpb.GoalState{}
				for _, s := range g.GetGoals() {
					v.Goals[s.GetNamespace()] = s
				}
			}
			zprobs[i] = append(zprobs[i], zoneProblems(&v, c.opts.Now())...)
			views[i] = v
		})
	}
	wg.Wait()
	return views, slices.Concat(zprobs...), nil
}

// zoneReads bounds the zones the fleet page reads at once.
const zoneReads = 4

// zoneProblems fills v's figures and returns what needs attention in it:
// silence, agents behind their goal, untrusted updates, failing host
// checks, consumers rejecting a version or losing leases, agents that
// moved an unopenable cache aside.
func zoneProblems(v *zoneView, now time.Time) []problem {
	zone := v.Zone.GetName()
	st := v.Status
	var out []problem
	nss := map[string]bool{}
	for _, d := range st.GetDistributors() {
		v.Agents += int(d.GetAgents())
	}
	for _, vc := range st.GetVersions() {
		nss[vc.GetNamespace()] = true
	}
	v.Namespaces = len(nss)
	switch {
	case len(st.GetDistributors()) > 0:
		v.State = "reporting"
	case v.Zone.GetLastReportTime() != nil:
		v.State = "silent"
		out = append(out, problem{Zone: zone, Kind: "silent zone", What: fmt.Sprintf(
			"no live distributor report (the last %s ago): rollouts that reach it wait until its distributors report again",
			fmtAge(now.Sub(v.Zone.GetLastReportTime().AsTime())))})
	default:
		v.State = "never reported"
	}
	if v.Goals != nil {
		for _, vc := range st.GetVersions() {
			g, ok := v.Goals[vc.GetNamespace()]
			if !ok || vc.GetVersion() == g.GetVersion() || (g.GetCandidate() != nil && vc.GetVersion() == g.GetCandidate().GetVersion()) {
				continue
			}
			out = append(out, problem{Zone: zone, Kind: "behind goal", Namespace: vc.GetNamespace(), What: fmt.Sprintf(
				"%d agent(s) hold version %d; the zone's goal is %d", vc.GetAgents(), vc.GetVersion(), g.GetVersion())})
		}
	}
	for _, hr := range st.GetHosts() {
		rep := hr.GetReport()
		if n := rep.GetUntrustedUpdates(); n > 0 {
			out = append(out, problem{Zone: zone, Kind: "untrusted updates", Namespace: rep.GetNamespace(), Host: hr.GetHostId(), What: fmt.Sprintf(
				"refused %d update(s) whose signature did not verify (a distributor altering content, or control signing with a key the agent does not trust)", n)})
		}
		if hc := rep.GetHostChecks(); hc.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
			out = append(out, problem{Zone: zone, Kind: "host checks failing", Namespace: rep.GetNamespace(), Host: hr.GetHostId(), What: fmt.Sprintf(
				"version %d → %d: %s", hc.GetPreviousVersion(), hc.GetVersion(), hc.GetReason())})
		}
	}
	for _, q := range st.GetCacheQuarantines() {
		out = append(out, problem{Zone: zone, Kind: "cache quarantined", Host: q.GetHostId(), What: fmt.Sprintf(
			"%s ago its agent found its cache unopenable and moved it aside, and fetched every namespace again (its files served consumers meanwhile): check the host's disk (docs/operations.md, \"Failure modes\")",
			fmtAge(now.Sub(q.GetQuarantineTime().AsTime())))})
	}
	for _, h := range st.GetHealth() {
		if n := h.GetConsumersRejected(); n > 0 {
			out = append(out, problem{Zone: zone, Kind: "consumers rejecting", Namespace: h.GetNamespace(), What: fmt.Sprintf(
				"%d of %d consumer(s) rejected version %d", n, h.GetConsumers(), h.GetVersion())})
		}
		if n := h.GetLeasesExpired(); n > 0 {
			out = append(out, problem{Zone: zone, Kind: "leases lapsed", Namespace: h.GetNamespace(), What: fmt.Sprintf(
				"%d consumer lease(s) lapsed on version %d (consumers crashed or hung)", n, h.GetVersion())})
		}
	}
	return out
}

func (c *Console) fleet(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	zones, probs, err := c.zoneViews(r)
	if err != nil {
		c.failAPI(w, r, "list zones", err)
		return
	}
	rs, err := c.opts.Client.ListRollouts(ctx, &lehrpb.ListRolloutsRequest{ActiveOnly: true})
	if err != nil {
		c.failAPI(w, r, "list rollouts", err)
		return
	}
	ds, err := c.opts.Client.ListDomains(ctx, &lehrpb.ListDomainsRequest{PageSize: 200})
	if err != nil {
		c.failAPI(w, r, "list domains", err)
		return
	}
	// Unhealthy zones first, then by name.
	slices.SortStableFunc(zones, func(a, b zoneView) int {
		return cmp.Compare(rank(a.State), rank(b.State))
	})
	fp := fleetPage{Zones: zones, Problems: probs, Rollouts: rs.GetRollouts(), Domains: ds.GetDomains(), MoreDomains: ds.GetNextPageToken() != ""}
	var doc map[string]any
	if wantsJSON(r) { // built only when asked: it costs more than the page
		jz := make([]map[string]any, 0, len(zones))
		for _, z := range zones {
			jz = append(jz, map[string]any{"zone": pj(z.Zone), "state": z.State, "agents": z.Agents, "namespaces": z.Namespaces,
				"status": pj(summaryOf(z.Status)), "error": z.Err})
		}
		doc = map[string]any{"page": "fleet", "zones": jz, "problems": nonNil(probs),
			"activeRollouts": pjs(rs.GetRollouts()), "domains": pjs(ds.GetDomains()), "moreDomains": fp.MoreDomains}
	}
	c.render(w, r, "fleet", page{Title: "Fleet", Refresh: int(c.opts.Refresh / time.Second), Body: fp}, doc)
}

// summaryOf is st as the fleet page's JSON carries it: what the page
// shows — distributors, builds, health, host reports, cache quarantines —
// without the per-namespace version counts and the canary signals, which
// grow with the catalog and the fleet (GetZoneStatus answers them).
func summaryOf(st *lehrpb.GetZoneStatusResponse) *lehrpb.GetZoneStatusResponse {
	if st == nil {
		return nil
	}
	sum := &lehrpb.GetZoneStatusResponse{Zone: st.GetZone(), Health: st.GetHealth(), Hosts: st.GetHosts(),
		DistributorBuilds: st.GetDistributorBuilds(), AgentBuilds: st.GetAgentBuilds(), CacheQuarantines: st.GetCacheQuarantines()}
	for _, d := range st.GetDistributors() {
		sum.Distributors = append(sum.Distributors, &lehrpb.DistributorStatus{DistributorId: d.GetDistributorId(), Agents: d.GetAgents(),
			DistributorBuild: d.GetDistributorBuild(), AgentBuilds: d.GetAgentBuilds(), CacheQuarantines: d.GetCacheQuarantines()})
	}
	return sum
}

// rank orders zone states, the ones needing attention first.
func rank(state string) int {
	switch state {
	case "silent":
		return 0
	case "reporting":
		return 1
	}
	return 2
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
