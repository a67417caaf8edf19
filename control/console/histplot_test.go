package console

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// A day of minute samples is drawn as 240 points of six samples each,
// summed, never across a change of etag; a history without decisions
// draws nothing; a gap between samples breaks the line, and so does a
// new etag, which is marked.
func TestPlotHistory(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	smp := func(i int, ev, dis uint64, etag string) *lehrpb.PolicyExperimentSample {
		return &lehrpb.PolicyExperimentSample{SampleTime: timestamppb.New(t0.Add(time.Duration(i+1) * time.Minute)), Interval: durationpb.New(time.Minute),
			Evaluations: ev, Disagreements: dis, ExperimentEtag: etag}
	}
	var day []*lehrpb.PolicyExperimentSample
	for i := range 1440 {
		day = append(day, smp(i, 100, uint64(i%6), "e1"))
	}
	pts := histBuckets(day)
	if len(pts) != 240 {
		t.Fatalf("a day of samples: %d points, want 240", len(pts))
	}
	if p := pts[1]; p.Samples != 6 || p.Evaluations != 600 || p.Disagreements != 15 || !p.From.Equal(t0.Add(6*time.Minute)) || !p.To.Equal(t0.Add(12*time.Minute)) {
		t.Errorf("the second point: %+v; want samples 7 to 12 summed, 15 of 600 from 00:06 to 00:12", p)
	}
	p := plotHistory(day, "e1", 0.5)
	if p == nil || len(p.Points) != 240 || len(p.Lines) != 1 || p.Gate == nil || len(p.Etags) != 0 || p.Stale {
		t.Fatalf("the day's plot: %+v; want 240 points on one line, the gate, no etag change", p)
	}
	if p.Gate.Y1 <= p.Top || p.Gate.Y1 >= p.Bottom || p.Points[0].Y <= p.Gate.Y1 {
		t.Errorf("the gate at 50%% drawn at y %v (plot from %v to %v), a point of 2.5%% at %v", p.Gate.Y1, p.Top, p.Bottom, p.Points[0].Y)
	}

	// Two etags, a gap, and a sample of no decisions.
	h := []*lehrpb.PolicyExperimentSample{
		smp(0, 10, 1, "e1"), smp(1, 10, 2, "e1"),
		smp(5, 10, 5, "e2"), smp(6, 0, 0, "e2"), smp(7, 10, 0, "e2"), smp(8, 10, 1, "e2"),
	}
	p = plotHistory(h, "e2", 0)
	if p == nil || len(p.Points) != 5 || len(p.Etags) != 1 || !p.Stale || p.Gate != nil {
		t.Fatalf("plot: %+v; want 5 points, one etag change, earlier etags' points", p)
	}
	// e1's points are dots without a line; e2's two runs, either side of
	// the sample of no decisions.
	if len(p.Lines) != 2 {
		t.Errorf("lines %q; want two (e2's, broken by the sample of no decisions)", p.Lines)
	}
	if p.Points[0].Current || !p.Points[2].Current || p.Points[2].Y >= p.Points[1].Y || p.Points[3].Y <= p.Points[2].Y {
		t.Errorf("points %+v: want e1's not current, e2's 50%% above e1's 20%%, 0%% below", p.Points)
	}
	if got := plotHistory([]*lehrpb.PolicyExperimentSample{smp(0, 0, 0, "e1")}, "e1", 0); got != nil {
		t.Errorf("a history of no decisions plotted: %+v", got)
	}
}
