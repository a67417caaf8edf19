package bench

// Latency CDF plots as SVG, written by hand so the harness needs no
// plotting library: a log-scaled millisecond x axis, the cumulative
// fraction of samples on y, one line per series and a legend.

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Series is one line of a CDF plot: the latency samples of one system (or
// one case) under one label.
type Series struct {
	// Label names the line in the legend, e.g. "lehr" or "etcd".
	Label string
	// Samples are the latencies; their order does not matter.
	Samples []time.Duration
}

// CDFPlot is one latency CDF figure of a scenario.
type CDFPlot struct {
	// Name is unique within its result and becomes part of the file name,
	// e.g. "N1000"; letters, digits, '-' and '_' only.
	Name string
	// Title is printed above the plot.
	Title string
	// Series are the lines, drawn in order.
	Series []Series
}

// plotPoints is the most points drawn per series: enough for a smooth
// curve, few enough that a plot of 250,000 samples stays small.
const plotPoints = 400

// seriesColors are distinguishable on white and for common colour-vision
// deficiencies (Okabe–Ito).
var seriesColors = [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}

// Plot geometry, in SVG user units.
const (
	plotW, plotH                = 880, 440
	padL, padR, padTop, padBot  = 64, 24, 40, 108
	legendRowH, legendSwatchLen = 16, 24
	minPlotMs                   = 1e-3 // floor of the x axis: 1 µs
)

// WriteSVG writes p to w as a standalone SVG document.
func WriteSVG(w io.Writer, p CDFPlot) error {
	var b strings.Builder
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, d := range s.Samples {
			v := max(ms(d), minPlotMs)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) { // no samples at all
		lo, hi = 1, 10
	}
	x0 := math.Pow(10, math.Floor(math.Log10(lo)))
	x1 := math.Pow(10, math.Ceil(math.Log10(hi)))
	if x1 <= x0 {
		x1 = x0 * 10
	}
	iw, ih := float64(plotW-padL-padR), float64(plotH-padTop-padBot)
	px := func(v float64) float64 {
		v = max(v, minPlotMs)
		return padL + iw*(math.Log10(v)-math.Log10(x0))/(math.Log10(x1)-math.Log10(x0))
	}
	py := func(f float64) float64 { return padTop + ih*(1-f) }

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	// The legend takes one row per series; rows beyond the third grow the
	// image.
	height := plotH + max(0, len(p.Series)-3)*legendRowH
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", plotW, height, plotW, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="13" font-weight="bold">%s</text>`+"\n", padL, xmlText(p.Title))

	// Grid and axes: decades with 2 and 5 between them on x; tenths and the
	// p50/p90/p99 lines on y.
	b.WriteString(`<g stroke="#ddd" stroke-width="1">` + "\n")
	var xticks []float64
	for d := x0; d < x1*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v <= x1*1.0001 {
				xticks = append(xticks, v)
			}
		}
	}
	for _, v := range xticks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", px(v), py(0), px(v), py(1))
	}
	for i := 0; i <= 10; i++ {
		f := float64(i) / 10
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", px(x0), py(f), px(x1), py(f))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g stroke="#999" stroke-width="1" stroke-dasharray="4 3">` + "\n")
	for _, f := range []float64{0.5, 0.9, 0.99} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", px(x0), py(f), px(x1), py(f))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="black"/>`+"\n", padL, padTop, iw, ih)
	b.WriteString(`<g text-anchor="middle">` + "\n")
	for _, v := range xticks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", px(v), py(0)+14, FormatValue(v))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">latency (ms, log scale)</text>`+"\n", padL+iw/2, py(0)+30)
	b.WriteString("</g>\n")
	b.WriteString(`<g text-anchor="end">` + "\n")
	for i := 0; i <= 10; i += 2 {
		f := float64(i) / 10
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%.1f</text>`+"\n", padL-6, py(f)+4, f)
	}
	for _, q := range []struct {
		f float64
		s string
	}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}} {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#666">%s</text>`+"\n", px(x1)-4, py(q.f)-3, q.s)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">fraction of samples ≤ x</text>`+"\n", padTop+ih/2)

	// Lines: the empirical CDF as a step function through at most
	// plotPoints quantiles.
	for i, s := range p.Series {
		if len(s.Samples) == 0 {
			continue
		}
		color := seriesColors[i%len(seriesColors)]
		fmt.Fprintf(&b, `<polyline class="series" data-label="%s" fill="none" stroke="%s" stroke-width="1.6" points="`, xmlAttr(s.Label), color)
		for j, pt := range cdfPoints(s.Samples, plotPoints) {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", px(pt.ms), py(pt.frac))
		}
		b.WriteString(`"/>` + "\n")
	}

	// Legend below the x axis: label, sample count, p50 and p99.
	b.WriteString(`<g class="legend">` + "\n")
	for i, s := range p.Series {
		// One entry per row: the entries are long and must not overlap.
		y := float64(plotH-padBot+48) + float64(i)*legendRowH
		x := float64(padL)
		color := seriesColors[i%len(seriesColors)]
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, x, y-4, x+legendSwatchLen, y-4, color)
		text := s.Label + " (no samples)"
		if len(s.Samples) > 0 {
			sum := Summarize(s.Samples)
			text = fmt.Sprintf("%s: n=%d, p50 %s ms, p99 %s ms", s.Label, sum.N, FormatValue(ms(sum.P50)), FormatValue(ms(sum.P99)))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+legendSwatchLen+6, y, xmlText(text))
	}
	b.WriteString("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// cdfPoint is one vertex of a CDF line.
type cdfPoint struct{ ms, frac float64 }

// cdfPoints returns the step function of the empirical CDF of samples
// (0 at the smallest sample, 1 at the largest) through at most about n
// evenly spaced ranks, always including the smallest and largest.
func cdfPoints(samples []time.Duration, n int) []cdfPoint {
	s := slices.Clone(samples)
	slices.Sort(s)
	step := max(1, (len(s)+n-1)/n) // at most n ranks
	var pts []cdfPoint
	prev := 0.0
	for i := 0; i < len(s); i += step {
		v := ms(s[i])
		pts = append(pts, cdfPoint{v, prev}, cdfPoint{v, float64(i+1) / float64(len(s))})
		prev = float64(i+1) / float64(len(s))
	}
	if last := ms(s[len(s)-1]); pts[len(pts)-1].frac < 1 {
		pts = append(pts, cdfPoint{last, prev}, cdfPoint{last, 1})
	}
	return pts
}

// xmlText escapes s for character data.
func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// xmlAttr escapes s for a double-quoted attribute value.
func xmlAttr(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// runStamp is the run's start time as it names the run's files.
func runStamp(run *Run) string { return run.Started.UTC().Format("20060102T150405Z") }

// WritePlots writes every CDF plot of run to dir as
// <run>-<scenario>-<plot>.svg, creating dir, and records each file's name
// (relative to dir, where the run's JSON goes too) in its Result.Plots.
// Call it before WriteJSON so the JSON references the plots. It returns the
// paths written.
func WritePlots(dir string, run *Run) ([]string, error) {
	var paths []string
	for i := range run.Results {
		res := &run.Results[i]
		for _, p := range res.CDFs {
			if len(p.Series) == 0 {
				continue
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return paths, fmt.Errorf("bench: create results directory %s: %w", dir, err)
			}
			name := fmt.Sprintf("%s-%s-%s.svg", runStamp(run), fileSafe(res.Scenario), fileSafe(p.Name))
			path := filepath.Join(dir, name)
			f, err := os.Create(path)
			if err != nil {
				return paths, fmt.Errorf("bench: write plot: %w", err)
			}
			err = WriteSVG(f, p)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return paths, fmt.Errorf("bench: write plot %s: %w", path, err)
			}
			res.Plots = append(res.Plots, name)
			paths = append(paths, path)
		}
	}
	return paths, nil
}

// fileSafe replaces every character of s but ASCII letters, digits, '-'
// and '_' with '_'.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
