package devcluster_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// The files whose queries must name only metrics Lehr serves.
const (
	rulesFile     = "../../deploy/prometheus/lehr-alerts.yaml"
	dashboardFile = "../../deploy/grafana/lehr.json"
)

// checkNamesExported fails t for every metric a rule of rulesFile or a
// query of dashboardFile names that none of the expositions (control's, a
// distributor's, an agent's /metrics) has: a family, a histogram's
// _bucket, _sum or _count series, or a recording rule of rulesFile.
func checkNamesExported(t *testing.T, expositions map[string][]byte) {
	t.Helper()
	known := map[string]string{} // name → who serves it
	for daemon, body := range expositions {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s /metrics: %v", daemon, err)
		}
		for name, mf := range fams {
			known[name] = daemon
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				known[name+"_bucket"], known[name+"_sum"], known[name+"_count"] = daemon, daemon, daemon
			case dto.MetricType_SUMMARY:
				known[name+"_sum"], known[name+"_count"] = daemon, daemon
			}
		}
	}
	exprs := map[string]string{} // where → PromQL
	var rf struct {
		Groups []struct {
			Rules []struct {
				Record, Alert, Expr string
			}
		}
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			exprs[rulesFile+" "+r.Alert+r.Record] = r.Expr
			if r.Record != "" {
				known[r.Record] = rulesFile
			}
		}
	}
	b, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	dashboardQueries(dash, dashboardFile, exprs)
	if len(exprs) < 20 {
		t.Fatalf("%d queries in %s and %s; want theirs", len(exprs), rulesFile, dashboardFile)
	}
	for _, where := range slices.Sorted(maps.Keys(exprs)) {
		names := metricNames(exprs[where])
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, exprs[where])
		}
		for _, n := range names {
			if _, ok := known[n]; !ok {
				t.Errorf("%s: %s is not on any daemon's /metrics (query %q)", where, n, exprs[where])
			}
		}
	}
}

// dashboardQueries adds to out every query of a Grafana dashboard's JSON
// v: each "expr" string, and the selector of each label_values(selector,
// label) "query" of a template variable.
func dashboardQueries(v any, where string, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			s, isString := x.(string)
			switch {
			case k == "expr" && isString:
				out[where+" "+s] = s
			case k == "query" && isString && strings.HasPrefix(s, "label_values("):
				if i := strings.LastIndexByte(s, ','); i > 0 {
					out[where+" "+s] = s[len("label_values("):i]
				}
			default:
				dashboardQueries(x, where, out)
			}
		}
	case []any:
		for _, x := range v {
			dashboardQueries(x, where, out)
		}
	}
}

var (
	// What metricNames blanks out before it looks for names: strings,
	// label matchers, ranges and grouping labels.
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	// promKeywords are PromQL's operators and aggregations, which are
	// not metric names even when not followed by a parenthesis.
	promKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true,
		"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true,
		"inf": true, "nan": true,
	}
)

// metricNames returns the metric names PromQL expression e selects: a
// conservative tokenizer, not a parser (promtool parses the expressions:
// deploy/prometheus and deploy/grafana). It drops strings, label matchers,
// ranges, grouping label lists and numbers, then takes every identifier
// that is neither a keyword nor a function (followed by a parenthesis) nor
// a Grafana variable ($name). Whatever else it takes for a name is
// reported as unknown — a false alarm, never a miss.
func metricNames(e string) []string {
	e = promStrings.ReplaceAllString(e, `""`)
	e = promMatchers.ReplaceAllString(e, "{}")
	e = promRanges.ReplaceAllString(e, "[]")
	e = promGrouping.ReplaceAllString(e, "$1 ()")
	var out []string
	for _, m := range promIdent.FindAllStringIndex(e, -1) {
		name := e[m[0]:m[1]]
		if m[0] > 0 {
			if c := e[m[0]-1]; c == '$' || c == '.' || (c >= '0' && c <= '9') {
				continue // a variable, or a number's exponent or unit
			}
		}
		if promKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimLeft(e[m[1]:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum(lehr_distributor_connected_agents)`, []string{"lehr_distributor_connected_agents"}},
		{`sum by (job) (increase(lehr_control_rollbacks_total{reason="failed"}[15m])) > 0`, []string{"lehr_control_rollbacks_total"}},
		{"max by (job) (lehr_control_rollouts{state=\"running\"}) > 0\nunless on (job)\nsum by (job) (increase(lehr_control_rollout_stage_seconds_count[2h])) > 0",
			[]string{"lehr_control_rollouts", "lehr_control_rollout_stage_seconds_count"}},
		{`histogram_quantile(0.99, sum by (le, method) (rate(lehr_control_request_duration_seconds_bucket{method!="WatchGoals"}[$__rate_interval])))`,
			[]string{"lehr_control_request_duration_seconds_bucket"}},
		{`lehr_tls_certificate_expiry_timestamp_seconds - time() < 14 * 86400`, []string{"lehr_tls_certificate_expiry_timestamp_seconds"}},
		{`count(lehr_agent_connected == 0) or vector(1e3)`, []string{"lehr_agent_connected"}},
		{`namespace:lehr_distributor_namespace_lag:sum{namespace=~"$namespace"} offset 5m`, []string{"namespace:lehr_distributor_namespace_lag:sum"}},
		{`count by (version) (lehr_build_info and on (job, instance) lehr_agent_connected)`, []string{"lehr_build_info", "lehr_agent_connected"}},
		{`sum without (instance, le) (x) / ignoring(op) group_left(zone) y`, []string{"x", "y"}},
		{`label_replace(up, "a", "$1", "job", "(.*)")`, []string{"up"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q; want %q", tc.expr, got, tc.want)
		}
	}
}
