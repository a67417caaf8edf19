package control

import (
	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/previewhist"
	"lehr.dev/lehr/control/propagation"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/control/strategist"
	"lehr.dev/lehr/internal/metricshttp"
)

// metricsHelp is the HELP text of every metric family control serves: its
// own (the store's space, its certificates), the service's and the
// strategist's.
var metricsHelp = metricshttp.MergeHelp(service.MetricsHelp, strategist.MetricsHelp, alerts.MetricsHelp, metricsource.MetricsHelp, propagation.MetricsHelp, previewhist.MetricsHelp, metricshttp.TLSHelp, metricshttp.Help{
	"lehr_control_domain_stored_bytes":      "Bytes the domain's namespaces hold in the store, history included (against its max_stored_bytes quota), by domain.",
	"lehr_control_store_bytes":              "Size of etcd's database file as control last read it, in bytes.",
	"lehr_control_store_high_water_bytes":   "The store's high-water mark (quota minus reserve), in bytes: above it new content is refused, the safety path goes on.",
	"lehr_control_store_in_use_bytes":       "Bytes of etcd's database file holding data, as control last read it.",
	"lehr_control_store_nospace_alarm":      "1 while etcd's NOSPACE alarm is raised, else 0.",
	"lehr_control_store_quota_bytes":        "The store's quota (etcd's backend quota), in bytes.",
	"lehr_control_store_revision":           "etcd's revision as control last read it; its rate is the store's write rate.",
	"lehr_control_store_space_events_total": "Store space events, by event: refused (a write refused for space), compact, defragment, disarm (of the NOSPACE alarm).",
})
