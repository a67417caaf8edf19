package rollout

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// Default is the built-in policy of a domain that set none: one canary
// host per zone baking 10 minutes, then the first zone (in name order)
// baking 30 minutes, then every other zone.
func Default() *lehrpb.RolloutPolicy {
	return &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
			Bake: durationpb.New(10 * time.Minute)},
		{Name: "first zone", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Count: 1}},
			Bake: durationpb.New(30 * time.Minute)},
		{Name: "rest", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}},
	}}
}

// Fast is Default with bakes of seconds, for "lehr dev" and demos (whose
// agents keep signals of 1 s intervals, so an 8 s canary bake gives the
// canary analysis 8 intervals to judge).
func Fast() *lehrpb.RolloutPolicy {
	p := Default()
	p.Stages[0].Bake = durationpb.New(8 * time.Second)
	p.Stages[1].Bake = durationpb.New(5 * time.Second)
	return p
}

// GlobalBlast moves every zone at once: for emergencies only.
func GlobalBlast() *lehrpb.RolloutPolicy { return &lehrpb.RolloutPolicy{GlobalBlast: true} }

// Names of the stages Resolve adds. Parentheses keep them apart from the
// names a policy may give its stages.
const (
	RestStage        = "(remaining zones)"
	GlobalBlastStage = "(global blast)"
)

// Target is what one stage moves in one zone: a count of canary hosts, or
// a percentage of the zone's hosts (100: the whole zone).
type Target struct {
	Zone    string
	Hosts   int     // canary hosts; 0 when Percent is used
	Percent float64 // of the zone's hosts; 0 when Hosts is used
}

// Stage is a policy stage resolved against the fleet's zones.
type Stage struct {
	Name   string
	Canary bool
	// Targets in zone name order. A zone a stage does not name keeps what
	// earlier stages moved.
	Targets         []Target
	Bake            time.Duration
	ApplyDeadline   time.Duration
	MinHostsApplied int
	MaxErrorRatio   float64
	// Analysis is the canary analysis of a canary stage (nil for a zones
	// stage, or when the policy turned it off).
	Analysis *lehrpb.CanaryAnalysis
}

// Resolve turns a valid policy into its stages against zones, in order.
// Zones no stage reaches whole are reached by a final stage named
// RestStage (no bake), so every zone ends at the new version. A global-blast policy is
// one stage moving every zone.
func Resolve(p *lehrpb.RolloutPolicy, zones []string) []Stage {
	zones = slices.Sorted(slices.Values(zones))
	reached := map[string]float64{}
	var out []Stage
	for i, st := range p.GetStages() {
		s := Stage{
			Name:            stageName(i, st),
			Bake:            st.GetBake().AsDuration(),
			ApplyDeadline:   st.GetApplyDeadline().AsDuration(),
			MinHostsApplied: int(st.GetMinHostsApplied()),
			MaxErrorRatio:   st.GetMaxErrorRatio(),
		}
		if s.ApplyDeadline == 0 {
			s.ApplyDeadline = DefaultApplyDeadline
		}
		switch t := st.GetTarget().(type) {
		case *lehrpb.RolloutStage_Canary:
			s.Canary = true
			if a := st.GetAnalysis(); !a.GetDisabled() {
				s.Analysis = a
				if a == nil {
					s.Analysis = &lehrpb.CanaryAnalysis{}
				}
			}
			if s.MinHostsApplied == 0 {
				s.MinHostsApplied = 1
			}
			in := t.Canary.GetZones()
			if len(in) == 0 {
				in = zones
			}
			for _, z := range sortedCopy(in) {
				s.Targets = append(s.Targets, Target{Zone: z, Hosts: int(t.Canary.GetHosts()), Percent: t.Canary.GetPercent()})
			}
		case *lehrpb.RolloutStage_Zones:
			pct := t.Zones.GetPercent()
			if pct == 0 {
				pct = 100
			}
			var in []string
			if len(t.Zones.GetZones()) > 0 {
				in = sortedCopy(t.Zones.GetZones())
			} else {
				for _, z := range zones {
					if reached[z] < 100 {
						in = append(in, z)
					}
				}
				if n := int(t.Zones.GetCount()); n > 0 && n < len(in) {
					in = in[:n]
				}
			}
			for _, z := range in {
				reached[z] = max(reached[z], pct)
				s.Targets = append(s.Targets, Target{Zone: z, Percent: pct})
			}
		}
		out = append(out, s)
	}
	var rest []Target
	for _, z := range zones {
		if reached[z] < 100 {
			rest = append(rest, Target{Zone: z, Percent: 100})
		}
	}
	if len(rest) > 0 {
		name := RestStage
		if p.GetGlobalBlast() {
			name = GlobalBlastStage
		}
		out = append(out, Stage{Name: name, Targets: rest, ApplyDeadline: DefaultApplyDeadline})
	}
	return out
}

func sortedCopy(in []string) []string { return slices.Sorted(slices.Values(in)) }
