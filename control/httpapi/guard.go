package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/dustin/go-humanize"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
)

// What HTTP needs that gRPC has built in. (The console under
// ConsolePrefix, for browsers, is screened by the host rule below only
// and applies its own rules for pages and forms: control/console.) A gRPC client is a program; an
// HTTP client may be a browser acting for whatever page it shows, holding
// a client certificate (sent to any server that asks for one) or running
// on control's host (where plaintext loopback is allowed, and in dev mode
// may change anything). So:
//
//   - a request a browser makes for a page — it carries Origin, or
//     Sec-Fetch-Site other than "none" (typed by the user) — is refused:
//     the API is for programs, and no page can make a cross-site request
//     without one of them;
//   - a body must be JSON (Content-Type application/json): a page's form
//     or simple request cannot send that without asking first (CORS),
//     which control never answers;
//   - on a plaintext listener the request must be addressed to an IP
//     address or localhost, never a name, which a page could rebind to
//     this host (DNS rebinding);
//   - bodies are bounded in size (Options.MaxBodyBytes), in number at
//     once (Options.MaxBodies) and in time (Options.BodyTimeout), as gRPC
//     bounds messages and control's admission the publishes it receives.

// screen returns the HTTP status and error refusing r, if any.
func screen(r *http.Request, overTLS bool) (int, *apierror.Error) {
	if r.Header.Get("Origin") != "" || secFetch(r) {
		return http.StatusForbidden, apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
			"control's HTTP/JSON API is for programs, not web pages: a request a browser makes for a page (it carries an Origin or Sec-Fetch-Site header) is refused, "+
				"so that no page can act with a browser's client certificate or from control's host")
	}
	if code, err := screenHost(r, overTLS); err != nil {
		return code, err
	}
	if hasBody(r) && r.ContentLength != 0 && !isJSON(r.Header.Get("Content-Type")) {
		return http.StatusUnsupportedMediaType, apierror.New(codes.InvalidArgument, apierror.ReasonInvalidArgument, "Content-Type",
			"the body is %q, not JSON: send it with Content-Type: application/json (curl -H 'Content-Type: application/json')", r.Header.Get("Content-Type"))
	}
	return 0, nil
}

// screenHost refuses, on a plaintext listener, a request addressed to
// anything but an IP address or localhost: the API's rule, and the
// console's.
func screenHost(r *http.Request, overTLS bool) (int, *apierror.Error) {
	if !overTLS && !literalHost(r.Host) {
		return http.StatusForbidden, apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
			"the request is addressed to %q: control's plaintext HTTP listener answers only requests addressed to an IP address or localhost "+
				"(a web page could point any other name at this host); use http://127.0.0.1:PORT", r.Host)
	}
	return 0, nil
}

// secFetch reports whether a browser says it made r for a page
// (Sec-Fetch-Site: same-origin, same-site or cross-site).
func secFetch(r *http.Request) bool {
	v := r.Header.Get("Sec-Fetch-Site")
	return v != "" && v != "none"
}

// literalHost reports whether a Host header names an IP address or
// localhost.
func literalHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost")
}

// isJSON reports whether a Content-Type is JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// hasBody reports whether the gateway reads r's body: the methods the
// HTTP mapping gives bodies to.
func hasBody(r *http.Request) bool {
	return r.Method == http.MethodPost || r.Method == http.MethodPatch
}

// bodyKey marks a request's context with its limitedBody.
type bodyKey struct{}

// limitedBody is a request body read through http.MaxBytesReader that
// remembers whether it was read past the bound: the gateway reports the
// failed read as a bad argument, which the error handler makes 413.
type limitedBody struct {
	io.ReadCloser
	over atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.over.Store(true)
	}
	return n, err
}

func (s *Server) tooLarge() *apierror.Error {
	return apierror.New(codes.ResourceExhausted, apierror.ReasonRequestTooLarge, "",
		"the request body is larger than control reads (%s): a publish of that size is over control's message bound anyway (lehr control --max-message-bytes)",
		humanize.IBytes(uint64(s.opts.MaxBodyBytes))).WithLimit("%d bytes", s.opts.MaxBodyBytes)
}

// handleError writes an error of the gateway or of the gRPC call as the
// gateway does — a google.rpc.Status in JSON, with the HTTP status of its
// code (AIP-193) — but a body over the bound as 413.
func (s *Server) handleError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if b, ok := r.Context().Value(bodyKey{}).(*limitedBody); ok && b.over.Load() {
		s.writeError(w, http.StatusRequestEntityTooLarge, s.tooLarge())
		return
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// writeError writes err as a google.rpc.Status in JSON with HTTP status
// code.
func (s *Server) writeError(w http.ResponseWriter, code int, err *apierror.Error) {
	body, merr := s.json.Marshal(err.GRPCStatus().Proto())
	if merr != nil {
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}
