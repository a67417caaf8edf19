// Package metricshttp is the one /metrics handler of Lehr's daemons: the
// daemon's own metric set and the process's go_* and process_* series (read
// from the Go runtime and /proc; no global metric set is involved), in the
// Prometheus text exposition format, with a # HELP and a # TYPE line for
// every family.
//
// The TYPE lines are written by github.com/VictoriaMetrics/metrics, which
// knows each metric's kind, but only once ExposeMetadata has been called:
// that switch is process-wide (the library has no per-set one), so each
// daemon binary's main calls it, not this package or the daemons' packages.
// The library's HELP lines carry no text; Handler fills it in from the
// daemon's Help and, for the process series, from this package's own table,
// which also corrects the few process series the library names or types
// against Prometheus's conventions (see processFixes).
//
// Every /metrics also carries lehr_build_info{version,commit,goversion} 1,
// the running binary's build (internal/buildinfo), so a dashboard can
// count a fleet's daemons per release during an upgrade.
//
// It imports nothing of Lehr's but internal/buildinfo; the daemons import
// it.
package metricshttp

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/buildinfo"
)

// ContentType is the Prometheus text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ReadHeaderTimeout bounds how long a metrics client may take to send its
// request headers.
const ReadHeaderTimeout = 10 * time.Second

// Help is the HELP text of a daemon's metric families, by family name: the
// metric name without labels (and for a histogram without its _bucket,
// _sum and _count suffixes). A text is one line saying what the family
// counts or measures, and its labels.
type Help map[string]string

// MergeHelp returns the union of hs, for a daemon whose set several
// packages register families on; a family in several keeps the last text.
func MergeHelp(hs ...Help) Help {
	out := Help{}
	for _, h := range hs {
		maps.Copy(out, h)
	}
	return out
}

// ExposeMetadata makes every metric set of the process write a # TYPE line
// (and an empty # HELP line, which Handler completes) before each family.
// It is process-wide; a daemon binary's main calls it once, before it
// serves /metrics. Without it /metrics has samples only.
func ExposeMetadata() { metrics.ExposeMetadata(true) }

// Handler serves set, described by help, then the process metrics.
func Handler(set *metrics.Set, help Help) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		Write(w, set, help)
	})
}

// Write writes what Handler serves to w.
func Write(w io.Writer, set *metrics.Set, help Help) {
	var own, build, proc bytes.Buffer
	set.WritePrometheus(&own)
	buildSet().WritePrometheus(&build)
	metrics.WriteProcessMetrics(&proc)
	var out bytes.Buffer
	out.Grow(own.Len() + build.Len() + proc.Len() + 8<<10)
	annotate(&out, own.Bytes(), help, nil)
	annotate(&out, build.Bytes(), buildHelp, nil)
	annotate(&out, proc.Bytes(), processHelp, processFixes)
	w.Write(out.Bytes())
}

// BuildInfoName is the family of the running binary's build.
const BuildInfoName = "lehr_build_info"

var buildHelp = Help{
	BuildInfoName: "The running binary's build (lehr version): its release version (devel: built without one), the commit it was built from (with -dirty for uncommitted changes; unknown when not recorded) and the Go version, in labels; always 1.",
}

// buildSet holds the lehr_build_info gauge of this binary, made once.
var buildSet = sync.OnceValue(func() *metrics.Set {
	set := metrics.NewSet()
	set.NewGauge(BuildInfoSeries(buildinfo.Get()), func() float64 { return 1 })
	return set
})

// BuildInfoSeries is the lehr_build_info series of build b, with its
// labels: version, commit and goversion.
func BuildInfoSeries(b buildinfo.Info) string {
	commit := b.Commit
	switch {
	case commit == "":
		commit = buildinfo.Unknown
	case b.Modified:
		commit += "-dirty"
	}
	return fmt.Sprintf(`%s{version="%s",commit="%s",goversion="%s"}`, BuildInfoName,
		labelEscaper.Replace(b.Version), labelEscaper.Replace(commit), labelEscaper.Replace(b.GoVersion))
}

// labelEscaper escapes a label value as the text format wants it.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Server returns an HTTP server serving Handler(set, help) on /metrics,
// plus any extra routes (pattern → handler, as http.ServeMux takes them).
// The caller serves it on its listener and closes it.
func Server(set *metrics.Set, help Help, extra map[string]http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(set, help))
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: ReadHeaderTimeout}
}

// fix corrects a family the metrics library names or types against
// Prometheus's conventions.
type fix struct {
	// name replaces the library's name of the family (a plain series: no
	// labels, no suffixes).
	name string
	// counter types as a counter a family the library types as a gauge.
	counter bool
}

// annotate copies the exposition src, as the metrics library writes it, to
// out with each family's metadata completed: the text of its "# HELP name"
// line (the library writes none) from help, and the corrections of fixes.
// A family help has no text for keeps its empty HELP line.
func annotate(out *bytes.Buffer, src []byte, help Help, fixes map[string]fix) {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			src = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("# HELP ")):
			name, _, _ := strings.Cut(string(line[len("# HELP "):]), " ")
			text := help[name]
			if f, ok := fixes[name]; ok && f.name != "" {
				name = f.name
			}
			out.WriteString("# HELP ")
			out.WriteString(name)
			if text != "" {
				out.WriteByte(' ')
				helpEscaper.WriteString(out, text)
			}
		case bytes.HasPrefix(line, []byte("# TYPE ")):
			name, typ, _ := strings.Cut(string(line[len("# TYPE "):]), " ")
			if f, ok := fixes[name]; ok {
				if f.name != "" {
					name = f.name
				}
				if f.counter && typ == "gauge" {
					typ = "counter"
				}
			}
			out.WriteString("# TYPE " + name + " " + typ)
		default:
			if len(fixes) > 0 {
				end := bytes.IndexAny(line, "{ ")
				if end < 0 {
					end = len(line)
				}
				if f := fixes[string(line[:end])]; f.name != "" {
					out.WriteString(f.name)
					line = line[end:]
				}
			}
			out.Write(line)
		}
		out.WriteByte('\n')
	}
}

// helpEscaper escapes a HELP text as the text format wants it.
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
