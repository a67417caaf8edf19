package service

import "lehr.dev/lehr/internal/metricshttp"

// MetricsHelp is the HELP text of the metric families the service
// registers (docs/operations.md, "Metrics"). Read only.
var MetricsHelp = metricshttp.Help{
	"lehr_control_acl_denials_total":            "Calls refused because the domain's ACL does not admit the caller for what it asked, by domain.",
	"lehr_control_audit_errors_total":           "Audit records that could not be written to the store (the calls they record were not failed for it).",
	"lehr_control_domain_max_stored_bytes":      "The domain's max_stored_bytes quota in force: bytes its namespaces may hold in the store, by domain.",
	"lehr_control_etcd_duration_seconds":        "Latency of control's etcd requests, by operation, in seconds.",
	"lehr_control_etcd_errors_total":            "etcd requests that failed, by operation.",
	"lehr_control_etcd_round_trips_total":       "etcd requests made, by operation.",
	"lehr_control_publishes_throttled_total":    "Publishes refused by the domain's publish rate (RATE_LIMITED) on this replica, by domain.",
	"lehr_control_publishes_total":              "Versions created, by kind: snapshot, patch, rollback, experiment (a committed policy experiment) or delete (a deleted policy).",
	"lehr_control_reader_denials_total":         "Distributor fetches refused because the domain's readers do not admit the distributor's zone, by domain.",
	"lehr_control_rejections_total":             "API calls that failed, by reason (VALUE_TOO_LARGE, STALE_VERSION…, or the gRPC code when there is none).",
	"lehr_control_request_duration_seconds":     "Latency of control's API calls, by method, in seconds (for the WatchGoals stream, its whole life).",
	"lehr_control_unknown_fields_dropped_total": "Requests carrying protobuf fields control does not know, dropped before anything ran, by method.",
	"lehr_control_zone_reports_total":           "Convergence reports received from distributors, by zone.",
}

// Bucket upper bounds, in seconds, of the service's latency histograms.
var (
	// requestBuckets: from half a millisecond (a read served from memory)
	// to 10 s (past the store's default 5 s timeout).
	requestBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// etcdBuckets: from 100 µs (a local read) to 10 s (compactions and
	// defragmentations are not bounded by the store's timeout).
	etcdBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)
