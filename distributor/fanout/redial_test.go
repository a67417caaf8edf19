package fanout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/testenv/faultnet"
	"lehr.dev/lehr/testenv/wait"
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

// Agents are told a keepalive interval for the agents connected, so that
// their keepalives cost the distributor a bounded rate (Options.KeepaliveRate,
// docs/wire.md, "Keepalives"), and follow it: a keepalive of their own at
// that interval, no QUIC keepalive beside it, and a silence timeout of
// three intervals.
func TestKeepaliveIntervalFollowsTheAgents(t *testing.T) {
	// One keepalive a second: the interval in seconds is the agent count.
	e := newEnv(t, func(o *fanout.Options) { o.KeepaliveRate = 1 })
	first := e.dial("host-0", agenttest.Options{})
	if got := first.Welcome().GetKeepaliveInterval().AsDuration(); got != time.Second {
		t.Fatalf("first agent: Welcome keepalive %v, want 1s", got)
	}
	second := e.dial("host-1", agenttest.Options{})
	if got := second.Welcome().GetKeepaliveInterval().AsDuration(); got != 2*time.Second {
		t.Fatalf("second agent: Welcome keepalive %v, want 2s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := first.Wait(ctx, func(a *agenttest.Agent) bool { k, _, _, _ := a.Keepalive(); return k == 2*time.Second }); err != nil {
		k, s, _, _ := first.Keepalive()
		t.Fatalf("first agent keeps %v (silence %v), not advised 2s: %v", k, s, err)
	}
	if _, silence, _, _ := first.Keepalive(); silence != 6*time.Second {
		t.Errorf("first agent's silence timeout %v, want three intervals, 6s", silence)
	}

	// Idle now: from its next keepalive, three more, and what the
	// connection sent meanwhile.
	_, _, n0, _ := first.Keepalive()
	wait.For(t, "a keepalive of the idle agent", func() bool { _, _, n, _ := first.Keepalive(); return n > n0 })
	_, _, sent0, packets0 := first.Keepalive()
	start := time.Now()
	wait.For(t, "three keepalives of the idle agent", func() bool { _, _, n, _ := first.Keepalive(); return n >= sent0+3 })
	_, _, sent, packets := first.Keepalive()
	elapsed := time.Since(start)
	// A keepalive is due at most every 3/4 of the interval (the checks
	// fall every quarter), never sooner; a loaded machine only delays it.
	if most := int(elapsed/(3*time.Second/2)) + 1; sent-sent0 > most {
		t.Errorf("%d keepalives in %v at a 2s interval; want at most %d", sent-sent0, elapsed.Round(time.Millisecond), most)
	}
	// Each keepalive is one packet, and one acknowledging the Pong; QUIC's
	// own keepalives (every second before the interval could be advised)
	// would be more.
	if got, most := packets-packets0, uint64(2*(sent-sent0)+2); got > most {
		t.Errorf("the idle agent sent %d packets with %d keepalives in %v; want at most %d", got, sent-sent0, elapsed.Round(time.Millisecond), most)
	}
	if first.Err() != nil || second.Err() != nil {
		t.Errorf("agents ended: %v, %v", first.Err(), second.Err())
	}
}

// A distributor forgets an agent it has heard nothing from for three of the
// agent's silence timeouts (Hello.silence_timeout), as the agent gives the
// connection up after one — not only on its QUIC idle timeout, 30 s, which
// the advised keepalives need.
func TestUnheardAgentIsForgotten(t *testing.T) {
	e := newEnv(t)
	relay, err := faultnet.Listen(e.srv.Addr().String(), faultnet.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agenttest.Dial(ctx, agenttest.Options{
		Addr: relay.Addr(), TLS: e.pki.client("host-0"), HostID: "host-0", Zone: zone,
		Logger: quietLogger(), SilenceTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	wait.For(t, "the distributor counts the agent", func() bool { return e.srv.Stats().Agents == 1 })

	relay.Cut(faultnet.Up, true) // the distributor hears nothing from now on
	wait.For(t, "the distributor forgets the agent", func() bool { return e.srv.Stats().Agents == 0 })
	if got := e.srv.Stats().Unheard; got != 1 {
		t.Errorf("%d connections forgotten as unheard; want 1 (the QUIC idle timeout, 30 s, would have been the rule)", got)
	}
}
