// Package grafana holds Lehr's Grafana dashboard (lehr.json); its test
// checks that every query in it is valid PromQL, with promtool. That the
// metrics it names are ones Lehr serves is checked against running daemons
// (testenv/devcluster, TestMetricsArePrometheusNative). It has
// no Go code besides: nothing imports it.
package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"lehr.dev/lehr/internal/metricshttp/metricstest"
)

const dashboardFile = "lehr.json"

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// labelValues is a template variable's query: Grafana's
// label_values(selector, label), whose selector is PromQL.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// grafanaVars are the variables Grafana substitutes in a query, with a
// value of the same PromQL type for checking it: a range for the
// intervals, a regular expression for the dashboard's own variables.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"$namespace", ".*",
)

// expressions returns the dashboard's PromQL queries, named by where
// they are ("panel 3 A", "variable namespace"), with Grafana's variables
// replaced by values of their type.
func expressions(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q, title %q; want both", dashboardFile, d.UID, d.Title)
	}
	out := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %d %q: another panel has its id", p.ID, p.Title)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q: datasource %+v; want the dashboard's Prometheus variable ${datasource}", p.ID, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q: no query", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %d %s", p.ID, tg.RefID)] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q; want label_values(selector, label)", v.Name, q.Query)
			continue
		}
		out["variable "+v.Name] = m[1]
	}
	for where, e := range out {
		e = grafanaVars.Replace(e)
		if strings.Contains(e, "$") {
			t.Errorf("%s: %q uses a variable the test does not know (grafanaVars)", where, e)
		}
		out[where] = e
	}
	return out
}

// TestQueriesArePromQL has promtool parse every query of the dashboard,
// as the expressions of recording rules ("promtool check rules"), which
// needs no Prometheus server nor Prometheus's Go module.
func TestQueriesArePromQL(t *testing.T) {
	exprs := expressions(t)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in %s; want the dashboard's", len(exprs), dashboardFile)
	}
	path, err := metricstest.PromtoolPath()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool: %v; run scripts/deps.sh, which installs it into bin/", err)
		}
		t.Skipf("promtool: %v; scripts/deps.sh installs it into bin/", err)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	nonName := regexp.MustCompile(`[^a-zA-Z0-9_]+`)
	for where, e := range exprs {
		rules = append(rules, rule{Record: "grafana:" + nonName.ReplaceAllString(where, "_"), Expr: e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "check", "rules", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\nrules:\n%s", err, out, b)
	}
}
