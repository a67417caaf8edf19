package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// The console's browser rules. Its callers are browsers, which act for
// whatever page they show, with the client certificate they hold or from
// the host they run on; so:
//
//   - A GET changes nothing, and may come from anywhere as a navigation
//     (a link pasted in a ticket opens the page), but not as part of
//     another site's page: a request another site makes (Sec-Fetch-Site
//     cross-site or same-site) is refused unless it is a top-level
//     navigation (Sec-Fetch-Mode navigate, Sec-Fetch-Dest document). And
//     every answer forbids framing (X-Frame-Options, CSP frame-ancestors)
//     and reading from other origins (Cross-Origin-Resource-Policy; no
//     CORS header is ever sent).
//   - A POST (the only way to act) must come from the console's own
//     origin — net/http's CrossOriginProtection: Sec-Fetch-Site
//     same-origin, or an Origin whose host is the request's — be a form,
//     be small, and carry the token of the confirmation page that
//     offered it: an HMAC, under the console's key, of the caller's
//     transport identity (its client certificate, or "plaintext"), the
//     action and its target, and an expiry. So a page of another origin
//     cannot post, and a post cannot skip the confirmation or be replayed
//     by another caller or for another rollout.
//   - Pages load nothing from elsewhere and run no script
//     (Content-Security-Policy), and no URL carries a secret: the token
//     travels in the form's body.
//
// The plaintext listener's host rule (requests addressed only to an IP
// address or localhost, against DNS rebinding) is httpapi's, before the
// console sees a request.

// maxFormBytes bounds a form's body.
const maxFormBytes = 16 << 10

// setHeaders sets every answer's security headers.
func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	// Pages show what their caller may read, as of now.
	h.Set("Cache-Control", "no-store")
}

var crossOrigin = http.NewCrossOriginProtection()

// screen returns the HTTP status and reason refusing r, or 0.
func screen(r *http.Request) (int, string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		site := r.Header.Get("Sec-Fetch-Site")
		if site != "cross-site" && site != "same-site" {
			return 0, ""
		}
		if r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" {
			return 0, ""
		}
		return http.StatusForbidden, "another site's page asked for this (Sec-Fetch-Site " + site + "): the console's pages open only as pages of their own, never inside or for another site's"
	case http.MethodPost:
		if err := crossOrigin.Check(r); err != nil {
			return http.StatusForbidden, "a form may be posted to the console only from the console's own pages (same origin): " + err.Error()
		}
		if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			return http.StatusUnsupportedMediaType, "the console takes only its own forms (application/x-www-form-urlencoded); programs use the HTTP/JSON API (/v1/…)"
		}
	}
	return 0, ""
}

// callerBinding names the caller of r as its transport knows it, for a
// token: the client certificate's SHA-256, or how it came without one.
func callerBinding(r *http.Request) string {
	switch {
	case r.TLS == nil:
		return "plaintext"
	case len(r.TLS.PeerCertificates) == 0:
		return "tls"
	}
	sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
	return "cert:" + hex.EncodeToString(sum[:])
}

// token returns a form token for action on target by the caller of r,
// good until now + TokenTTL.
func (c *Console) token(r *http.Request, action, target string) string {
	exp := c.opts.Now().Add(c.opts.TokenTTL).Unix()
	b := binary.BigEndian.AppendUint64(nil, uint64(exp))
	b = append(b, c.mac(callerBinding(r), action, target, exp)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c *Console) mac(binding, action, target string, exp int64) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("lehr-console-form-v1\x00" + binding + "\x00" + action + "\x00" + target + "\x00"))
	m.Write(binary.BigEndian.AppendUint64(nil, uint64(exp)))
	return m.Sum(nil)
}

// Why a form's token is refused.
var (
	errNoToken      = errors.New("the form has no token: post it from the console's confirmation page")
	errTokenExpired = errors.New("the confirmation page has expired: open it again")
	errTokenInvalid = errors.New("the form's token is not for this caller, action and rollout (or control restarted since it was served): open the confirmation page again")
)

// checkToken checks a form's token for action on target by the caller
// of r.
func (c *Console) checkToken(r *http.Request, tok, action, target string) error {
	if tok == "" {
		return errNoToken
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 8+sha256.Size {
		return errTokenInvalid
	}
	exp := int64(binary.BigEndian.Uint64(b))
	if !hmac.Equal(b[8:], c.mac(callerBinding(r), action, target, exp)) {
		return errTokenInvalid
	}
	if c.opts.Now().After(time.Unix(exp, 0)) {
		return errTokenExpired
	}
	return nil
}
