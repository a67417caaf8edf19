// Package promapi holds what Lehr's clients of Prometheus-compatible HTTP
// APIs share: the base URL an operator gives, checked and completed with
// the API's path; the name shown in reasons and logs, without its
// credentials; and the HTTP client.
//
// Imported by control/alerts (the monitoring check's alerts source) and
// control/metricsource (the canary checks' metrics source).
package promapi

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Endpoint is a checked base URL with its API path.
type Endpoint struct {
	// URL is the base URL followed by the API path, credentials
	// (user:password@, sent as basic authentication) included.
	URL string
	// Name is the base URL without its credentials: what reasons show.
	Name string
}

// Parse checks raw, the base URL of a Prometheus-compatible API (http or
// https, a host, no query or fragment; a URL already ending in apiPath is
// taken as is), for what ("alerts", "metrics source"), whose servers are
// servers ("Prometheus or vmalert"), which uses apiPath as use says
// ("reads", "posts to"). withTLS says TLS options were given, which need
// an https URL.
func Parse(what, servers, use, raw, apiPath string, withTLS bool) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s: URL %q: %w", what, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return Endpoint{}, fmt.Errorf("%s: URL %q: want http://HOST:PORT or https://HOST:PORT, e.g. http://prometheus:9090 (%s)", what, raw, servers)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, fmt.Errorf("%s: URL %q: want no query or fragment, only the base URL (the source %s its %s)", what, raw, use, apiPath)
	}
	if withTLS && u.Scheme != "https" {
		return Endpoint{}, fmt.Errorf("%s: URL %q: TLS options are for an https URL", what, raw)
	}
	full := *u
	full.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(full.Path, apiPath) {
		full.Path += apiPath
	}
	shown := full
	shown.User = nil
	return Endpoint{URL: full.String(), Name: strings.TrimSuffix(shown.String(), apiPath)}, nil
}

// Client is an HTTP client of its own (not http.DefaultClient's pool)
// with tc for https and every request bounded by timeout.
func Client(tc *tls.Config, timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Transport: tr, Timeout: timeout}
}
