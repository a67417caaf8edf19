package fanout

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// Canary-analysis signals: a candidate goal with Analysis > 0 makes the
// fanout watch some of the namespace's hosts — its cohort's and as many
// outside it, lowest cohort positions first — and keep their per-interval
// signals (wire Signals), which the distributor reports to control with
// zone status. Everything else about an agent stays flat: only watched
// hosts are asked, and each time only for the intervals not held yet.
const (
	// MaxAnalysis bounds Goal.Analysis.
	MaxAnalysis = 100
	// SignalsWindow is how far back the first request to a newly watched
	// host reaches: the "before" of the analysis.
	SignalsWindow = 10 * time.Minute
	// maxSignalIntervals bounds what is kept per host and namespace.
	maxSignalIntervals = 180
	// MaxSignalsReportBytes bounds the signals of one zone-status report.
	MaxSignalsReportBytes = 512 << 10
)

// watched is one host of one namespace an analysis watches.
type watched struct {
	ss     *session
	ns     string
	cohort bool
	checks []*lehrpb.CanaryCheck
}

// watchedHosts returns what every candidate's analysis watches.
func (s *Server) watchedHosts() []watched {
	var out []watched
	sessions := s.sessionList()
	for ns, g := range *s.goals.Load() {
		if g.Candidate == nil || g.Analysis <= 0 {
			continue
		}
		type hp struct {
			ss  *session
			pos uint32
			in  bool
		}
		var hosts []hp
		for _, ss := range sessions {
			if ss.subscribed(ns) {
				hosts = append(hosts, hp{ss, cohort.Position(g.Cohort.Salt, ss.host), g.Cohort.Has(ss.host)})
			}
		}
		slices.SortFunc(hosts, func(a, b hp) int { return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.ss.host, b.ss.host)) })
		n := min(g.Analysis, MaxAnalysis)
		in, out2 := 0, 0
		for _, h := range hosts {
			switch {
			case h.in && in < n:
				in++
			case !h.in && out2 < n:
				out2++
			default:
				continue
			}
			out = append(out, watched{h.ss, ns, h.in, g.Checks})
		}
	}
	return out
}

// RequestSignals asks every watched host, on a connection that negotiated
// wire.CapSignals, for the intervals of its namespaces it has not sent
// yet (SignalsWindow back for a host newly watched), and forgets the
// signals of hosts no longer watched. The distributor calls it once per
// report interval; answers arrive on the agents' control streams.
func (s *Server) RequestSignals(now time.Time) {
	want := map[*session][]*lehrpb.SignalsWanted{}
	keep := map[*session]map[string]bool{}
	for _, w := range s.watchedHosts() {
		if keep[w.ss] == nil {
			keep[w.ss] = map[string]bool{}
		}
		keep[w.ss][w.ns] = true
		if !w.ss.signalsCap {
			continue
		}
		want[w.ss] = append(want[w.ss], &lehrpb.SignalsWanted{Namespace: w.ns, Since: w.ss.signalsSince(w.ns, now), Checks: w.checks})
	}
	for _, ss := range s.sessionList() {
		ss.dropSignalsExcept(keep[ss])
		ws := want[ss]
		for len(ws) > 0 {
			n := min(len(ws), wire.MaxSignalsWanted)
			if err := ss.send(&lehrpb.SignalsRequest{Namespaces: ws[:n]}); err != nil {
				ss.log.Debug("send SignalsRequest", "err", err)
				break // the session is ending
			}
			ws = ws[n:]
		}
	}
}

// Signals returns the signals kept of every watched host, by host and
// namespace, at most MaxSignalsReportBytes in all (hosts of the cohort
// first, then by host id).
func (s *Server) Signals() []*lehrpb.HostSignals {
	var out []*lehrpb.HostSignals
	for _, w := range s.watchedHosts() {
		if sig := w.ss.signalsOf(w.ns); sig != nil {
			out = append(out, &lehrpb.HostSignals{HostId: w.ss.host, Cohort: w.cohort, Signals: sig})
		}
	}
	slices.SortFunc(out, func(a, b *lehrpb.HostSignals) int {
		if a.GetCohort() != b.GetCohort() {
			if a.GetCohort() {
				return -1
			}
			return 1
		}
		return cmp.Or(strings.Compare(a.GetHostId(), b.GetHostId()), strings.Compare(a.GetSignals().GetNamespace(), b.GetSignals().GetNamespace()))
	})
	size := 0
	for i, h := range out {
		if size += proto.Size(h); size > MaxSignalsReportBytes {
			s.log.Warn("zone status: signals of watched hosts over the report bound; leaving some out", "kept", i, "of", len(out))
			return out[:i]
		}
	}
	return out
}

// signalsSince returns the start of the first interval of ns the session
// lacks: the one after the last kept, or SignalsWindow before now.
func (ss *session) signalsSince(ns string, now time.Time) int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st := ss.ns[ns]; st != nil && st.signals != nil {
		return signals.End(st.signals)
	}
	return now.Add(-SignalsWindow).Unix()
}

// signalsOf returns a copy of what the session keeps of ns's signals.
func (ss *session) signalsOf(ns string) *lehrpb.NamespaceSignals {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st := ss.ns[ns]; st != nil && st.signals != nil {
		return proto.CloneOf(st.signals)
	}
	return nil
}

// dropSignalsExcept forgets the signals of every namespace not in keep.
func (ss *session) dropSignalsExcept(keep map[string]bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ns, st := range ss.ns {
		if !keep[ns] {
			st.signals = nil
		}
	}
}

// onSignals merges an agent's answer into what the session keeps of each
// subscribed namespace.
func (ss *session) onSignals(m *lehrpb.Signals) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, sig := range m.GetNamespaces() {
		if st := ss.ns[sig.GetNamespace()]; st != nil && st.subscribed {
			st.signals = signals.Merge(st.signals, sig, maxSignalIntervals)
		}
	}
}
