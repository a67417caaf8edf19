package strategist

// stageBuckets are the upper bounds of lehr_control_rollout_stage_seconds:
// from 5 s (the bakes of "lehr dev") to a day, around the default bakes of
// 10 and 30 minutes.
var stageBuckets = []float64{5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200, 14400, 28800, 86400}
