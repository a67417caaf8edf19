package strategist

import "lehr.dev/lehr/internal/metricshttp"

// MetricsHelp is the HELP text of the metric families the strategist
// registers (docs/operations.md, "Rollouts"). It also counts
// lehr_control_publishes_total{kind="rollback"}, described by the
// service's MetricsHelp. Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_control_rollbacks_total":       "Rollouts ended and rolled back, by reason: failed (a canary verdict) or aborted (an operator).",
	"lehr_control_rollout_stage_seconds": "Time from a rollout entering a stage to passing it, bake included, in seconds (on the leading replica).",
	"lehr_control_rollouts":              "Rollouts, by state (on the leading replica; 0 on the others).",
	"lehr_control_strategist_leader":     "1 while this replica leads the rollout strategist, else 0; one replica of a cluster leads.",
}

// stageBuckets are the upper bounds of lehr_control_rollout_stage_seconds:
// from 5 s (the bakes of "lehr dev") to a day, around the default bakes of
// 10 and 30 minutes.
var stageBuckets = []float64{5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200, 14400, 28800, 86400}
