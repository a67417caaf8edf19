// Package signals holds the one format hosts use to carry their
// per-interval signals upward (lehrpb.NamespaceSignals: aligned intervals,
// the version held in each, one series per metric): what a valid one is,
// how two pieces merge, and how they become the input of a canary
// judgement. The agent builds them, the wire checks them, the distributor
// merges them, control judges them.
//
// A leaf. Imported by internal/wire, distributor/fanout, control/service,
// control/rollout (which passes the agents the checks they can judge),
// control/evaluation, agent, agent/upstream and agent/agenttest.
package signals

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// Validate checks that s has a positive interval, a start aligned to it,
// named series and every series as long as its versions. The error names
// the field under prefix (e.g. "namespaces[0]").
func Validate(prefix string, s *lehrpb.NamespaceSignals) error {
	iv := int64(s.GetIntervalSeconds())
	if iv <= 0 {
		return fmt.Errorf("%s.interval_seconds: 0; want at least 1", prefix)
	}
	if s.GetFirst()%iv != 0 {
		return fmt.Errorf("%s.first: %d is not a multiple of interval_seconds %d", prefix, s.GetFirst(), iv)
	}
	n := len(s.GetVersions())
	for j, sr := range s.GetSeries() {
		if sr.GetName() == "" {
			return fmt.Errorf("%s.series[%d].name: empty", prefix, j)
		}
		if len(sr.GetValues()) != n {
			return fmt.Errorf("%s.series[%d] (%s): %d values for %d intervals", prefix, j, sr.GetName(), len(sr.GetValues()), n)
		}
	}
	return nil
}

// End returns the start of the interval after the last of s.
func End(s *lehrpb.NamespaceSignals) int64 {
	return s.GetFirst() + int64(len(s.GetVersions()))*int64(s.GetIntervalSeconds())
}

// Merge returns old with the intervals of add laid over it (add wins where
// both have an interval; a gap between them is NaN with version 0),
// keeping the newest limit intervals. An old of another interval length is
// replaced. Neither argument is modified.
func Merge(old, add *lehrpb.NamespaceSignals, limit int) *lehrpb.NamespaceSignals {
	if old == nil || old.GetIntervalSeconds() != add.GetIntervalSeconds() || len(old.GetVersions()) == 0 {
		return Trim(proto.CloneOf(add), limit)
	}
	if len(add.GetVersions()) == 0 {
		return proto.CloneOf(old)
	}
	iv := int64(add.GetIntervalSeconds())
	first, last := min(old.GetFirst(), add.GetFirst()), max(End(old), End(add))
	n := int((last - first) / iv)
	out := &lehrpb.NamespaceSignals{Namespace: add.GetNamespace(), IntervalSeconds: add.GetIntervalSeconds(), First: first, Versions: make([]uint64, n)}
	series := map[string][]float64{}
	var names []string
	for _, src := range []*lehrpb.NamespaceSignals{old, add} {
		off := int((src.GetFirst() - first) / iv)
		copy(out.Versions[off:], src.GetVersions())
		for _, sr := range src.GetSeries() {
			vals, ok := series[sr.GetName()]
			if !ok {
				vals = make([]float64, n)
				for i := range vals {
					vals[i] = math.NaN()
				}
				series[sr.GetName()] = vals
				names = append(names, sr.GetName())
			}
			copy(vals[off:], sr.GetValues())
		}
	}
	for _, name := range names {
		out.Series = append(out.Series, &lehrpb.SignalSeries{Name: name, Values: series[name]})
	}
	return Trim(out, limit)
}

// Trim keeps the newest limit intervals of s, in place, and returns it.
func Trim(s *lehrpb.NamespaceSignals, limit int) *lehrpb.NamespaceSignals {
	drop := len(s.GetVersions()) - limit
	if drop <= 0 {
		return s
	}
	s.First += int64(drop) * int64(s.GetIntervalSeconds())
	s.Versions = s.Versions[drop:]
	for _, sr := range s.Series {
		sr.Values = sr.Values[drop:]
	}
	return s
}

// Answer builds an agent's answer to req: for each namespace asked for
// that get knows (get returns nil otherwise), its intervals from the one
// asked for on. get is called once per namespace asked for. The answer's encoding stays within maxBytes: while it is
// larger, every namespace loses the older half of its intervals. get's
// results may be modified.
func Answer(req *lehrpb.SignalsRequest, get func(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals, maxBytes int) *lehrpb.Signals {
	out := &lehrpb.Signals{}
	for _, w := range req.GetNamespaces() {
		s := get(w)
		if s == nil {
			continue
		}
		if iv := int64(s.GetIntervalSeconds()); iv > 0 && w.GetSince() > s.GetFirst() {
			skip := int((w.GetSince() - s.GetFirst() + iv - 1) / iv)
			Trim(s, max(0, len(s.GetVersions())-skip))
		}
		out.Namespaces = append(out.Namespaces, s)
	}
	for proto.Size(out) > maxBytes {
		shrunk := false
		for _, s := range out.Namespaces {
			if n := len(s.GetVersions()); n > 0 {
				Trim(s, n/2)
				shrunk = true
			}
		}
		if !shrunk {
			break
		}
	}
	return out
}
