package rollout

import (
	"slices"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// What a step decides on: the evidence of the zones a rollout reached,
// summed from their distributors' reports. Pure.

// Evidence is what the zones a rollout has reached report about its
// version, summed from their distributors' zone status (Gather): what
// Step decides on. Its parts are the decisions' own; tests build it
// directly.
type Evidence struct {
	applied, pending            int // hosts that hold the version / that should and do not yet
	consumers, rejected, lapsed uint32
	unsampled                   []string // zones whose canary hosts are not named yet
	// silent lists zones that reported once (Zone.last_report_time) and
	// have no live report now: nothing they say can be known, so a stage
	// reaching them never passes (zoneEvidence.silent).
	silent []string
	// stale lists zones where hosts subscribe but no distributor reports
	// the candidate yet: their reports predate the goal.
	stale                       []string
	samples                     map[string][]*lehrpb.CohortSample
	zonesReporting              map[string]int
	rejectingHosts, lapsedHosts []string // "zone/host"
	// The distributors whose reports carried each kind of evidence, named
	// by the decisions taken on it (witness.go): hosts holding the
	// version, hosts behind it, rejections, lapsed leases, signals and
	// host checks; reporters are every distributor of the zones reached.
	heldBy, behindBy, rejectedBy, lapsedBy, signalsBy, reporters witnesses
	// zones is each reached zone's share of applied and pending, in zone
	// order; byZone the same by name.
	zones  []*zoneEvidence
	byZone map[string]*zoneEvidence
}

// Gather sums, for rollout r at its stage of stages, what the
// distributors of every zone the stages so far reach report
// (zoneStatus(zone): their current zone status); lastReport says when
// each zone's distributors last reported (Zone.last_report_time; absent
// for a zone none ever reported in). It reads nothing else; an error is
// zoneStatus's.
func Gather(r *lehrpb.Rollout, stages []Stage, lastReport map[string]time.Time, zoneStatus func(zone string) ([]*lehrpb.DistributorStatus, error)) (Evidence, error) {
	c := upTo(stages, int(r.GetStage()))
	ev := Evidence{samples: map[string][]*lehrpb.CohortSample{}, zonesReporting: map[string]int{}, byZone: map[string]*zoneEvidence{},
		heldBy: witnesses{}, behindBy: witnesses{}, rejectedBy: witnesses{}, lapsedBy: witnesses{}, signalsBy: witnesses{}, reporters: witnesses{}}
	ns, v := r.GetNamespace(), r.GetVersion()
	zones := make([]string, 0, len(c.percent))
	for z := range c.percent {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	for _, z := range zones {
		sts, err := zoneStatus(z)
		if err != nil {
			return ev, err
		}
		ev.zonesReporting[z] = len(sts)
		ze := &zoneEvidence{zone: z, distributors: len(sts), lastReport: lastReport[z]}
		for _, d := range sts {
			ze.agents += int(d.GetAgents())
		}
		ev.zones, ev.byZone[z] = append(ev.zones, ze), ze
		if ze.silent() {
			ev.silent = append(ev.silent, z)
		}
		whole := c.percent[z] >= 100
		if _, named := canaryHosts(r, z); c.hosts[z] > 0 && !named && !whole {
			ev.unsampled = append(ev.unsampled, z)
		}
		subscribed, knows := 0, false
		for _, d := range sts {
			for _, vc := range d.GetVersions() {
				if vc.GetNamespace() == ns {
					subscribed += int(vc.GetAgents())
				}
			}
			for _, h := range d.GetHealth() {
				if h.GetNamespace() == ns && h.GetCandidate() == v {
					knows = true
				}
			}
		}
		named, isNamed := canaryHosts(r, z)
		byHost := c.percent[z] == 0 && isNamed // a canary of named hosts only
		if !whole && !byHost && subscribed > 0 && !knows {
			ev.stale = append(ev.stale, z)
		}
		if byHost {
			// Exactly the named hosts: each must report holding v; one
			// not reporting yet is pending.
			held, by := map[string]uint64{}, map[string]string{}
			for _, d := range sts {
				for _, hr := range d.GetHosts() {
					if hr.GetReport().GetNamespace() == ns && hr.GetReport().GetVersion() >= held[hr.GetHostId()] {
						held[hr.GetHostId()], by[hr.GetHostId()] = hr.GetReport().GetVersion(), d.GetDistributorId()
					}
				}
			}
			for _, h := range named {
				if held[h] >= v {
					ze.applied++
					ev.heldBy.add(z, by[h])
				} else {
					ze.pending++
					ze.pendingHosts = append(ze.pendingHosts, h)
					if by[h] != "" {
						ev.behindBy.add(z, by[h])
					}
				}
			}
		}
		for _, d := range sts {
			ev.reporters.add(z, d.GetDistributorId())
			switch {
			case byHost:
			case whole:
				for _, vc := range d.GetVersions() {
					if vc.GetNamespace() != ns || vc.GetAgents() <= 0 {
						continue
					}
					if vc.GetVersion() >= v {
						ze.applied += int(vc.GetAgents())
						ev.heldBy.add(z, d.GetDistributorId())
					} else {
						ze.pending += int(vc.GetAgents())
						ev.behindBy.add(z, d.GetDistributorId())
					}
				}
				ze.pendingHosts = append(ze.pendingHosts, behind(d, ns, v, false)...)
			default:
				for _, h := range d.GetHealth() {
					if h.GetNamespace() != ns || !h.GetCohort() || h.GetCandidate() != v || h.GetAgents() <= 0 {
						continue
					}
					if h.GetVersion() >= v {
						ze.applied += int(h.GetAgents())
						ev.heldBy.add(z, d.GetDistributorId())
					} else {
						ze.pending += int(h.GetAgents())
						ev.behindBy.add(z, d.GetDistributorId())
					}
				}
				ze.pendingHosts = append(ze.pendingHosts, behind(d, ns, v, true)...)
			}
			for _, h := range d.GetHealth() {
				if h.GetNamespace() == ns && h.GetVersion() == v {
					ev.consumers += h.GetConsumers()
					ev.rejected += h.GetConsumersRejected()
					ev.lapsed += h.GetLeasesExpired()
					if h.GetConsumersRejected() > 0 {
						ev.rejectedBy.add(z, d.GetDistributorId())
					}
					if h.GetLeasesExpired() > 0 {
						ev.lapsedBy.add(z, d.GetDistributorId())
					}
				}
			}
			for _, h := range d.GetSignals() {
				if h.GetSignals().GetNamespace() == ns {
					ev.signalsBy.add(z, d.GetDistributorId())
				}
			}
			for _, hr := range d.GetHosts() {
				rep := hr.GetReport()
				if rep.GetNamespace() != ns || rep.GetVersion() != v {
					continue
				}
				if rep.GetHostChecks().GetVersion() == v {
					ev.signalsBy.add(z, d.GetDistributorId())
				}
				if rep.GetClientsRejected() > 0 {
					ev.rejectingHosts = append(ev.rejectingHosts, z+"/"+hr.GetHostId())
				}
				if rep.GetLeasesExpired() > 0 {
					ev.lapsedHosts = append(ev.lapsedHosts, z+"/"+hr.GetHostId())
				}
			}
			for _, smp := range d.GetSamples() {
				if smp.GetNamespace() == ns && smp.GetSalt() == r.GetSalt() {
					ev.samples[z] = append(ev.samples[z], smp)
				}
			}
		}
		ze.pendingHosts = sortedUnique(ze.pendingHosts)
		ev.applied += ze.applied
		ev.pending += ze.pending
	}
	ev.rejectingHosts, ev.lapsedHosts = sortedUnique(ev.rejectingHosts), sortedUnique(ev.lapsedHosts)
	return ev, nil
}

// behind returns the hosts d names as not holding version v of ns yet
// (those in the candidate's cohort only, if cohort).
func behind(d *lehrpb.DistributorStatus, ns string, v uint64, cohort bool) []string {
	var out []string
	for _, hr := range d.GetHosts() {
		if rep := hr.GetReport(); rep.GetNamespace() == ns && rep.GetVersion() < v && (!cohort || hr.GetCohort()) {
			out = append(out, hr.GetHostId())
		}
	}
	return out
}
