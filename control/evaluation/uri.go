package evaluation

import (
	"fmt"
	"net/url"
	"strings"
)

// ConsolePath is the path of evaluation id ("ns@v/name") in control's
// operator console, each of its segments escaped: an evaluation's id
// resolves to its page (CanaryEvaluation.uri).
func ConsolePath(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return consoleCanary + strings.Join(parts, "/")
}

// consoleCanary is where the console serves evaluations
// (control/console).
const consoleCanary = "/console/canary/"

// IDOfURI returns the evaluation id an evaluation's console URI (or its
// path) names, so that a link anyone pasted can be shown by id; a string
// that is not such a URI is returned unchanged.
func IDOfURI(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return s, nil // not a URI: an id
	}
	// The console's path may follow a proxy's prefix (--console-url).
	_, rest, found := strings.Cut(u.EscapedPath(), consoleCanary)
	if !found || !strings.Contains(s, "/") || (u.Scheme == "" && !strings.HasPrefix(s, "/")) {
		return s, nil
	}
	id, err := url.PathUnescape(rest)
	if err != nil || id == "" {
		return "", fmt.Errorf("%q names no evaluation: want %sNS@VERSION/NAME", s, consoleCanary)
	}
	return id, nil
}

// CheckConsoleURL checks the base URL people reach control's console at:
// http or https, a host, no query or fragment.
func CheckConsoleURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("console URL %q: want http(s)://HOST[:PORT][/PREFIX], e.g. https://lehr.example.com:8443, without credentials, query or fragment", raw)
	}
	return nil
}
