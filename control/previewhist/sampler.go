// Package previewhist keeps the history of policy experiments' counts:
// how many decisions the hosts counted of each active experiment, and
// how many of them it disagreed with the live policy on, interval by
// interval. Hosts only ever report running totals (since each agent
// started), summed per distributor and configuration pair, and control
// stores only the latest report of each distributor; the history is what
// the leader of the rollout strategist samples of them (Runner, once a
// minute by default) into a bounded record per experiment in etcd
// (store.PutExperimentHistory), which GetPolicyExperimentCounts answers
// with and the console plots.
//
// The Sampler is pure: the experiments and the zones' reports go in, with
// the time; each experiment's sample comes out. The Runner is its I/O,
// run by the strategist's leader (strategist.Options.Leading), as
// control/propagation is: one replica samples at a time.
//
// Imported by control and control/service.
package previewhist

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// Experiment is what the Sampler needs of an experiment.
type Experiment struct {
	Namespace, ID string
	// Revision is the etcd create revision of its record
	// (store.StoredExperiment.CreateRevision): an experiment created again
	// under its id is another.
	Revision int64
	// Etag is the experiment's etag now: only the counts of configuration
	// pairs of this experiment etag are sampled (those a commit's gate
	// counts).
	Etag string
}

// Ref names one incarnation of an experiment.
type Ref struct {
	Namespace, ID string
	Revision      int64
}

// Ref returns e's Ref.
func (e Experiment) Ref() Ref { return Ref{e.Namespace, e.ID, e.Revision} }

// series is one distributor's sum of one configuration pair.
type series struct {
	zone, distributor, live string
}

// counts are a series' running totals, the four a reset shows in.
type counts struct {
	allowAllow, denyDeny, allowDeny, denyAllow uint64
}

func countsOf(c *lehrpb.PreviewCounts) counts {
	return counts{c.GetAllowAllow(), c.GetDenyDeny(), c.GetAllowDeny(), c.GetDenyAllow()}
}

// fell says whether any total of c is below o's: a counter reset.
func (c counts) fell(o counts) bool {
	return c.allowAllow < o.allowAllow || c.denyDeny < o.denyDeny || c.allowDeny < o.allowDeny || c.denyAllow < o.denyAllow
}

func (c counts) decisions() (total, disagree uint64) {
	disagree = c.allowDeny + c.denyAllow
	return c.allowAllow + c.denyDeny + disagree, disagree
}

// state is what the Sampler remembers of an experiment from its
// previous sample.
type state struct {
	at     time.Time
	etag   string
	series map[series]counts
}

// Sampler turns the running totals the distributors report into the
// increase over each interval, per experiment. Not safe for concurrent
// use.
//
// The increase of a series (one distributor's sum of one live etag and
// the experiment's etag) since the previous sample is, as Prometheus's
// rate() has it for a counter:
//
//   - its totals now less those then, when none of them fell;
//   - its totals now, whole, when one fell (a reset: an agent restarted
//     and counts from zero again, or one left the distributor);
//   - its totals now, whole, when it is new at a distributor that
//     reported at the previous sample (what its agents counted since);
//   - nothing when its distributor did not report then (a distributor
//     new, or back after its report lapsed: its totals include what was
//     counted before, which is not this interval's) — it counts from its
//     next sample.
//
// The series is the finest control sees: a sum over a distributor's
// agents. An agent that restarts, or moves to another distributor,
// makes its distributor's sum fall, and the reset rule then counts the
// other agents' totals whole too; an agent that arrives at a distributor
// brings its totals. Such an interval overstates the decisions, and its
// share leans towards the series' share since its agents started. A
// sampled interval is exact when no agent restarted or moved in it.
//
// An experiment's first sample (after it starts previewing, after its
// etag changes, after this Sampler began) is its baseline and yields
// nothing.
type Sampler struct {
	exps map[Ref]*state
	// reported are the distributors ("zone/id") that reported at the
	// previous sample.
	reported map[string]bool
}

// NewSampler returns a Sampler that has seen nothing.
func NewSampler() *Sampler { return &Sampler{exps: map[Ref]*state{}, reported: map[string]bool{}} }

// Sample takes the counts of every active experiment in exps from the
// zones' live reports (by zone, as store.ZoneStatus returns them) at now,
// and returns the sample of each that has a previous one. Experiments
// not in exps (no longer active, or gone) are forgotten: when they are
// active again they start with a baseline.
func (s *Sampler) Sample(exps []Experiment, zones map[string][]*lehrpb.DistributorStatus, now time.Time) map[Ref]*lehrpb.PolicyExperimentSample {
	type nsExp struct{ ns, id string }
	byName := make(map[nsExp]Experiment, len(exps))
	for _, e := range exps {
		byName[nsExp{e.Namespace, e.ID}] = e
	}
	cur := make(map[Ref]map[series]counts, len(exps))
	for _, e := range exps {
		cur[e.Ref()] = map[series]counts{}
	}
	reported := map[string]bool{}
	for zone, sts := range zones {
		for _, d := range sts {
			dk := zone + "/" + d.GetDistributorId()
			reported[dk] = true
			for _, np := range d.GetPreview() {
				for _, hc := range np.GetCounts() {
					e, ok := byName[nsExp{np.GetNamespace(), hc.GetExperiment()}]
					c := hc.GetCounts()
					if !ok || c.GetExperimentEtag() != e.Etag {
						continue
					}
					k := series{zone, d.GetDistributorId(), c.GetLiveEtag()}
					m := cur[e.Ref()]
					sum := m[k]
					add := countsOf(c)
					sum.allowAllow += add.allowAllow
					sum.denyDeny += add.denyDeny
					sum.allowDeny += add.allowDeny
					sum.denyAllow += add.denyAllow
					m[k] = sum
				}
			}
		}
	}
	out := map[Ref]*lehrpb.PolicyExperimentSample{}
	for ref, seen := range cur {
		e := byName[nsExp{ref.Namespace, ref.ID}]
		prev := s.exps[ref]
		if prev != nil && prev.etag == e.Etag {
			var total, disagree uint64
			for k, c := range seen {
				p, had := prev.series[k]
				var inc counts
				switch {
				case had && !c.fell(p):
					inc = counts{c.allowAllow - p.allowAllow, c.denyDeny - p.denyDeny, c.allowDeny - p.allowDeny, c.denyAllow - p.denyAllow}
				case had: // reset
					inc = c
				case s.reported[k.zone+"/"+k.distributor]: // new at a distributor seen
					inc = c
				default: // the distributor's first report: a baseline
				}
				t, d := inc.decisions()
				total += t
				disagree += d
			}
			out[ref] = &lehrpb.PolicyExperimentSample{SampleTime: timestamppb.New(now), Interval: durationpb.New(max(0, now.Sub(prev.at))),
				Evaluations: total, Disagreements: disagree, ExperimentEtag: e.Etag}
		}
		s.exps[ref] = &state{at: now, etag: e.Etag, series: seen}
	}
	for ref := range s.exps {
		if _, ok := cur[ref]; !ok {
			delete(s.exps, ref)
		}
	}
	s.reported = reported
	return out
}
