// Package console is control's operator console: web pages, served by
// control on its HTTP/JSON listener under /console/ (control/httpapi),
// that show the fleet, domains, namespaces, rollouts, canary evaluations,
// policy experiments, propagation times and the audit log, and let an
// operator pause, resume, promote or abort a rollout.
//
// It decides nothing about who may see or do what. Every figure on a page
// comes from a call of the Control API made as the page's caller
// (Options.Client, httpapi.CallerClient: the same in-process gRPC
// connection, identity, interceptors, ACLs and audit as an HTTP/JSON
// call), so a page shows what its caller may read and an action is
// refused, and recorded, as the same call from lehr would be. Options.
// MayCall, the service's own decision, only keeps the console from
// offering a caller an action control would refuse.
//
// Pages are rendered on the server by html/template (contextual
// escaping), and every stored text goes through termtext.Clean first, so
// a message with markup or control characters shows as the characters it
// holds. There is no JavaScript: a page of something that changes reloads
// itself (a meta refresh), and a form posts. Every page answers JSON too
// (?format=json, or Accept: application/json): the API's answers it was
// built from, in proto3 JSON, and what it derived from them.
//
// Browsers: the HTTP/JSON API refuses requests a browser makes for a page;
// the console is for browsers, so it has its own rules (security.go):
// pages may be opened from anywhere (a link in a ticket) but never
// embedded, fetched or framed by another site; forms post only from the
// console's own pages (same origin, and a token bound to the caller and
// the action); nothing changes on a GET.
//
// Imported by control.
package console

import (
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of Options.
const (
	// DefaultRefresh is how often a page of something that changes (the
	// fleet, a rollout in flight) reloads itself.
	DefaultRefresh = 5 * time.Second
	// DefaultTokenTTL is how long a form's token holds: the time between
	// opening a confirmation page and confirming.
	DefaultTokenTTL = time.Hour
	// Prefix is where the console is served: httpapi.ConsolePrefix.
	Prefix = "/console/"
)

// Options configures a Console.
type Options struct {
	// Client is the Control API as the caller of the request whose
	// context a call carries (httpapi.CallerClient). Required.
	Client lehrpb.ControlClient
	// MayCall, if set, says whether control would let the caller of r
	// call method with req — its role rules and the domain's ACL
	// (service.Service.MayCall) — without calling it. The console then
	// offers an action only to callers it would let act. Nil offers every
	// action the rollout's state allows; control decides when it is
	// asked.
	MayCall func(r *http.Request, method string, req proto.Message) error
	// Key signs the tokens of the console's forms (security.go). Nil: a
	// random key made by New, so a form is good only on the control
	// process that served it (a replica behind a load balancer that
	// moves a browser between replicas asks it to confirm again).
	Key []byte
	// TokenTTL bounds the time between serving a form and posting it.
	// Zero means DefaultTokenTTL (1 hour).
	TokenTTL time.Duration
	// Refresh is how often a page of something that changes reloads
	// itself. Zero means DefaultRefresh (5 s).
	Refresh time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Console serves the console's pages. It holds no state but its key: every
// page is read from control as it is asked for.
type Console struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	key  []byte
}

// New returns a Console. It starts nothing.
func New(opts Options) (*Console, error) {
	if opts.Client == nil {
		return nil, errors.New("console: Options.Client is required")
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = DefaultTokenTTL
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Console{opts: opts, log: opts.Logger, key: opts.Key}
	if len(c.key) == 0 {
		c.key = make([]byte, 32)
		rand.Read(c.key)
	}
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET /console/{$}", c.fleet)
	c.mux.HandleFunc("GET /console/domains/{domain}", c.domain)
	c.mux.HandleFunc("GET /console/namespaces/{domain}/{name}", c.namespace)
	c.mux.HandleFunc("GET /console/namespaces/{domain}/{name}/diff", c.diff)
	c.mux.HandleFunc("GET /console/rollouts/{$}", c.rollouts)
	c.mux.HandleFunc("GET /console/rollouts/{domain}/{name}/{version}", c.rollout)
	c.mux.HandleFunc("GET /console/rollouts/{domain}/{name}/{version}/{action}", c.confirm)
	c.mux.HandleFunc("POST /console/rollouts/{domain}/{name}/{version}/{action}", c.act)
	c.mux.HandleFunc("GET /console/canary/{$}", c.evaluations)
	c.mux.HandleFunc("GET /console/canary/{id...}", c.evaluation)
	c.mux.HandleFunc("GET /console/experiments/{domain}/{name}", c.experiments)
	c.mux.HandleFunc("GET /console/propagation", c.propagation)
	c.mux.HandleFunc("GET /console/audit", c.audit)
	c.mux.HandleFunc("GET /console/static/{file}", c.static)
	return c, nil
}

// ServeHTTP serves a request for a page, a form's post or a static file,
// after the browser rules (security.go).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setHeaders(w)
	if status, why := screen(r); status != 0 {
		c.fail(w, r, status, "refused", why)
		return
	}
	h, pattern := c.mux.Handler(r)
	if pattern == "" {
		// 404 and 405 of the mux, as a console page.
		rec := &statusRecorder{}
		h.ServeHTTP(rec, r)
		msg := "there is no such page in the console"
		if rec.status == http.StatusMethodNotAllowed {
			msg = r.Method + " is not allowed here: the console's pages are read with GET, and its forms post"
		}
		c.fail(w, r, rec.status, "not found", msg)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// statusRecorder keeps the status a handler writes, and drops its body.
type statusRecorder struct {
	status int
	h      http.Header
}

func (s *statusRecorder) Header() http.Header {
	if s.h == nil {
		s.h = http.Header{}
	}
	return s.h
}
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(code int)        { s.status = code }
