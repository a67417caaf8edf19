package fanout_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// hostSignals is a simulated agent's store: 10-second intervals whose
// "requests" value is the interval's index since the epoch, so any piece
// says where it came from. Each request's checks are sent on checks.
func hostSignals(now time.Time, checks chan<- []*lehrpb.CanaryCheck) func(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals {
	return func(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals {
		select {
		case checks <- w.GetChecks():
		default:
		}
		ns := w.GetNamespace()
		const iv = 10
		last := now.Unix()/iv*iv - iv // the last complete interval
		first := last - 89*iv         // 90 intervals kept
		s := &lehrpb.NamespaceSignals{Namespace: ns, IntervalSeconds: iv, First: first}
		vals := []float64{}
		for t := first; t <= last; t += iv {
			s.Versions = append(s.Versions, 1)
			vals = append(vals, float64(t/iv))
		}
		s.Series = []*lehrpb.SignalSeries{{Name: "requests", Values: vals}}
		return s
	}
}

// A candidate asking for analysis makes the distributor watch its cohort's
// hosts and as many others, lowest cohort positions first: it asks each
// for its signals over the last SignalsWindow, keeps them, and forgets
// them when the analysis ends. Hosts outside the watch are never asked.
func TestAnalysisWatchesCohortAndControlHosts(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	v1 := e.publish(ns, props(3, "v1"))
	now := time.Now()
	hosts := []string{"host-1", "host-2", "host-3", "host-4", "host-5"}
	checks := make(chan []*lehrpb.CanaryCheck, 100)
	for _, h := range hosts {
		a := e.dial(h, agenttest.Options{Subscriptions: []string{ns}, Signals: hostSignals(now, checks)})
		waitVersion(t, a, ns, v1)
	}
	v2 := e.stage(ns, props(3, "v2"))
	e.cache.Pin(ns, v1.Seq, v2.Seq)
	// host-1 is the canary; two control hosts: the two lowest positions
	// among the others.
	const salt = "rollout-9"
	others := slices.Clone(hosts[1:])
	slices.SortFunc(others, func(a, b string) int { return int(cohort.Position(salt, a)) - int(cohort.Position(salt, b)) })
	bound := 0.05
	errRatio := &lehrpb.CanaryCheck{Name: "errors", Ratio: &lehrpb.CanaryRatio{Numerator: "request_errors", Denominator: "requests"}, Max: &bound}
	e.srv.SetGoal(fanout.Goal{Stable: v1, Candidate: v2, Cohort: cohort.Cohort{Hosts: []string{"host-1"}, Salt: salt}, Analysis: 2,
		Checks: []*lehrpb.CanaryCheck{errRatio}})

	var got []*lehrpb.HostSignals
	wait.For(t, "the watched hosts' signals", func() bool {
		e.srv.RequestSignals(now)
		got = e.srv.Signals()
		return len(got) == 3
	})
	type hc struct {
		host   string
		cohort bool
	}
	var seen []hc
	for _, h := range got {
		seen = append(seen, hc{h.GetHostId(), h.GetCohort()})
		s := h.GetSignals()
		// SignalsWindow (10 min) back from now: 60 intervals, the first
		// aligned at or after now - 10 min.
		if n := len(s.GetVersions()); n < 59 || n > 61 {
			t.Errorf("%s: %d intervals kept, want about 60 (SignalsWindow)", h.GetHostId(), n)
		}
		if got, want := s.GetSeries()[0].GetValues()[0], float64(s.GetFirst()/10); got != want {
			t.Errorf("%s: first value %v, want %v (the interval's own index)", h.GetHostId(), got, want)
		}
	}
	want := []hc{{"host-1", true}, {others[0], false}, {others[1], false}}
	if !slices.Equal(seen, want) {
		t.Errorf("watched %v, want %v (the canary first, then the two lowest positions)", seen, want)
	}
	// Every request carries the analysis's checks, for the hosts'
	// host-level checks.
	for range 3 {
		if cs := <-checks; len(cs) != 1 || !proto.Equal(cs[0], errRatio) {
			t.Errorf("a SignalsRequest carried checks %v; want the analysis's %v", cs, errRatio)
		}
	}

	// The analysis ends: nothing is watched or kept.
	e.srv.SetGoal(fanout.Goal{Stable: v2})
	e.srv.RequestSignals(now)
	if got := e.srv.Signals(); len(got) != 0 {
		t.Errorf("after the candidate ended, %d hosts' signals are still reported", len(got))
	}
}
