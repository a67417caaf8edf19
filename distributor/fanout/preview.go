package fanout

import (
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// MaxPreviewReport bounds the (namespace, experiment, etag pair) entries of
// Preview.
const MaxPreviewReport = 1000

// Preview sums the policy-preview counts of the agents' latest reports
// per namespace, experiment and pair of etags (preview.Tally): flat in the
// number of agents, like Health. Agents report totals since they started,
// so the sum is the zone's total over its connected agents. Sorted; at
// most MaxPreviewReport entries in all (beyond it, the pairs seen least
// recently in this pass are left out).
func (s *Server) Preview() []*lehrpb.NamespacePreviewCounts {
	sums := preview.NewTally(MaxPreviewReport)
	for _, ss := range s.sessionList() {
		ss.eachSubscribed(func(ns string, st *nsState) {
			for _, hc := range st.report.GetPreview() {
				c := hc.GetCounts()
				sums.Add(preview.Key{Namespace: ns, Experiment: hc.GetExperiment(), LiveEtag: c.GetLiveEtag(), ExperimentEtag: c.GetExperimentEtag()}, c)
			}
		})
	}
	return sums.Namespaces()
}
