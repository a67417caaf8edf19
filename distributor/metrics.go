package distributor

import (
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/metricshttp"
)

// metricsHelp is the HELP text of every metric family a distributor
// serves: its own (the link to control, what it holds, its certificates),
// the fanout's and the version cache's.
var metricsHelp = metricshttp.MergeHelp(fanout.MetricsHelp, versions.MetricsHelp, metricshttp.TLSHelp, metricshttp.Help{
	"lehr_distributor_cache_bytes":                    "Bytes of namespace content in the version cache.",
	"lehr_distributor_cache_versions":                 "Versions in the version cache.",
	"lehr_distributor_control_connected":              "1 while the goal watch is connected to control, else 0.",
	"lehr_distributor_control_reconnects_total":       "Reconnections of the goal watch to control.",
	"lehr_distributor_control_store_mismatches_total": "Answers refused from a control replica serving another store than the one the distributor follows.",
	"lehr_distributor_goals":                          "Namespaces with a goal in the distributor's zone.",
	"lehr_distributor_namespaces_wanted":              "Namespaces the distributor's agents subscribe to (the only ones whose content it loads).",
	"lehr_distributor_report_errors_total":            "Convergence reports to control that failed.",
	"lehr_distributor_reports_total":                  "Convergence reports sent to control.",
	"lehr_distributor_zone_distributors":              "The zone's distributors as control counted them at the last report (0 before); the per-zone quotas are split by it.",
})
