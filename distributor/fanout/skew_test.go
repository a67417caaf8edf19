package fanout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// The version skew policy's promise (docs/operations.md, "Versions"): an
// agent older than every capability and than announced builds — its Hello
// lists no capabilities and no agent_version — is served what it
// understands, beside an agent of this build: updates in full form
// (snapshots, and patches still), no Advice and no SignalsRequest, frame
// types it would close the connection over; the current agent gets the
// compact form, its Advice and its SignalsRequest. The distributor counts
// each agent under its build, the older one as unknown.
func TestOlderAgentIsServedWhatItUnderstands(t *testing.T) {
	e := newEnv(t, func(o *fanout.Options) { o.RedialRate = 1 })
	ns := "d/app"
	v1 := e.publish(ns, props(20, "v1"))
	now := time.Now()
	checks := make(chan []*lehrpb.CanaryCheck, 100)
	const build = "0.2.0+5d1e8a2c9f00"
	old := e.dial("host-old", agenttest.Options{Legacy: true, Subscriptions: []string{ns}, Signals: hostSignals(now, checks)})
	cur := e.dial("host-new", agenttest.Options{AgentVersion: build, Subscriptions: []string{ns}, Signals: hostSignals(now, checks)})
	if caps := old.Welcome().GetCapabilities(); len(caps) != 0 {
		t.Errorf("the older agent offered none, but the Welcome grants %v", caps)
	}
	for _, c := range []string{wire.CapCompactUpdate, wire.CapSignals, wire.CapRedialSpread} {
		if !wire.HasCapability(cur.Welcome().GetCapabilities(), c) {
			t.Errorf("the current agent's Welcome lacks %q: %v", c, cur.Welcome().GetCapabilities())
		}
	}
	waitVersion(t, old, ns, v1)
	waitVersion(t, cur, ns, v1)

	// A one-key change: a patch to both, in full form to the older agent
	// (it checked), compact to the other, so smaller.
	p2 := props(20, "v1")
	p2["k/007"] = "changed"
	v2 := e.publish(ns, p2)
	waitVersion(t, old, ns, v2)
	waitVersion(t, cur, ns, v2)
	last := func(a *agenttest.Agent) agenttest.Applied { as := a.Applied(ns); return as[len(as)-1] }
	oa, ca := last(old), last(cur)
	if oa.Snapshot || ca.Snapshot {
		t.Errorf("v2 sent as a snapshot (older agent %v, current %v); want a patch to each", oa.Snapshot, ca.Snapshot)
	}
	if ca.Bytes >= oa.Bytes {
		t.Errorf("the patch took %d bytes to the current agent and %d to the older one; want the compact form smaller", ca.Bytes, oa.Bytes)
	}

	// More agents: the redial spread grows, and the current agent is
	// advised of it; the older agent is not (its connection would end).
	for i := range 3 {
		e.dial(fmt.Sprintf("host-%d", i), agenttest.Options{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cur.Wait(ctx, func(a *agenttest.Agent) bool { _, n := a.RedialSpread(); return n > 0 }); err != nil {
		t.Fatalf("the current agent was never advised of the spread: %v", err)
	}

	// A canary analysis watching both: only the current agent is asked
	// for its signals; the older one counts in the rollout all the same.
	v3 := e.stage(ns, props(20, "v3"))
	e.cache.Pin(ns, v2.Seq, v3.Seq)
	e.srv.SetGoal(fanout.Goal{Stable: v2, Candidate: v3, Cohort: cohort.Cohort{Hosts: []string{"host-old", "host-new"}, Salt: "s"}, Analysis: 2})
	waitVersion(t, old, ns, v3)
	waitVersion(t, cur, ns, v3)
	var watched []string
	wait.For(t, "the current agent's signals", func() bool {
		e.srv.RequestSignals(now)
		watched = watched[:0]
		for _, h := range e.srv.Signals() {
			watched = append(watched, h.GetHostId())
		}
		return len(watched) > 0
	})
	if diff := cmp.Diff([]string{"host-new"}, watched); diff != "" {
		t.Errorf("hosts whose signals the distributor holds (-want +got):\n%s", diff)
	}

	if err := old.Err(); err != nil {
		t.Fatalf("the older agent's connection ended: %v; it must be sent only what it understands", err)
	}
	want := []*lehrpb.BuildCount{{Build: build, Count: 1}, {Build: "agenttest", Count: 3}, {Build: "unknown", Count: 1}}
	if diff := cmp.Diff(want, e.srv.AgentBuilds(), protocmp.Transform()); diff != "" {
		t.Errorf("AgentBuilds (-want +got):\n%s", diff)
	}
}
