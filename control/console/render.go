package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/termtext"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// page is what the layout shows around a page's body.
type page struct {
	Title   string
	Crumbs  []crumb
	Caller  string
	Refresh int // seconds between reloads; 0: none
	JSONURL string
	Now     time.Time
	Body    any
}

// crumb is a link of the page's trail.
type crumb struct{ Name, URL string }

var funcs = template.FuncMap{
	// clean is how every stored text is shown: control characters,
	// bidirectional controls and bytes that are not UTF-8 as visible
	// escapes (\x1b, \u202e, \xff); html/template then escapes markup.
	"clean": termtext.Clean,
	"ts":    fmtTime,
	"ago": func(ts *timestamppb.Timestamp, now time.Time) string {
		if ts == nil {
			return "never"
		}
		return fmtAge(now.Sub(ts.AsTime())) + " ago"
	},
	"bytes": func(n int64) string {
		if n < 0 {
			n = 0
		}
		return humanize.IBytes(uint64(n))
	},
	"state":          func(s lehrpb.RolloutState) string { return rollout.StateName(s) },
	"domainURL":      domainURL,
	"nsURL":          nsURL,
	"rolloutURL":     rolloutURL,
	"experimentsURL": experimentsURL,
	"noCounts":       func() string { return preview.NoCounts },
	"source":         sourceWord,
	"reason":         rollout.Reason,
	"kind":           kindWord,
	"stage":          rollout.StageLabel,
	"inc":            func(n int32) int { return int(n) + 1 },
	"verdictWord":    evaluation.VerdictWord,
	"evalState":      evaluation.StateWord,
	"evalURL":        evaluationURL,
	"lower":          strings.ToLower,
	"add":            func(a, b float64) float64 { return a + b },
	"sub":            func(a, b float64) float64 { return a - b },
	"odd":            func(i int) bool { return i%2 == 1 },
	"secs":           fmtSeconds,
	"share":          share,
	// pval is a p-value, "—" without a test (NaN).
	"pval": func(p float64) string {
		if math.IsNaN(p) {
			return "—"
		}
		return strconv.FormatFloat(p, 'g', 3, 64)
	},
}

// Every page's template: the layout and the page's body.
var pages = func() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	m := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		m[strings.TrimSuffix(base, ".html")] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, n))
	}
	return m
}()

// wantsJSON reports whether r asks for a page's JSON form: ?format=json,
// or an Accept header whose first type is application/json.
func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	first, _, _ := strings.Cut(r.Header.Get("Accept"), ",")
	mt, _, _ := mime.ParseMediaType(strings.TrimSpace(first))
	return mt == "application/json"
}

// jsonURL is r's URL with format=json.
func jsonURL(r *http.Request) string {
	q := r.URL.Query()
	q.Set("format", "json")
	return r.URL.Path + "?" + q.Encode()
}

// callerName says who the console knows the caller of r as, for the
// page's header only (control decides what the caller may do).
func callerName(r *http.Request) string {
	if r.TLS == nil {
		return "unidentified (plaintext)"
	}
	if len(r.TLS.VerifiedChains) == 0 {
		return "unidentified (no client certificate)"
	}
	id, ok, err := tlsconfig.PeerRole(*r.TLS)
	switch {
	case err != nil || !ok:
		return "a certificate without a Lehr identity"
	case id.Role == tlsconfig.RoleUser:
		return id.Name
	}
	return id.String()
}

// render writes p, as HTML with the page template name or as JSON (doc),
// as r asks.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, p page, doc map[string]any) {
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, doc)
		return
	}
	p.Caller = callerName(r)
	p.JSONURL = jsonURL(r)
	p.Now = c.opts.Now()
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: the page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// errorPage is the body of a page that failed.
type errorPage struct {
	Status  int
	Code    string
	Message string
}

// fail writes a refusal or failure as a page, or as JSON ({"error": …}).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]any{"error": map[string]any{"status": status, "code": code, "message": msg}})
		return
	}
	var buf bytes.Buffer
	p := page{Title: http.StatusText(status), Caller: callerName(r), Now: c.opts.Now(), Body: errorPage{status, code, msg}}
	if err := pages["error"].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// failAPI writes an API error as control answered it: its HTTP status
// (AIP-193, as the HTTP/JSON API) and message.
func (c *Console) failAPI(w http.ResponseWriter, r *http.Request, what string, err error) {
	e := apierror.FromError(err)
	c.fail(w, r, runtime.HTTPStatusFromCode(e.Code), e.Code.String(), what+": "+e.Message)
}

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// pj is m in proto3 JSON (as the HTTP/JSON API answers it), for a page's
// JSON form; null for nil.
func pj(m proto.Message) json.RawMessage {
	if m == nil || !m.ProtoReflect().IsValid() {
		return json.RawMessage("null")
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// pjs is ms in proto3 JSON.
func pjs[M proto.Message](ms []M) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, pj(m))
	}
	return out
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "—"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}

// fmtAge is d rounded as a person reads it: "4s", "3m12s", "2h5m", "3d".
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func domainURL(d string) string { return Prefix + "domains/" + url.PathEscape(d) }

// nsURL is the page of namespace "domain/name".
func nsURL(ns string) string {
	d, n, _ := strings.Cut(ns, "/")
	return Prefix + "namespaces/" + url.PathEscape(d) + "/" + url.PathEscape(n)
}

// rolloutURL is the page of namespace ns's rollout of version v.
func rolloutURL(ns string, v uint64) string {
	d, n, _ := strings.Cut(ns, "/")
	return fmt.Sprintf("%srollouts/%s/%s/%d", Prefix, url.PathEscape(d), url.PathEscape(n), v)
}

func sourceWord(s lehrpb.VersionSource) string {
	switch s {
	case lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT:
		return "snapshot"
	case lehrpb.VersionSource_VERSION_SOURCE_PATCH:
		return "patch"
	case lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK:
		return "rollback"
	}
	return "—"
}

func kindWord(k lehrpb.NamespaceKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "NAMESPACE_KIND_"))
}

// static serves the console's style sheet.
func (c *Console) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := staticFS.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		c.fail(w, r, http.StatusNotFound, "not found", "no such file")
		return
	}
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("Cache-Control", "max-age=300")
	w.Write(b)
}
