package rollout

import (
	"slices"
	"strings"
)

// Whose word a decision rests on (docs/operations.md, "Security model").
// Everything the strategist decides on — hosts that hold a version or not,
// consumers that rejected it, leases that lapsed, canary signals and
// host-level checks — reaches control in distributors' zone reports,
// summed or passed on from their hosts; control cannot check it against
// the hosts themselves. Control files each report under the identity of
// the distributor's certificate (control/service/authz.go), so a decision
// names the distributors whose reports it rests on: a failure or a false
// success is traceable to the distributor that reported it. Pure.

// witnesses is a set of distributors, "zone/id".
type witnesses map[string]bool

// add records the distributor id of zone.
func (w witnesses) add(zone, id string) { w[zone+"/"+id] = true }

// names lists the distributors, "zone/id", sorted.
func (w witnesses) names() []string {
	names := make([]string, 0, len(w))
	for n := range w {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// note says whose word a decision rests on, for its reason and event: ";
// on the word of distributor zone-a/d1", or of several ("distributors
// zone-a/d1, zone-b/d2 and 3 more"); "" for none.
func (w witnesses) note() string {
	if len(w) == 0 {
		return ""
	}
	names := w.names()
	who := "distributor "
	if len(names) > 1 {
		who = "distributors "
	}
	return "; on the word of " + who + nameSome(names, len(names))
}

// orNoHost is what a reason says of hosts it cannot name: a report that
// counts consumers in trouble without naming one of their hosts.
func orNoHost(hosts string) string {
	if strings.TrimSpace(hosts) == "" {
		return "no host named"
	}
	return hosts
}
