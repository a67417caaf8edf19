package fanout_test

import (
	"maps"
	"slices"
	"testing"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/testenv/wait"
)

// A goal with a candidate moves only the hosts of its cohort; a rollback is
// a newer version with the old content, so no host ever goes backwards,
// and a host outside the cohort never receives the candidate.
func TestCandidateGoesToItsCohortOnly(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	good := props(10, "good")
	v1 := e.publish(ns, good)
	canary := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}})
	other := e.dial("host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, canary, ns, v1)
	waitVersion(t, other, ns, v1)

	bad := props(10, "bad")
	v2 := e.stage(ns, bad)
	e.cache.Pin(ns, v1.Seq, v2.Seq)
	e.srv.SetGoal(fanout.Goal{Stable: v1, Candidate: v2, Cohort: cohort.Cohort{Hosts: []string{"host-1"}, Salt: "rollout-1"}})
	waitVersion(t, canary, ns, v2)
	wait.For(t, "no agent lagging its own goal", func() bool { return e.srv.Lag(ns) == 0 })

	// Rolled back: version 3 has version 1's content and becomes the
	// stable goal for everyone.
	v3 := e.stage(ns, good)
	e.cache.Pin(ns, v3.Seq)
	e.srv.SetGoal(fanout.Goal{Stable: v3})
	waitVersion(t, canary, ns, v3)
	waitVersion(t, other, ns, v3)

	for _, a := range []*agenttest.Agent{canary, other} {
		var seen []uint64
		for _, u := range a.Applied(ns) {
			seen = append(seen, u.Version)
		}
		want := []uint64{1, 3}
		if a == canary {
			want = []uint64{1, 2, 3}
		}
		if !slices.Equal(seen, want) {
			t.Errorf("%s applied versions %v, want %v", a.HostID(), seen, want)
		}
	}
}

// A candidate that asks for a sample moves nobody yet; the distributor
// reports its subscribed hosts with the lowest cohort positions, from
// which control names the canary hosts.
func TestSampleReportsLowestPositions(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	v1 := e.publish(ns, props(3, "v1"))
	var agents []*agenttest.Agent
	for _, h := range []string{"host-1", "host-2", "host-3"} {
		a := e.dial(h, agenttest.Options{Subscriptions: []string{ns}})
		waitVersion(t, a, ns, v1)
		agents = append(agents, a)
	}
	e.dial("host-4", agenttest.Options{}) // subscribes to nothing: never sampled
	v2 := e.stage(ns, props(3, "v2"))
	e.cache.Pin(ns, v1.Seq, v2.Seq)
	e.srv.SetGoal(fanout.Goal{Stable: v1, Candidate: v2, Cohort: cohort.Cohort{Salt: "rollout-7"}, Sample: 2})

	want := []string{"host-1", "host-2", "host-3"}
	slices.SortFunc(want, func(a, b string) int {
		return int(cohort.Position("rollout-7", a)) - int(cohort.Position("rollout-7", b))
	})
	got := e.srv.Samples()
	if len(got) != 1 || got[0].GetNamespace() != ns || got[0].GetSalt() != "rollout-7" || !slices.Equal(got[0].GetHosts(), want[:2]) {
		t.Errorf("Samples = %v; want %s with hosts %v", got, ns, want[:2])
	}
	for _, a := range agents {
		if h, _ := a.Held(ns); h.Ref.Seq != v1.Seq {
			t.Errorf("%s holds version %d while the cohort is empty; want %d", a.HostID(), h.Ref.Seq, v1.Seq)
		}
	}
}

// Lags is Lag of every subscribed namespace at once (what the lag gauges
// of one scrape read): an agent subscribed to a namespace with no goal
// lags it, one at its goal does not, and a namespace nobody subscribes to
// is absent.
func TestLagsIsLagOfEverySubscribedNamespace(t *testing.T) {
	e := newEnv(t)
	v1 := e.publish("d/app", props(3, "v1"))
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{"d/app", "d/none"}})
	b := e.dial("host-2", agenttest.Options{Subscriptions: []string{"d/app", "d/none"}})
	e.dial("host-3", agenttest.Options{Subscriptions: []string{"d/app"}})
	e.publish("d/other", props(1, "x"))
	waitVersion(t, a, "d/app", v1)
	waitVersion(t, b, "d/app", v1)
	wait.For(t, "every agent at d/app's goal", func() bool { return e.srv.Lag("d/app") == 0 })

	got := e.srv.Lags()
	want := map[string]int{"d/app": 0, "d/none": 2}
	if !maps.Equal(got, want) {
		t.Errorf("Lags = %v; want %v", got, want)
	}
	for ns, n := range got {
		if l := e.srv.Lag(ns); l != n {
			t.Errorf("Lags[%s] = %d, Lag = %d", ns, n, l)
		}
	}
}
