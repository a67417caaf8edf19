package agent

import (
	"reflect"
	"sync"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/canary"
	sigs "lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// Host-level canary checks (docs/canary.md, "Host-level checks"): after
// the agent changes a namespace's version, it judges every interval
// whether the host got worse than it was before the change — its own
// series, no control hosts — and sends the result up in its Report, so
// control sees each canary host's own verdict beside the population
// judgement, and an operator sees it in "lehr zones status".
const (
	// HostBake is the intervals after a change the host-level checks look
	// at: one look per interval, their false-failure rate spent over all
	// of them (canary.HostOptions), so judging every interval does not
	// raise it.
	HostBake = 30
	// hostChecksFor is how many intervals after a change its host-level
	// checks are reported: the bake, then as long again with the final
	// verdict.
	hostChecksFor = 2 * HostBake
)

// hostChecks keeps, per namespace, the checks the latest SignalsRequest
// carried (a distributor watching the host for a canary analysis; nil:
// the defaults) and the latest host-level judgement, so a Report judges a
// namespace again only when a new interval completed.
type hostChecks struct {
	mu      sync.Mutex
	checks  map[string][]canary.Check
	judged  map[string]judged
	failing int // namespaces whose latest judgement is FAIL
}

// judged is one judgement and what it was of.
type judged struct {
	version uint64
	n       int // completed intervals judged
	checks  []canary.Check
	out     *lehrpb.HostChecks
}

// want records the checks of a distributor's SignalsRequest for ns. Checks
// the agent cannot use are dropped with a warning (the defaults run): a
// distributor passes on what control validated, so this means versions
// that disagree.
func (a *Agent) wantChecks(w *lehrpb.SignalsWanted) {
	cs, err := sigs.Checks(w.GetChecks())
	if err != nil {
		a.log.Warn("canary checks from the distributor are unusable; host-level checks use the defaults", "namespace", w.GetNamespace(), "err", err)
		cs = nil
	}
	h := &a.sig.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if cs == nil {
		delete(h.checks, w.GetNamespace())
		return
	}
	h.checks[w.GetNamespace()] = cs
}

// hostChecksOf returns the host-level checks of ns's latest version change
// for the Report, nil when there is none to report: no change among the
// kept intervals, a change from holding nothing, or one more than
// hostChecksFor intervals ago.
func (a *Agent) hostChecksOf(ns string) *lehrpb.HostChecks {
	h := &a.sig.host
	c, ok := a.sig.store.LastChange(ns)
	n := 0
	for _, v := range c.Metrics {
		n = len(v)
		break
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, had := h.judged[ns]
	if !ok || n-c.Index > hostChecksFor {
		h.forget(ns)
		return nil
	}
	checks := h.checks[ns]
	if had && prev.version == c.Version && prev.n == n && reflect.DeepEqual(prev.checks, checks) {
		return prev.out
	}
	res, err := canary.JudgeHost(canary.HostInput{Interval: c.Interval, ChangeIndex: c.Index, Metrics: c.Metrics, Checks: checks},
		canary.HostOptions{BakeIntervals: HostBake})
	if err != nil { // only for input the store never builds
		a.log.Error("host-level canary checks refused the agent's own series", "namespace", ns, "err", err)
		h.forget(ns)
		return nil
	}
	out := &lehrpb.HostChecks{Version: c.Version, PreviousVersion: c.Previous, ChangeTime: timestamppb.New(c.Time),
		Verdict: sigs.Verdict(res.Verdict), Reason: res.Reason, Look: int32(res.Look), Looks: int32(res.Looks), AfterIntervals: int32(res.AfterIntervals)}
	for _, cr := range res.Checks {
		r := &lehrpb.HostCheckResult{Name: cr.Name, Verdict: sigs.Verdict(cr.Verdict), Before: sigs.Finite(cr.Before), After: sigs.Finite(cr.After), P: sigs.Finite(cr.P), Threshold: sigs.Finite(cr.Threshold)}
		if cr.Verdict != canary.Pass {
			r.Explanation = cr.Explanation
		}
		out.Checks = append(out.Checks, r)
	}
	fail := res.Verdict == canary.Fail
	wasFail := had && prev.version == c.Version && prev.out.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
	if fail && !wasFail {
		a.log.Warn("host-level canary check failed: this host got worse after its change", "namespace", ns,
			"version", c.Version, "previous", c.Previous, "reason", res.Reason)
	}
	h.forget(ns)
	h.judged[ns] = judged{version: c.Version, n: n, checks: checks, out: out}
	if fail {
		h.failing++
	}
	return out
}

// forget drops ns's judgement. Called with mu held.
func (h *hostChecks) forget(ns string) {
	if j, ok := h.judged[ns]; ok && j.out.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
		h.failing--
	}
	delete(h.judged, ns)
}

// release forgets everything about ns: the agent no longer holds it.
func (h *hostChecks) release(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forget(ns)
	delete(h.checks, ns)
}

// failingCount returns the namespaces whose latest host-level judgement
// is FAIL (lehr_agent_host_checks_failing).
func (h *hostChecks) failingCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}
