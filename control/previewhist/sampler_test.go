package previewhist

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// rep is one distributor's report of one pair of experiment x of
// shop/fw: "zone/distributor live→exp aa dd ad da".
type rep struct {
	zone, dist, live, exp string
	aa, dd, ad, da        uint64
}

func zonesOf(reps []rep) map[string][]*lehrpb.DistributorStatus {
	z := map[string][]*lehrpb.DistributorStatus{}
	find := func(zone, id string) *lehrpb.DistributorStatus {
		for _, d := range z[zone] {
			if d.GetDistributorId() == id {
				return d
			}
		}
		d := &lehrpb.DistributorStatus{DistributorId: id, Preview: []*lehrpb.NamespacePreviewCounts{{Namespace: "shop/fw"}}}
		z[zone] = append(z[zone], d)
		return d
	}
	for _, r := range reps {
		d := find(r.zone, r.dist)
		if r.exp == "" {
			continue // a distributor reporting nothing of x
		}
		d.Preview[0].Counts = append(d.Preview[0].Counts, &lehrpb.HostPreviewCounts{Experiment: "x", Counts: &lehrpb.PreviewCounts{
			LiveEtag: r.live, ExperimentEtag: r.exp, AllowAllow: r.aa, DenyDeny: r.dd, AllowDeny: r.ad, DenyAllow: r.da}})
	}
	return z
}

// The Sampler, step by step on a fake clock a minute apart: each step
// the experiment's etag ("": not active), the reports, and the sample
// wanted ("-": none) as "evaluations/disagreements".
func TestSampler(t *testing.T) {
	type step struct {
		etag string
		reps []rep
		want string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first sample is a baseline, then increases", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 5, 2, 1}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 20, 5, 4, 1}}, "12/2"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 20, 5, 4, 1}}, "0/0"},
		}},
		{"nothing counted yet: zero samples", []step{
			{"e1", nil, "-"},
			{"e1", []rep{{"a", "d1", "", "", 0, 0, 0, 0}}, "0/0"},
			// A pair new at a distributor that reported before: all of
			// it is this interval's.
			{"e1", []rep{{"a", "d1", "v1", "e1", 3, 1, 1, 0}}, "5/1"},
		}},
		{"an agent restarts: its distributor's totals fall, counted whole", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 100, 50, 10, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 110, 50, 12, 0}}, "12/2"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 7, 2, 1, 0}}, "10/1"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 9, 2, 1, 1}}, "3/1"},
		}},
		{"one counter falling is a reset", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 100, 50, 10, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 200, 60, 9, 0}}, "269/9"},
		}},
		{"series of two zones and two live etags add up", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}, {"b", "d1", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 15, 0, 1, 0}, {"b", "d1", "v1", "e1", 12, 0, 0, 0}, {"b", "d1", "v2", "e1", 4, 0, 0, 2}}, "14/3"},
		}},
		{"pairs of another experiment etag are not counted", []step{
			{"e2", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"e2", []rep{{"a", "d1", "v1", "e1", 50, 0, 9, 0}, {"a", "d1", "v1", "e2", 1, 0, 1, 0}}, "2/1"},
		}},
		{"a new distributor's first report is a baseline", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}, {"a", "d2", "v1", "e1", 500, 0, 50, 0}}, "2/0"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 13, 0, 0, 0}, {"a", "d2", "v1", "e1", 510, 0, 52, 0}}, "13/2"},
		}},
		{"a distributor back after its report lapsed is a baseline", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}, {"a", "d2", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 11, 0, 0, 0}}, "1/0"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}, {"a", "d2", "v1", "e1", 90, 0, 0, 0}}, "1/0"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}, {"a", "d2", "v1", "e1", 95, 0, 1, 0}}, "6/1"},
		}},
		{"an agent moves between distributors", []step{
			// d1 has two agents, 60 and 40; the 40 moves to d2.
			{"e1", []rep{{"a", "d1", "v1", "e1", 100, 0, 0, 0}, {"a", "d2", "v1", "e1", 0, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 61, 0, 0, 0}, {"a", "d2", "v1", "e1", 41, 0, 0, 0}}, "102/0"},
		}},
		{"a new etag starts again with a baseline", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}}, "2/0"},
			{"e2", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}, {"a", "d1", "v1", "e2", 5, 0, 5, 0}}, "-"},
			{"e2", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}, {"a", "d1", "v1", "e2", 9, 0, 6, 0}}, "5/1"},
		}},
		{"suspended and previewed again: a baseline", []step{
			{"e1", []rep{{"a", "d1", "v1", "e1", 10, 0, 0, 0}}, "-"},
			{"", []rep{{"a", "d1", "v1", "e1", 12, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 20, 0, 0, 0}}, "-"},
			{"e1", []rep{{"a", "d1", "v1", "e1", 21, 0, 0, 0}}, "1/0"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSampler()
			t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			ref := Ref{"shop/fw", "x", 7}
			for i, st := range tc.steps {
				var exps []Experiment
				if st.etag != "" {
					exps = []Experiment{{Namespace: "shop/fw", ID: "x", Revision: 7, Etag: st.etag}}
				}
				now := t0.Add(time.Duration(i) * time.Minute)
				got := s.Sample(exps, zonesOf(st.reps), now)
				smp, ok := got[ref]
				if st.want == "-" {
					if ok || len(got) > 0 {
						t.Errorf("step %d: sample %v; want none", i, got)
					}
					continue
				}
				if !ok {
					t.Fatalf("step %d: no sample; want %s", i, st.want)
				}
				if smp.GetExperimentEtag() != st.etag {
					t.Errorf("step %d: sample of etag %q; want %q", i, smp.GetExperimentEtag(), st.etag)
				}
				if g := fmt.Sprintf("%d/%d", smp.GetEvaluations(), smp.GetDisagreements()); g != st.want {
					t.Errorf("step %d: sample %s; want %s", i, g, st.want)
				}
				if !smp.GetSampleTime().AsTime().Equal(now) || smp.GetInterval().AsDuration() != time.Minute {
					t.Errorf("step %d: sample at %v over %v; want %v over a minute", i, smp.GetSampleTime().AsTime(), smp.GetInterval().AsDuration(), now)
				}
			}
		})
	}
}

// Two experiments sampled together, one of another namespace, and an
// experiment created again under its id (another revision) starts anew.
func TestSamplerExperiments(t *testing.T) {
	s := NewSampler()
	t0 := time.Unix(1_800_000_000, 0)
	z := func(n uint64) map[string][]*lehrpb.DistributorStatus {
		return map[string][]*lehrpb.DistributorStatus{"a": {{DistributorId: "d1", Preview: []*lehrpb.NamespacePreviewCounts{
			{Namespace: "shop/fw", Counts: []*lehrpb.HostPreviewCounts{{Experiment: "x", Counts: &lehrpb.PreviewCounts{ExperimentEtag: "e", AllowAllow: n}}}},
			{Namespace: "web/fw", Counts: []*lehrpb.HostPreviewCounts{{Experiment: "x", Counts: &lehrpb.PreviewCounts{ExperimentEtag: "e", DenyAllow: 2 * n}}}},
		}}}}
	}
	a, b := Experiment{"shop/fw", "x", 1, "e"}, Experiment{"web/fw", "x", 2, "e"}
	s.Sample([]Experiment{a, b}, z(1), t0)
	got := s.Sample([]Experiment{a, b}, z(4), t0.Add(time.Minute))
	if g, w := got[a.Ref()].GetEvaluations(), uint64(3); g != w {
		t.Errorf("shop/fw: %d evaluations, want %d", g, w)
	}
	if g, w := got[b.Ref()].GetDisagreements(), uint64(6); g != w {
		t.Errorf("web/fw: %d disagreements, want %d", g, w)
	}
	a2 := Experiment{"shop/fw", "x", 9, "e"}
	if got := s.Sample([]Experiment{a2, b}, z(5), t0.Add(2*time.Minute)); got[a2.Ref()] != nil || got[b.Ref()] == nil {
		t.Errorf("after shop/fw/x was created again: %v; want web/fw's sample only", got)
	}
}

// Append keeps at most MaxSamples, and MaxBytes encoded, dropping the
// oldest, and starts afresh for another revision.
func TestAppend(t *testing.T) {
	smp := func(i int, big bool) *lehrpb.PolicyExperimentSample {
		n := uint64(i)
		if big {
			n = 1<<63 + uint64(i) // 10-byte varints
		}
		return &lehrpb.PolicyExperimentSample{SampleTime: timestamppb.New(time.Unix(1_800_000_000+int64(i)*60, 123456789)),
			Interval: durationpb.New(time.Minute + 7*time.Nanosecond), Evaluations: n, Disagreements: n}
	}
	// filled is a record of samples from..to-1, as Append leaves it
	// (built at once: appending them one by one costs a copy each).
	filled := func(from, to int, big bool) *lehrpb.PolicyExperimentHistoryRecord {
		rec := &lehrpb.PolicyExperimentHistoryRecord{ExperimentRevision: 3}
		for i := from; i < to; i++ {
			rec.Samples = append(rec.Samples, smp(i, big))
		}
		return rec
	}
	rec := filled(0, MaxSamples, false)
	for i := MaxSamples; i < MaxSamples+10; i++ {
		rec = Append(rec, 3, smp(i, false))
	}
	if n := len(rec.GetSamples()); n != MaxSamples || rec.GetSamples()[0].GetEvaluations() != 10 {
		t.Errorf("after %d samples: %d kept, the oldest %d; want %d from 10", MaxSamples+10, n, rec.GetSamples()[0].GetEvaluations(), MaxSamples)
	}
	small := proto.Size(rec)
	if small > MaxBytes {
		t.Errorf("%d samples of small counts take %d bytes; the bound is %d", MaxSamples, small, MaxBytes)
	}
	// Samples of 10-byte counts: the byte bound binds, dropping no more
	// of the oldest than it must.
	big := filled(0, MaxSamples-1, true)
	if proto.Size(big) <= MaxBytes {
		t.Fatalf("%d big samples take %d bytes: not beyond the bound", MaxSamples-1, proto.Size(big))
	}
	rec = Append(big, 3, smp(MaxSamples, true))
	n := len(rec.GetSamples())
	if size := proto.Size(rec); size > MaxBytes || n >= MaxSamples {
		t.Fatalf("big samples: %d kept in %d bytes; want fewer than %d, within %d bytes", n, size, MaxSamples, MaxBytes)
	}
	first := int(rec.GetSamples()[0].GetEvaluations() - 1<<63)
	if one := (&lehrpb.PolicyExperimentHistoryRecord{ExperimentRevision: 3, Samples: append([]*lehrpb.PolicyExperimentSample{smp(first-1, true)}, rec.GetSamples()...)}); proto.Size(one) <= MaxBytes {
		t.Errorf("big samples: %d kept from sample %d, but one more (%d bytes) fits in %d", n, first, proto.Size(one), MaxBytes)
	}
	if len(big.GetSamples()) != MaxSamples-1 || big.GetSamples()[0].GetEvaluations() != 1<<63 {
		t.Errorf("Append changed the record it was given")
	}
	if got := Append(rec, 4, smp(1, false)); len(got.GetSamples()) != 1 || got.GetExperimentRevision() != 4 {
		t.Errorf("another revision: %d samples of revision %d; want 1 of 4", len(got.GetSamples()), got.GetExperimentRevision())
	}
	t.Logf("a day of minute samples of small counts: %d bytes; %d samples of 10-byte counts fit in %d", small, n, MaxBytes)
}

// A record names a sample's etag only where it changes, the first
// sample's always, also after the oldest are trimmed; Expand names every
// one.
func TestAppendEtags(t *testing.T) {
	etags := []string{"e1", "e1", "e2", "e2", "e2", "e1"}
	var rec *lehrpb.PolicyExperimentHistoryRecord
	for i, e := range etags {
		rec = Append(rec, 1, &lehrpb.PolicyExperimentSample{Evaluations: uint64(i), ExperimentEtag: e})
	}
	var stored, expanded []string
	for _, s := range rec.GetSamples() {
		stored = append(stored, s.GetExperimentEtag())
	}
	for _, s := range Expand(rec) {
		expanded = append(expanded, s.GetExperimentEtag())
	}
	if got, want := fmt.Sprint(stored), "[e1  e2   e1]"; got != want {
		t.Errorf("stored etags %s; want %s", got, want)
	}
	if got, want := fmt.Sprint(expanded), fmt.Sprint(etags); got != want {
		t.Errorf("expanded etags %s; want %s", got, want)
	}
	// Trimmed to MaxSamples: the first kept names its etag. (The
	// samples after the sixth are put in at once, as Append would leave
	// them: none names e1, the etag already in effect.)
	for i := range MaxSamples - 3 {
		rec.Samples = append(rec.Samples, &lehrpb.PolicyExperimentSample{Evaluations: uint64(100 + i)})
	}
	rec = Append(rec, 1, &lehrpb.PolicyExperimentSample{Evaluations: 99, ExperimentEtag: "e1"})
	if first := rec.GetSamples()[0]; len(rec.GetSamples()) != MaxSamples || first.GetEvaluations() != 4 || first.GetExperimentEtag() != "e2" {
		t.Errorf("after trimming: %d samples, the first %v; want %d, the first of evaluations 4 naming e2", len(rec.GetSamples()), first, MaxSamples)
	}
	if e := Expand(rec); e[1].GetExperimentEtag() != "e1" || e[len(e)-1].GetExperimentEtag() != "e1" {
		t.Errorf("expanded after trimming: %v, …, %v", e[1], e[len(e)-1])
	}
}
