package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// What a rollout says about the zones it reaches: which ones it skips,
// and, in every reason that waits or fails, the zones and hosts it is
// about. Pure; the strategist fills zoneEvidence from the distributors'
// reports (gather).

// maxNamed bounds the hosts per zone, and the zones, a reason names; the
// rest are counted.
const maxNamed = 5

// zoneEvidence is what one zone's distributors report about the hosts the
// rollout's stages so far reach there.
type zoneEvidence struct {
	zone string
	// distributors with a live report, and the hosts they serve (every
	// host, subscribed to the namespace or not).
	distributors, agents int
	// applied and pending count the hosts that hold the version and those
	// that should and do not yet; pendingHosts names some of the latter,
	// by host id (sorted; a distributor names a few per namespace).
	applied, pending int
	pendingHosts     []string
	// lastReport is when the zone's distributors last reported, to a
	// minute (Zone.last_report_time); zero if none ever did.
	lastReport time.Time
}

// empty says why the zone has nothing a stage could wait for — no
// distributor has ever reported for it, or its distributors serve no
// hosts — or "" if it has hosts, or may have: a silent zone. A stage
// skips an empty zone; its goal still moves, so a distributor that comes
// later serves what the rollout gave the zone.
func (z *zoneEvidence) empty() string {
	switch {
	case z.silent():
		return ""
	case z == nil || z.distributors == 0:
		return "no distributor has reported for it"
	case z.agents == 0:
		return "its distributors serve no hosts"
	}
	return ""
}

// silent reports whether the zone's distributors reported once and have
// no live report now (they stopped, or cannot reach control): its hosts
// may hold anything, so absence of reports is no evidence — a stage
// reaching it waits, and never passes or succeeds on its account.
func (z *zoneEvidence) silent() bool {
	return z != nil && z.distributors == 0 && !z.lastReport.IsZero()
}

// silence describes the silent zones among zs for a reason: "no live
// report from zone-b (last around 10:03 UTC)".
func silence(byZone map[string]*zoneEvidence, zs []string) string {
	parts := make([]string, 0, min(len(zs), maxNamed))
	for _, z := range zs[:min(len(zs), maxNamed)] {
		parts = append(parts, fmt.Sprintf("%s (last around %s)", z, byZone[z].lastReport.UTC().Format("15:04 MST Jan 2")))
	}
	s := "no live report from " + strings.Join(parts, ", ")
	if n := len(zs) - maxNamed; n > 0 {
		s += fmt.Sprintf(" and %d more zone(s)", n)
	}
	return s
}

// EmptyZoneWait bounds how long a canary stage waits for a zone without
// distributor reports before it skips the zone: a distributor report's
// lifetime at the default interval (three of 10 s), so a zone whose
// distributors are restarting is not passed over. emptyZoneWait caps it at
// half the stage's apply deadline, so the skip comes well before the
// deadline would fail the stage.
const EmptyZoneWait = 30 * time.Second

func emptyZoneWait(st Stage) time.Duration { return min(EmptyZoneWait, st.ApplyDeadline/2) }

// unreported notes, for a reason that waits for zones' canary samples,
// the zones among them without distributor reports and when the stage
// skips them: "; zone-b has no distributor reports: skipped at 15:04:05
// UTC unless one reports". "" when every zone has reports.
func unreported(zones []string, reporting map[string]int, at time.Time) string {
	var none []string
	for _, z := range zones {
		if reporting[z] == 0 {
			none = append(none, z)
		}
	}
	if len(none) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s: no distributor reports, skipped at %s unless one reports", strings.Join(none, ", "), at.UTC().Format(time.TimeOnly+" MST"))
}

// describe says how many hosts of the zone hold version v and names the
// pending ones: "zone b: 0 of 2 hosts hold version 2 (pending: b/h1,
// b/h2)".
func (z *zoneEvidence) describe(v uint64) string {
	s := fmt.Sprintf("zone %s: %d of %d host(s) hold version %d", z.zone, z.applied, z.applied+z.pending, v)
	switch {
	case z.pending == 0:
	case len(z.pendingHosts) == 0:
		s += fmt.Sprintf(" (%d pending, not named in its distributors' reports yet)", z.pending)
	default:
		named := make([]string, len(z.pendingHosts))
		for i, h := range z.pendingHosts {
			named[i] = z.zone + "/" + h
		}
		s += " (pending: " + nameSome(named, max(z.pending, len(named))) + ")"
	}
	return s
}

// describeZones names the zones a stage waits for, or failed on: those
// with pending hosts, or if none, those whose hosts hold the version.
// Joined by "; ", at most maxNamed zones, then a count. "" when no zone
// has a host the stage reaches.
func describeZones(zones []*zoneEvidence, v uint64) string {
	var with []*zoneEvidence
	for _, z := range zones {
		if z.pending > 0 {
			with = append(with, z)
		}
	}
	if len(with) == 0 {
		for _, z := range zones {
			if z.applied > 0 {
				with = append(with, z)
			}
		}
	}
	var parts []string
	for _, z := range with[:min(len(with), maxNamed)] {
		parts = append(parts, z.describe(v))
	}
	if n := len(with) - maxNamed; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more zone(s)", n))
	}
	return strings.Join(parts, "; ")
}

// skippedZones lists, for a "skipped" event, the zones among targets that
// have nothing to wait for ("zone b: no distributor has reported for it"), in
// order; nil when there are none.
func skippedZones(zones map[string]*zoneEvidence, targets []string) []string {
	var out []string
	for _, t := range targets {
		if why := zones[t].empty(); why != "" {
			out = append(out, fmt.Sprintf("zone %s: %s", t, why))
		}
	}
	return out
}

// wholeOrShare lists the zones st moves whole or a share of, not by
// canary hosts (a zone whose canary hosts are named is skipped when they
// are: the strategist's Select).
func wholeOrShare(st Stage) []string {
	var out []string
	for _, t := range st.Targets {
		if t.Hosts == 0 {
			out = append(out, t.Zone)
		}
	}
	return out
}

// canaryNote names the rollout's canary hosts, zone by zone, for a
// reason about them: " (canary hosts: a/h1, b/h4)"; "" before any are
// named.
func canaryNote(r *lehrpb.Rollout) string {
	var names []string
	for _, zh := range r.GetCanaryHosts() {
		for _, h := range zh.GetHosts() {
			names = append(names, zh.GetZone()+"/"+h)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (canary hosts: " + nameSome(names, len(names)) + ")"
}

// nameSome joins the first maxNamed of names, then counts the rest of
// total: "a/h1, a/h2 and 3 more".
func nameSome(names []string, total int) string {
	s := strings.Join(names[:min(len(names), maxNamed)], ", ")
	if n := total - min(len(names), maxNamed); n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

// sortedUnique sorts names and drops repeats.
func sortedUnique(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}
