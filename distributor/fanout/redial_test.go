package fanout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
)

// Agents are told the redial spread for the agents connected — in
// Welcome, then by Advice as their number grows — so that the agents a
// restart drops at once come back at the rate the distributor admits
// them (docs/wire.md, "Advice").
func TestRedialSpreadFollowsTheAgents(t *testing.T) {
	// One agent a second: the spread in seconds is the agent count.
	e := newEnv(t, func(o *fanout.Options) { o.RedialRate = 1 })
	first := e.dial("host-0", agenttest.Options{})
	if got, advice := first.RedialSpread(); got != time.Second || advice != 0 {
		t.Fatalf("first agent: spread %v after %d Advice, want 1s from its Welcome", got, advice)
	}
	var later []*agenttest.Agent
	for i := 1; i < 4; i++ {
		later = append(later, e.dial(fmt.Sprintf("host-%d", i), agenttest.Options{}))
	}
	if got, _ := later[2].RedialSpread(); got != 4*time.Second {
		t.Errorf("fourth agent: Welcome spread %v, want 4s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// 4s against the 1s the first agent was told: stale, so it is advised.
	if err := first.Wait(ctx, func(a *agenttest.Agent) bool { d, _ := a.RedialSpread(); return d == 4*time.Second }); err != nil {
		d, n := first.RedialSpread()
		t.Fatalf("first agent still told %v after %d Advice: %v", d, n, err)
	}
	// The second was told 2s: 4s is twice that, stale too; the third, told
	// 3s, is within the hysteresis and gets nothing.
	if err := later[0].Wait(ctx, func(a *agenttest.Agent) bool { d, _ := a.RedialSpread(); return d == 4*time.Second }); err != nil {
		t.Fatalf("second agent not advised: %v", err)
	}
	if d, n := later[1].RedialSpread(); d != 3*time.Second || n != 0 {
		t.Errorf("third agent: %v after %d Advice, want its Welcome's 3s and none", d, n)
	}

	// Without a rate, no spread: agents redial after their own backoff.
	none := newEnv(t, func(o *fanout.Options) { o.RedialRate = -1 })
	if got, _ := none.dial("host-x", agenttest.Options{}).RedialSpread(); got != 0 {
		t.Errorf("RedialRate -1: spread %v, want 0", got)
	}
}
