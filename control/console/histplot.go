package console

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// An experiment's disagreement over time, drawn on the server as SVG with
// the geometry of a check's plot (plot.go): the share of the decisions
// counted in each sampled interval (PolicyExperimentCounts.history) that
// the experiment disagreed with the live policy on, and the commit gate's
// bound when the page was asked for one.

// maxHistoryPoints bounds the points of a history plot: beyond it,
// consecutive samples are summed into one point (a bucket), so a day of
// minute samples draws 240 points of six minutes each.
const maxHistoryPoints = 240

// histPoint is one point of the plot: one sample, or consecutive ones
// summed.
type histPoint struct {
	// From and To bound the decisions it counts: the first sample's
	// interval start and the last sample's time.
	From, To                   time.Time
	Samples                    int
	Evaluations, Disagreements uint64
	// Etag is the experiment etag its samples counted; Current says it
	// is the experiment's etag now.
	Etag    string
	Current bool
	// X and Y are where it is drawn; Y only when Evaluations > 0.
	X, Y float64
}

// Share is Disagreements / Evaluations, 0 for none.
func (p histPoint) Share() float64 {
	if p.Evaluations == 0 {
		return 0
	}
	return float64(p.Disagreements) / float64(p.Evaluations)
}

// Stamp is To as the point's data-to attribute holds it (RFC 3339, UTC,
// to the nanosecond): the time of its last sample, as the API gives it.
func (p histPoint) Stamp() string { return p.To.UTC().Format(time.RFC3339Nano) }

// Percent is Share as the page writes it, "12.50%".
func (p histPoint) Percent() string { return fmt.Sprintf("%.2f%%", 100*p.Share()) }

// histPlot is the plot of one experiment's history.
type histPlot struct {
	W, H, Left, Top, Right, Bottom float64
	// MidX is the middle of the x axis, where its title is.
	MidX  float64
	Title string
	// Lines are polylines' points ("x,y x,y …"), one per run of points
	// with decisions and no gap between their samples.
	Lines []string
	// Points are the points with decisions, drawn as dots.
	Points []histPoint
	// Gate is the commit gate's max_disagreement line, when asked.
	Gate *segment
	// Etags mark where the experiment etag changed (an update), and
	// Stale says some points are of an earlier etag.
	Etags  []mark
	Stale  bool
	YTicks []tick
	XTicks []tick
	// Caption says what is drawn.
	Caption string
}

// histBuckets sums h's samples into points of equal numbers of
// consecutive samples of one experiment etag: about maxHistoryPoints
// (one more for each change of etag).
func histBuckets(h []*lehrpb.PolicyExperimentSample) []histPoint {
	per := (len(h) + maxHistoryPoints - 1) / maxHistoryPoints
	var out []histPoint
	for _, s := range h {
		end := s.GetSampleTime().AsTime()
		if n := len(out); n == 0 || out[n-1].Samples == per || out[n-1].Etag != s.GetExperimentEtag() {
			out = append(out, histPoint{From: end.Add(-s.GetInterval().AsDuration()), Etag: s.GetExperimentEtag()})
		}
		p := &out[len(out)-1]
		p.To = end
		p.Samples++
		p.Evaluations += s.GetEvaluations()
		p.Disagreements += s.GetDisagreements()
	}
	return out
}

// plotHistory is the plot of history h of the experiment whose etag is
// etag now, with the gate's bound maxDisagreement (0: none), nil when h
// has no sample with decisions.
func plotHistory(h []*lehrpb.PolicyExperimentSample, etag string, maxDisagreement float64) *histPlot {
	pts := histBuckets(h)
	var hi float64
	some := false
	for _, p := range pts {
		if p.Evaluations > 0 {
			hi, some = max(hi, p.Share()), true
		}
	}
	if !some {
		return nil
	}
	if maxDisagreement > 0 {
		hi = max(hi, maxDisagreement)
	}
	// The y axis: 0 to a round share above every point, at least 1%.
	hi = niceShare(hi * 1.08)
	t0, t1 := pts[0].From, pts[len(pts)-1].To
	span := t1.Sub(t0)
	x := func(t time.Time) float64 {
		if span <= 0 {
			return padL + innerW/2
		}
		return padL + float64(t.Sub(t0))/float64(span)*innerW
	}
	y := func(v float64) float64 { return padT + innerH*(1-v/hi) }
	p := &histPlot{W: plotW, H: plotH, Left: padL, Top: padT, Right: plotW - padR, Bottom: plotH - padB, MidX: padL + innerW/2, Title: "disagreement over time"}
	var b strings.Builder
	n := 0
	flush := func() {
		if n > 0 {
			p.Lines = append(p.Lines, b.String())
		}
		b.Reset()
		n = 0
	}
	var prevTo time.Time
	for i, pt := range pts {
		// A gap — no decisions, or time no sample covers (a preview
		// suspended, a new leader's baseline) — breaks the line, and so
		// does a new etag, marked.
		newEtag := i > 0 && pt.Etag != pts[i-1].Etag
		if pt.Evaluations == 0 || newEtag || (i > 0 && pt.From.Sub(prevTo) > time.Second) {
			flush()
		}
		if newEtag {
			p.Etags = append(p.Etags, mark{X: x(pt.From), Label: "etag " + shortEtag(pt.Etag), Detail: "the experiment was changed: from here on its etag is " + pt.Etag})
		}
		prevTo = pt.To
		pt.Current = pt.Etag == etag
		if !pt.Current && pt.Evaluations > 0 {
			p.Stale = true
		}
		if pt.Evaluations == 0 {
			continue
		}
		mid := pt.From.Add(pt.To.Sub(pt.From) / 2)
		if pt.Samples == 1 {
			mid = pt.To
		}
		pt.X, pt.Y = x(mid), y(pt.Share())
		p.Points = append(p.Points, pt)
		if !pt.Current {
			continue // a dot, no line
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", pt.X, pt.Y)
		n++
	}
	flush()
	if maxDisagreement > 0 {
		p.Gate = &segment{X1: padL, Y1: y(maxDisagreement), X2: plotW - padR, Y2: y(maxDisagreement), Class: "gate",
			Label: "the gate's max_disagreement: " + pct(maxDisagreement)}
	}
	for _, v := range []float64{0, hi / 2, hi} {
		p.YTicks = append(p.YTicks, tick{y(v), pct(v)})
	}
	p.XTicks = append(p.XTicks, tick{x(t0), ago(t1.Sub(t0))})
	if span > 0 {
		p.XTicks = append(p.XTicks, tick{x(t0.Add(span / 2)), ago(span / 2)}, tick{x(t1), "latest"})
	}
	every := ""
	if len(pts) < len(h) {
		every = fmt.Sprintf(", %d samples a point", (len(h)+len(pts)-1)/len(pts))
	}
	p.Caption = fmt.Sprintf("%d samples from %s to %s UTC%s.", len(h), t0.UTC().Format(time.DateTime), t1.UTC().Format(time.DateTime), every)
	return p
}

// shortEtag is an etag's first 8 characters.
func shortEtag(e string) string {
	if len(e) > 8 {
		return e[:8]
	}
	return e
}

// niceShare is the least of 1%, 2%, 5%, 10%, 20%, 50% and 100% at or
// above v.
func niceShare(v float64) float64 {
	for _, s := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5} {
		if v <= s {
			return s
		}
	}
	return 1
}

// pct is a share as a percentage: "12.5%".
func pct(v float64) string { return strconv.FormatFloat(100*v, 'g', 3, 64) + "%" }

// ago is a time before the latest sample: "-24m0s".
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "latest"
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	return "-" + d.String()
}
