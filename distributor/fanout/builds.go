package fanout

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/proto/lehrpb"
)

// Bounds of AgentBuilds: the builds agents announce are their word,
// counted for operators, and must not grow the report.
const (
	// MaxBuilds bounds the builds AgentBuilds reports; the agents of the
	// rarest further builds are counted under OtherBuild.
	MaxBuilds = 64
	// MaxBuildLen bounds a build as counted, in bytes; a longer one is
	// cut (a build string is about 30).
	MaxBuildLen = 64
)

// OtherBuild counts the agents of builds beyond MaxBuilds.
const OtherBuild = "other"

// agentBuild is the build an agent announced (Hello.agent_version) as
// AgentBuilds counts it: buildinfo.Unknown for none, and for the
// placeholder "dev" that every agent sent before builds were announced
// (it knew no more than one that sends nothing); cut to MaxBuildLen bytes
// on a character boundary.
func agentBuild(announced string) string {
	if announced == "" || announced == "dev" {
		return buildinfo.Unknown
	}
	if len(announced) <= MaxBuildLen {
		return announced
	}
	cut := MaxBuildLen
	for cut > 0 && !utf8.RuneStart(announced[cut]) {
		cut--
	}
	return announced[:cut]
}

// AgentBuilds returns how many connected agents announced each build,
// sorted by build: what the distributor reports to control
// (ReportZoneStatusRequest.agent_builds), so that operators see an
// upgrade's progress. At most MaxBuilds entries: beyond them, the agents
// of the rarest builds are summed under OtherBuild.
func (s *Server) AgentBuilds() []*lehrpb.BuildCount {
	m := map[string]int32{}
	for _, ss := range s.sessionList() {
		m[ss.build]++
	}
	out := make([]*lehrpb.BuildCount, 0, len(m))
	for _, b := range slices.Sorted(maps.Keys(m)) {
		out = append(out, &lehrpb.BuildCount{Build: b, Count: m[b]})
	}
	if len(out) <= MaxBuilds {
		return out
	}
	// The most common builds stay; the rest, and any agent that
	// announced OtherBuild itself, are summed.
	slices.SortStableFunc(out, func(a, b *lehrpb.BuildCount) int { return cmp.Compare(b.GetCount(), a.GetCount()) })
	kept := make([]*lehrpb.BuildCount, 0, MaxBuilds)
	other := &lehrpb.BuildCount{Build: OtherBuild}
	for _, c := range out {
		if len(kept) < MaxBuilds-1 && c.GetBuild() != OtherBuild {
			kept = append(kept, c)
		} else {
			other.Count += c.GetCount()
		}
	}
	kept = append(kept, other)
	slices.SortFunc(kept, func(a, b *lehrpb.BuildCount) int { return strings.Compare(a.GetBuild(), b.GetBuild()) })
	return kept
}

// MaxQuarantines bounds the hosts CacheQuarantines lists.
const MaxQuarantines = 100

// CacheQuarantines lists the connected agents that moved an unopenable
// cache aside since they started, as they reported it, the most recent
// first (by host id among equals), at most MaxQuarantines.
func (s *Server) CacheQuarantines() []*lehrpb.CacheQuarantine {
	var out []*lehrpb.CacheQuarantine
	for _, ss := range s.sessionList() {
		ss.mu.Lock()
		q := ss.quarantined
		ss.mu.Unlock()
		if !q.IsZero() {
			out = append(out, &lehrpb.CacheQuarantine{HostId: ss.host, QuarantineTime: timestamppb.New(q)})
		}
	}
	slices.SortFunc(out, func(a, b *lehrpb.CacheQuarantine) int {
		if c := b.GetQuarantineTime().AsTime().Compare(a.GetQuarantineTime().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.GetHostId(), b.GetHostId())
	})
	return out[:min(len(out), MaxQuarantines)]
}
