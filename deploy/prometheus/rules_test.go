// Package prometheus holds Lehr's Prometheus rules (lehr-alerts.yaml) and
// their unit tests (lehr-alerts.test.yaml); its test runs promtool on
// them and checks that every alert is documented and tested. It has no
// Go code besides: nothing imports it.
package prometheus

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"lehr.dev/lehr/internal/metricshttp/metricstest"
)

const (
	rulesFile = "lehr-alerts.yaml"
	testsFile = "lehr-alerts.test.yaml"
	docsFile  = "../../docs/operations.md"
	// docsURL is where the packages install docs/operations.md, as the
	// systemd units' Documentation= has it.
	docsURL = "file:///usr/share/doc/lehr/operations.md"
)

// promtool returns the promtool to run, skipping t without one — or
// failing it under CI, where scripts/test.sh installs one first.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := metricstest.PromtoolPath()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool: %v; run scripts/deps.sh, which installs it into bin/", err)
		}
		t.Skipf("promtool: %v; scripts/deps.sh installs it into bin/", err)
	}
	return path
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	path := promtool(t)
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRulesCheck runs "promtool check rules": the file parses, every
// expression is valid PromQL, every template renders.
func TestRulesCheck(t *testing.T) {
	out := runPromtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules %s printed no SUCCESS:\n%s", rulesFile, out)
	}
	t.Logf("promtool check rules %s:\n%s", rulesFile, out)
}

// TestRulesUnitTests runs "promtool test rules": each alert fires on its
// input series with the labels and annotations expected, and only there.
func TestRulesUnitTests(t *testing.T) {
	out := runPromtool(t, "test", "rules", testsFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules %s printed no SUCCESS:\n%s", testsFile, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type testFile struct {
	Tests []struct {
		AlertRuleTests []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTests []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// Rules returns the rules of lehr-alerts.yaml.
func rules(t *testing.T) []rule {
	var f ruleFile
	readYAML(t, rulesFile, &f)
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// sections returns the sections of a Markdown document by the anchors
// GitHub (and most Markdown renderers) give their headings — lower case,
// punctuation but - and _ dropped, spaces as - — each with its heading and
// text up to the next heading.
func sections(doc string) map[string]string {
	out := map[string]string{}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	var cur string
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "#") {
			h := strings.TrimSpace(strings.TrimLeft(line, "#"))
			cur = strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		}
		out[cur] += line
	}
	return out
}

// TestAlertsAreDocumentedAndTested checks what promtool does not: every
// alert has a severity, a summary, a description and a runbook — an entry
// of docs/operations.md, "Alerts and runbooks", that names it — and lehr-alerts.test.yaml has, for every alert, a time
// where it fires and one where it must not; and for every recording rule
// a test of its expression.
func TestAlertsAreDocumentedAndTested(t *testing.T) {
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	heads := sections(string(doc))
	if _, ok := heads["alerts-and-runbooks"]; !ok {
		t.Errorf("%s has no section \"Alerts and runbooks\"", docsFile)
	}
	var tf testFile
	readYAML(t, testsFile, &tf)
	fires, quiet, exprTested := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tt := range tf.Tests {
		for _, a := range tt.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
		for _, e := range tt.PromQLExprTests {
			exprTested[strings.TrimSpace(e.Expr)] = true
		}
	}
	var names []string
	for _, r := range rules(t) {
		if r.Record != "" {
			if !exprTested[r.Record] {
				t.Errorf("recording rule %s: no promql_expr_test of it in %s", r.Record, testsFile)
			}
			continue
		}
		name := r.Alert
		names = append(names, name)
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q; want critical, warning or info", name, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", name, a)
			}
		}
		rb, url := r.Annotations["runbook"], r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(rb, "docs/operations.md#")
		switch {
		case !ok:
			t.Errorf("%s: runbook %q; want docs/operations.md#<anchor>", name, rb)
		case heads[anchor] == "":
			t.Errorf("%s: runbook %s: %s has no heading with that anchor (add one under \"Alerts and runbooks\")", name, rb, docsFile)
		case !strings.Contains(heads[anchor], name):
			t.Errorf("%s: runbook %s: the entry does not name the alert", name, rb)
		}
		if want := docsURL + "#" + anchor; url != want {
			t.Errorf("%s: runbook_url %q; want %q", name, url, want)
		}
		if !fires[name] {
			t.Errorf("%s: %s has no alert_rule_test where it fires", name, testsFile)
		}
		if !quiet[name] {
			t.Errorf("%s: %s has no alert_rule_test where it must not fire (exp_alerts: [])", name, testsFile)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	for name := range fires {
		if !slices.Contains(names, name) {
			t.Errorf("%s tests alert %s, which %s does not define", testsFile, name, rulesFile)
		}
	}
}
