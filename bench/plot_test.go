package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// svgSummary parses an SVG document with encoding/xml (failing on
// malformed XML) and returns the root element's name, the data-label of
// every series polyline with its number of points, and all text content.
func svgSummary(t *testing.T, doc []byte) (root string, series map[string]int, text string) {
	t.Helper()
	series = map[string]int{}
	var texts []string
	dec := xml.NewDecoder(bytes.NewReader(doc))
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = el.Name.Local
			}
			depth++
			if el.Name.Local == "polyline" {
				var label, points, class string
				for _, a := range el.Attr {
					switch a.Name.Local {
					case "data-label":
						label = a.Value
					case "points":
						points = a.Value
					case "class":
						class = a.Value
					}
				}
				if class == "series" {
					series[label] = len(strings.Fields(points))
				}
			}
		case xml.EndElement:
			depth--
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements: depth %d at EOF", depth)
	}
	return root, series, strings.Join(texts, "\n")
}

func durations(ms ...float64) []time.Duration {
	var out []time.Duration
	for _, m := range ms {
		out = append(out, time.Duration(m*float64(time.Millisecond)))
	}
	return out
}

func TestWriteSVG(t *testing.T) {
	many := make([]time.Duration, 5000)
	for i := range many {
		many[i] = time.Duration(i+1) * 37 * time.Microsecond
	}
	tests := []struct {
		name   string
		plot   CDFPlot
		points map[string]int // series label → want at least this many points (> 0)
	}{
		{
			name: "three systems",
			plot: CDFPlot{Name: "N100", Title: "fanout <N=100> & more", Series: []Series{
				{Label: "lehr", Samples: durations(20, 21, 25, 26.2)},
				{Label: "etcd", Samples: durations(4, 4.2, 6.9)},
				{Label: `nats "kv"`, Samples: durations(2.6, 3.1, 3.2)},
			}},
			points: map[string]int{"lehr": 8, "etcd": 6, `nats "kv"`: 6},
		},
		{
			name:   "many samples are thinned",
			plot:   CDFPlot{Name: "big", Title: "big", Series: []Series{{Label: "lehr", Samples: many}}},
			points: map[string]int{"lehr": plotPoints},
		},
		{
			name:   "sub-microsecond and single sample",
			plot:   CDFPlot{Name: "tiny", Title: "tiny", Series: []Series{{Label: "one", Samples: []time.Duration{0}}}},
			points: map[string]int{"one": 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSVG(&buf, tt.plot); err != nil {
				t.Fatalf("WriteSVG: %v", err)
			}
			root, series, text := svgSummary(t, buf.Bytes())
			if root != "svg" {
				t.Errorf("root element = %q, want svg", root)
			}
			var got, want []string
			for l := range series {
				got = append(got, l)
			}
			for l := range tt.points {
				want = append(want, l)
			}
			if diff := cmp.Diff(want, got, cmp.Transformer("sort", sortedStrings)); diff != "" {
				t.Errorf("series labels (-want +got):\n%s", diff)
			}
			for l, min := range tt.points {
				if n := series[l]; n < min || n > 2*plotPoints+2 {
					t.Errorf("series %q has %d points, want %d..%d", l, n, min, 2*plotPoints+2)
				}
			}
			for _, s := range tt.plot.Series {
				if !strings.Contains(text, s.Label+": n=") {
					t.Errorf("legend lacks %q; text:\n%s", s.Label, text)
				}
			}
			if !strings.Contains(text, tt.plot.Title) {
				t.Errorf("title %q missing; text:\n%s", tt.plot.Title, text)
			}
		})
	}
}

func sortedStrings(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestCDFPointsMonotone(t *testing.T) {
	pts := cdfPoints(durations(5, 1, 3, 2, 4), 400)
	if pts[0].frac != 0 || pts[len(pts)-1].frac != 1 {
		t.Errorf("CDF runs from %v to %v, want 0 to 1", pts[0].frac, pts[len(pts)-1].frac)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].ms < pts[i-1].ms || pts[i].frac < pts[i-1].frac {
			t.Fatalf("not monotone at %d: %v then %v", i, pts[i-1], pts[i])
		}
	}
}

func TestWritePlotsReferencesFiles(t *testing.T) {
	dir := t.TempDir()
	run := &Run{Started: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Profile: "quick", Results: []Result{
		{Scenario: "fanout", CDFs: []CDFPlot{
			{Name: "N100", Title: "a", Series: []Series{{Label: "lehr", Samples: durations(1, 2)}}},
			{Name: "N/1000", Title: "b", Series: []Series{{Label: "lehr", Samples: durations(3)}}},
		}},
		{Scenario: "wirebytes"},
	}}
	paths, err := WritePlots(dir, run)
	if err != nil {
		t.Fatalf("WritePlots: %v", err)
	}
	want := []string{"20261121T100000Z-fanout-N100.svg", "20261121T100000Z-fanout-N_1000.svg"}
	if diff := cmp.Diff(want, run.Results[0].Plots); diff != "" {
		t.Errorf("Plots (-want +got):\n%s", diff)
	}
	if len(run.Results[1].Plots) != 0 {
		t.Errorf("wirebytes got plots %v, want none", run.Results[1].Plots)
	}
	if len(paths) != 2 {
		t.Fatalf("got %d paths, want 2", len(paths))
	}
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("plot referenced but not written: %v", err)
		}
		svgSummary(t, b)
	}
	jsonPath, err := WriteJSON(dir, run)
	if err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	b, _ := os.ReadFile(jsonPath)
	if !strings.Contains(string(b), `"20261121T100000Z-fanout-N100.svg"`) {
		t.Errorf("JSON does not reference the plot:\n%s", b)
	}
	if strings.Contains(string(b), "Samples") || strings.Contains(string(b), "CDFs") {
		t.Errorf("JSON holds raw samples:\n%s", b)
	}
}
