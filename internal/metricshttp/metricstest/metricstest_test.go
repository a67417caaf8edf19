package metricstest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLint(t *testing.T) {
	tests := []struct {
		name, exposition string
		want             []string
	}{
		{"clean", "# HELP a_total As.\n# TYPE a_total counter\na_total 1\n", nil},
		{"no metadata", "a_total 1\n", []string{
			"a_total: no TYPE line (or untyped)", "a_total: no help text",
		}},
		{"empty help", "# HELP a_total\n# TYPE a_total counter\na_total 1\n", []string{
			"a_total: no help text",
		}},
		{"vmrange", "# HELP d_seconds D.\n# TYPE d_seconds gauge\nd_seconds{vmrange=\"1...2\"} 1\n", []string{
			"d_seconds: a vmrange bucket; a histogram has le buckets",
		}},
		{"a gauge named a counter", "# HELP g_total G.\n# TYPE g_total gauge\ng_total 1\n", []string{
			`g_total: non-counter metrics should not have "_total" suffix`,
		}},
		{"not a base unit", "# HELP d_milliseconds D.\n# TYPE d_milliseconds gauge\nd_milliseconds 1\n", []string{
			`d_milliseconds: use base unit "seconds" instead of "milliseconds"`,
		}},
		{"not the text format", "a b c\n", []string{
			`parse: text format parsing error in line 1: expected float as value, got "b"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Lint([]byte(tt.exposition))); diff != "" {
				t.Errorf("Lint (-want +got):\n%s", diff)
			}
		})
	}
}
