package console

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/internal/termtext"
	"lehr.dev/lehr/proto/lehrpb"
)

// A check's plot, drawn on the server as SVG (the console runs no
// script): the canary and control hosts' per-interval medians of the
// check's value (CanaryCheckResult.canary_series, control_series) before
// and after the change, the before/after levels the explanation quotes,
// the change and the bake's looks marked, each judged look with its
// p-value against the threshold it allowed. Coordinates are computed here;
// the template writes them, so every text goes through html/template.

// Plot geometry, in SVG user units.
const (
	plotW, plotH                   = 760, 250
	padL, padR, padT, padB         = 64, 16, 34, 44
	innerW, innerH         float64 = plotW - padL - padR, plotH - padT - padB
)

// plot is one check's plot.
type plot struct {
	W, H, Left, Top, Right, Bottom float64
	Title                          string
	// Canary and Control are polylines' points ("x,y x,y …"), one per run
	// of intervals with data.
	Canary, Control []string
	// Levels are the medians of the hosts' levels before and after the
	// change (the explanation's "from … to …").
	Levels []segment
	// Change is where the change falls; Looks where the bake's looks do.
	Change mark
	Looks  []mark
	YTicks []tick
	XTicks []tick
	// Caption says what is drawn.
	Caption string
}

type segment struct {
	X1, Y1, X2, Y2 float64
	Class, Label   string
}

type mark struct {
	X      float64
	Label  string
	Detail string // a judged look's p-value against its threshold, or "to come"
	Class  string // "look-judged", "look-failed", "look-ahead"
}

type tick struct {
	At    float64
	Label string
}

// plotCheck is ch's plot in res, nil when res holds no series for it
// (an evaluation judged before control kept them, or no look yet).
func plotCheck(res *lehrpb.CanaryResult, ch *lehrpb.CanaryCheckResult) *plot {
	cs, ks := ch.GetCanarySeries(), ch.GetControlSeries()
	n := max(len(cs), len(ks))
	if n == 0 || allZero(cs) && allZero(ks) {
		// Nothing to see: the explanation says no host had any.
		return nil
	}
	step := max(1, int(res.GetSeriesStep()))
	ci := int(res.GetSeriesChangeIndex())
	iv := time.Duration(res.GetIntervalSeconds()) * time.Second * time.Duration(step)
	// The x axis spans the data and the whole bake, so the looks to come
	// show where they will fall.
	span := n
	pointOf := func(after int32) int { return ci + (int(after)+step-1)/step }
	for _, e := range res.GetLookEnds() {
		span = max(span, pointOf(e))
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, xs := range [][]float64{cs, ks, {ch.GetCanaryBefore(), ch.GetCanaryAfter(), ch.GetControlBefore(), ch.GetControlAfter()}} {
		for _, x := range xs {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	hi += (hi - lo) * 0.08
	x := func(i float64) float64 { return padL + i/float64(span)*innerW }
	y := func(v float64) float64 { return padT + innerH*(1-(v-lo)/(hi-lo)) }
	p := &plot{W: plotW, H: plotH, Left: padL, Top: padT, Right: plotW - padR, Bottom: plotH - padB, Title: termtext.Clean(ch.GetName())}
	p.Canary, p.Control = polylines(cs, x, y), polylines(ks, x, y)
	judged := ci + (int(res.GetAfterIntervals())+step-1)/step
	for _, l := range []struct {
		before, after float64
		class, who    string
	}{{ch.GetControlBefore(), ch.GetControlAfter(), "level-control", "control"}, {ch.GetCanaryBefore(), ch.GetCanaryAfter(), "level-canary", "canary"}} {
		if ch.GetCanaryHosts() == 0 && l.who == "canary" || ch.GetControlHosts() == 0 && l.who == "control" {
			continue
		}
		p.Levels = append(p.Levels,
			segment{x(0), y(l.before), x(float64(ci)), y(l.before), l.class, l.who + " before: " + num(l.before)},
			segment{x(float64(ci)), y(l.after), x(float64(min(judged, span))), y(l.after), l.class, l.who + " after: " + num(l.after)})
	}
	p.Change = mark{X: x(float64(ci)), Label: "change"}
	hist := map[int32]*lehrpb.CanaryLook{}
	for _, h := range ch.GetLookHistory() {
		hist[h.GetLook()] = h
	}
	ahead := "to come"
	if res.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
		ahead = "not taken: a FAIL at an earlier look stands"
	}
	for j, e := range res.GetLookEnds() {
		m := mark{X: x(float64(min(pointOf(e), span))), Label: fmt.Sprintf("look %d", j+1), Class: "look-ahead", Detail: ahead}
		if h := hist[int32(j+1)]; h != nil {
			m.Class = "look-judged"
			m.Detail = lookDetail(h)
			if h.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
				m.Class = "look-failed"
				m.Label += " " + evaluation.VerdictWord(h.GetVerdict())
			}
		}
		p.Looks = append(p.Looks, m)
	}
	for _, v := range []float64{lo, (lo + hi) / 2, hi} {
		p.YTicks = append(p.YTicks, tick{y(v), num(v)})
	}
	for _, i := range []int{0, ci, span} {
		p.XTicks = append(p.XTicks, tick{x(float64(i)), rel(time.Duration(i-ci) * iv)})
	}
	every := ""
	if step > 1 {
		every = fmt.Sprintf(" (means of %d intervals)", step)
	}
	p.Caption = fmt.Sprintf("Per %ds interval%s, the median of %s across the %d canary and the %d control host(s) that counted.",
		res.GetIntervalSeconds(), every, termtext.Clean(ch.GetName()), ch.GetCanaryHosts(), ch.GetControlHosts())
	return p
}

// lookDetail is a judged look's p-value against its threshold.
func lookDetail(h *lehrpb.CanaryLook) string {
	if math.IsNaN(h.GetP()) || h.GetP() == 0 && h.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
		return evaluation.VerdictWord(h.GetVerdict())
	}
	op := "≥"
	if h.GetP() < h.GetThreshold() {
		op = "<"
	}
	return fmt.Sprintf("p %.2g %s %.2g %s", h.GetP(), op, h.GetThreshold(), evaluation.VerdictWord(h.GetVerdict()))
}

func allZero(xs []float64) bool {
	for _, x := range xs {
		if x != 0 && !math.IsNaN(x) {
			return false
		}
	}
	return true
}

// polylines returns the points of xs's runs of finite values.
func polylines(xs []float64, x, y func(float64) float64) []string {
	var out []string
	var b strings.Builder
	n := 0
	flush := func() {
		if n > 0 {
			out = append(out, b.String())
		}
		b.Reset()
		n = 0
	}
	for i, v := range xs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			flush()
			continue
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x(float64(i)+0.5), y(v))
		n++
	}
	flush()
	return out
}

// num formats a value of a check's unit.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }

// rel is a time relative to the change: "-60s", "0", "+2m0s".
func rel(d time.Duration) string {
	switch {
	case d == 0:
		return "change"
	case d > 0:
		return "+" + d.String()
	}
	return d.String()
}
