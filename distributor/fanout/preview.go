package fanout

import (
	"cmp"
	"slices"
	"strings"

	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

// MaxPreviewReport bounds the (namespace, experiment, etag pair) entries of
// Preview.
const MaxPreviewReport = 1000

// Preview sums the policy-preview counts of the agents' latest reports
// per namespace, experiment and pair of etags: flat in the number of
// agents, like Health. Agents report totals since they started, so the
// sum is the zone's total over its connected agents. Sorted; at most
// MaxPreviewReport entries in all.
func (s *Server) Preview() []*lehrpb.NamespacePreviewCounts {
	type key struct{ ns, exp, live, etag string }
	sums := map[key]*lehrpb.PreviewCounts{}
	for _, ss := range s.sessionList() {
		ss.eachSubscribed(func(ns string, st *nsState) {
			for _, hc := range st.report.GetPreview() {
				c := hc.GetCounts()
				k := key{ns, hc.GetExperiment(), c.GetLiveEtag(), c.GetExperimentEtag()}
				t := sums[k]
				if t == nil {
					if len(sums) == MaxPreviewReport {
						continue
					}
					t = &lehrpb.PreviewCounts{LiveEtag: k.live, ExperimentEtag: k.etag}
					sums[k] = t
				}
				policy.AddCounts(t, c)
			}
		})
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.exp, b.exp),
			strings.Compare(a.live, b.live), strings.Compare(a.etag, b.etag))
	})
	var out []*lehrpb.NamespacePreviewCounts
	for _, k := range keys {
		if len(out) == 0 || out[len(out)-1].GetNamespace() != k.ns {
			out = append(out, &lehrpb.NamespacePreviewCounts{Namespace: k.ns})
		}
		last := out[len(out)-1]
		last.Counts = append(last.Counts, &lehrpb.HostPreviewCounts{Experiment: k.exp, Counts: sums[k]})
	}
	return out
}
