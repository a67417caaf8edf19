package promapi

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		raw      string
		tls      bool
		url      string
		name     string
		errorHas string
	}{
		{raw: "http://prometheus:9090", url: "http://prometheus:9090/api/v1/x", name: "http://prometheus:9090"},
		{raw: "https://u:pw@vm.example/select/0/prometheus/", tls: true, url: "https://u:pw@vm.example/select/0/prometheus/api/v1/x", name: "https://vm.example/select/0/prometheus"},
		{raw: "http://prometheus:9090/api/v1/x", url: "http://prometheus:9090/api/v1/x", name: "http://prometheus:9090"},
		{raw: "prometheus:9090", errorHas: "want http://HOST:PORT or https://HOST:PORT, e.g. http://prometheus:9090 (Prometheus)"},
		{raw: "http://p:9090/?a=b", errorHas: "want no query or fragment, only the base URL (the source reads its /api/v1/x)"},
		{raw: "http://p:9090", tls: true, errorHas: "TLS options are for an https URL"},
	} {
		ep, err := Parse("thing", "Prometheus", "reads", tc.raw, "/api/v1/x", tc.tls)
		switch {
		case tc.errorHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errorHas) || !strings.HasPrefix(err.Error(), "thing: URL ") {
				t.Errorf("Parse(%q) = %+v, %v; want an error saying %q", tc.raw, ep, err, tc.errorHas)
			}
		case err != nil || ep.URL != tc.url || ep.Name != tc.name:
			t.Errorf("Parse(%q) = %+v, %v; want URL %q, name %q", tc.raw, ep, err, tc.url, tc.name)
		}
	}
}
