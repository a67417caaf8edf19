package fanout_test

import (
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
