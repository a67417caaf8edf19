package metricshttp

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/metricshttp/metricstest"
)

func TestServerServesSetAndProcessMetrics(t *testing.T) {
	set := metrics.NewSet()
	set.NewCounter("lehr_test_total").Add(3)
	srv := httptest.NewServer(Server(set, nil, map[string]http.Handler{
		"GET /healthz": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }),
	}).Handler)
	defer srv.Close()
	get := func(path string) (string, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(b)
	}
	ct, body := get("/metrics")
	if ct != ContentType || !strings.Contains(body, "lehr_test_total 3\n") || !strings.Contains(body, "go_goroutines ") {
		t.Errorf("/metrics: content type %q, body lacks the set's counter or go_goroutines:\n%s", ct, body)
	}
	if _, body := get("/healthz"); body != "ok\n" {
		t.Errorf("/healthz = %q, want ok", body)
	}
}

// TestAnnotate: the library's metadata lines get their HELP text, and the
// fixes rename and retype families, samples included.
func TestAnnotate(t *testing.T) {
	help := Help{
		"a_total":   "As, by kind.",
		"b_seconds": "Bees in seconds; a \\ and a\nnewline.",
		"old_count": "Olds.",
		"io_total":  "IO.",
	}
	fixes := map[string]fix{"old_count": {name: "new_total"}, "io_total": {counter: true}}
	tests := []struct{ name, in, want string }{
		{"help and type",
			"# HELP a_total\n# TYPE a_total counter\na_total{kind=\"x\"} 1\na_total{kind=\"y\"} 2\n",
			"# HELP a_total As, by kind.\n# TYPE a_total counter\na_total{kind=\"x\"} 1\na_total{kind=\"y\"} 2\n"},
		{"histogram, escaped help",
			"# HELP b_seconds\n# TYPE b_seconds histogram\nb_seconds_bucket{le=\"0.1\"} 1\nb_seconds_bucket{le=\"+Inf\"} 1\nb_seconds_sum 0.05\nb_seconds_count 1\n",
			"# HELP b_seconds Bees in seconds; a \\\\ and a\\nnewline.\n# TYPE b_seconds histogram\nb_seconds_bucket{le=\"0.1\"} 1\nb_seconds_bucket{le=\"+Inf\"} 1\nb_seconds_sum 0.05\nb_seconds_count 1\n"},
		{"renamed",
			"# HELP old_count\n# TYPE old_count counter\nold_count 7\n",
			"# HELP new_total Olds.\n# TYPE new_total counter\nnew_total 7\n"},
		{"retyped",
			"# HELP io_total\n# TYPE io_total gauge\nio_total 9\n",
			"# HELP io_total IO.\n# TYPE io_total counter\nio_total 9\n"},
		{"unknown family keeps its empty help",
			"# HELP c\n# TYPE c gauge\nc 1\n",
			"# HELP c\n# TYPE c gauge\nc 1\n"},
		{"no metadata, no trailing newline",
			"old_count 7\nc 1",
			"new_total 7\nc 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			annotate(&out, []byte(tt.in), help, fixes)
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("annotate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExpositionIsPrometheusNative: with the library's metadata on (as
// every daemon's main turns it on), a set of every kind the daemons use
// and the process metrics come out with HELP and TYPE for every family,
// le buckets, and nothing promtool reports. It also catches a process
// family the library added without a HELP text here.
func TestExpositionIsPrometheusNative(t *testing.T) {
	ExposeMetadata()
	set := metrics.NewSet()
	set.NewCounter(`lehr_test_things_total{kind="a"}`).Inc()
	set.NewCounter(`lehr_test_things_total{kind="b"}`).Add(2)
	set.NewFloatCounter(`lehr_test_waited_seconds_total`).Add(0.5)
	set.NewGauge(`lehr_test_level_bytes`, func() float64 { return 42 })
	set.GetOrCreateGauge(`lehr_test_version{namespace="d/n"}`, nil).Set(3)
	h := set.NewPrometheusHistogramExt(`lehr_test_duration_seconds{op="get"}`, []float64{0.001, 0.01, 0.1, 1})
	h.Update(0.005)
	h.Update(2)
	help := Help{
		"lehr_test_things_total":         "Things, by kind.",
		"lehr_test_waited_seconds_total": "Time waited, in seconds.",
		"lehr_test_level_bytes":          "The level, in bytes.",
		"lehr_test_version":              "The version, by namespace.",
		"lehr_test_duration_seconds":     "Latency, by operation, in seconds.",
	}
	var out bytes.Buffer
	Write(&out, set, help)
	body := out.String()
	for _, want := range []string{
		"# HELP lehr_test_things_total Things, by kind.\n# TYPE lehr_test_things_total counter\n",
		`lehr_test_duration_seconds_bucket{op="get",le="0.01"} 1` + "\n",
		`lehr_test_duration_seconds_bucket{op="get",le="+Inf"} 2` + "\n",
		"# TYPE go_cgo_calls_total counter\n",
		"# TYPE go_cpus gauge\n",
		"# TYPE process_io_read_bytes_total counter\n",
		"# TYPE lehr_build_info gauge\n" + BuildInfoSeries(buildinfo.Get()) + " 1\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	metricstest.Check(t, out.Bytes())
}

// TestBuildInfoSeries: the build's labels, escaped as the text format
// wants them, with the commit's state.
func TestBuildInfoSeries(t *testing.T) {
	tests := []struct {
		b    buildinfo.Info
		want string
	}{
		{buildinfo.Info{Version: "0.1.0", Commit: "237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091", GoVersion: "go1.26.8"},
			`lehr_build_info{version="0.1.0",commit="237c09b1a2b3c4d5e6f708192a3b4c5d6e7f8091",goversion="go1.26.8"}`},
		{buildinfo.Info{Version: "devel", Commit: "237c09b1", Modified: true, GoVersion: "go1.26.8"},
			`lehr_build_info{version="devel",commit="237c09b1-dirty",goversion="go1.26.8"}`},
		{buildinfo.Info{Version: `a"b\c` + "\n", GoVersion: "go1.26.8"},
			`lehr_build_info{version="a\"b\\c\n",commit="unknown",goversion="go1.26.8"}`},
	}
	for _, tt := range tests {
		if got := BuildInfoSeries(tt.b); got != tt.want {
			t.Errorf("BuildInfoSeries(%+v) = %s, want %s", tt.b, got, tt.want)
		}
		// The metrics library takes it.
		metrics.NewSet().NewGauge(tt.want, func() float64 { return 1 })
	}
}
