package console

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// The audit page: control's audit log (ListAuditRecords), newest first,
// filtered by domain (by control), and by user, method and result (here,
// over what control answered).

const (
	// auditRead bounds the records the page reads from control for one
	// answer; auditShown those it shows (the newest that match).
	auditRead  = 10000
	auditShown = 500
	// defaultAuditSince is how far back the page reads without ?since.
	defaultAuditSince = 24 * time.Hour
)

// auditFilter is the audit page's query.
type auditFilter struct {
	Domain string `json:"domain,omitempty"`
	User   string `json:"user,omitempty"`
	Method string `json:"method,omitempty"`
	Result string `json:"result,omitempty"`
	Since  string `json:"since,omitempty"`
}

// matches reports whether rec passes f's user, method and result
// filters: the user and the method exactly, the result "ok", "refused"
// (every code but OK) or a code ("PermissionDenied").
func (f auditFilter) matches(rec *lehrpb.AuditRecord) bool {
	if f.User != "" && rec.GetAuthor() != f.User {
		return false
	}
	if f.Method != "" && !strings.EqualFold(rec.GetMethod(), f.Method) {
		return false
	}
	switch r := strings.ToLower(f.Result); r {
	case "":
	case "ok":
		return rec.GetCode() == "OK"
	case "refused", "failed", "error":
		return rec.GetCode() != "OK"
	default:
		return strings.EqualFold(rec.GetCode(), f.Result)
	}
	return true
}

type auditPage struct {
	Filter  auditFilter
	Since   time.Time
	Records []*lehrpb.AuditRecord
	// Read is how many records control answered; Matched how many passed
	// the filters (the page shows the newest auditShown of them);
	// Truncated, whether reading stopped at auditRead.
	Read, Matched int
	Truncated     bool
	Methods       []string
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := auditFilter{Domain: q.Get("domain"), User: q.Get("user"), Method: q.Get("method"), Result: q.Get("result"), Since: q.Get("since")}
	now := c.opts.Now()
	since := now.Add(-defaultAuditSince)
	if f.Since != "" {
		t, err := time.Parse(time.RFC3339, f.Since)
		if err != nil {
			d, derr := time.ParseDuration(f.Since)
			if derr != nil || d < 0 {
				c.fail(w, r, http.StatusBadRequest, "INVALID_ARGUMENT", "since: want an RFC 3339 time (2026-11-24T00:00:00Z) or a duration back from now (24h)")
				return
			}
			t = now.Add(-d)
		}
		since = t
	}
	ap := auditPage{Filter: f, Since: since}
	req := &lehrpb.ListAuditRecordsRequest{Domain: f.Domain, Since: timestamppb.New(since), PageSize: 1000}
	var matched []*lehrpb.AuditRecord
	methods := map[string]bool{}
	for ap.Read < auditRead {
		resp, err := c.opts.Client.ListAuditRecords(r.Context(), req)
		if err != nil {
			c.failAPI(w, r, "audit log", err)
			return
		}
		for _, rec := range resp.GetRecords() {
			ap.Read++
			methods[rec.GetMethod()] = true
			if f.matches(rec) {
				matched = append(matched, rec)
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	ap.Truncated = req.PageToken != ""
	ap.Matched = len(matched)
	// Newest first, at most auditShown.
	slices.Reverse(matched)
	ap.Records = matched[:min(len(matched), auditShown)]
	for m := range methods {
		ap.Methods = append(ap.Methods, m)
	}
	slices.Sort(ap.Methods)
	doc := map[string]any{"page": "audit", "filter": f, "since": since.UTC().Format(time.RFC3339), "read": ap.Read, "matched": ap.Matched,
		"truncated": ap.Truncated, "records": pjs(ap.Records)}
	c.render(w, r, "audit", page{Title: "Audit log", Crumbs: []crumb{{"Fleet", Prefix}}, Body: ap}, doc)
}
