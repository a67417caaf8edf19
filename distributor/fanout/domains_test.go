package fanout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A domain's readers decide which hosts receive its namespaces: a host
// outside them is told FORBIDDEN (naming the readers) and sent nothing;
// once the readers include it, it is served.
func TestReadersForbidOtherHosts(t *testing.T) {
	e := newEnv(t)
	e.srv.SetDomains(map[string]fanout.DomainPolicy{"d": {Readers: []string{zone + "/host-1"}}})
	ns := "d/secret"
	v1 := e.publish(ns, props(3, "v1"))
	in := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}})
	out := e.dial("host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, in, ns, v1)
	wait.For(t, "host-2 told FORBIDDEN", func() bool {
		u, ok := out.Unavailable(ns)
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN
	})
	if u, _ := out.Unavailable(ns); !strings.Contains(u.GetDetail(), zone+"/host-1") || !strings.Contains(u.GetDetail(), "host-2") {
		t.Errorf("FORBIDDEN detail %q; want it to name the readers and the host", u.GetDetail())
	}
	if got := out.Applied(ns); len(got) != 0 {
		t.Fatalf("host-2 received %v of a domain it may not read", got)
	}
	// A whole zone may read.
	e.srv.SetDomains(map[string]fanout.DomainPolicy{"d": {Readers: []string{zone}}})
	waitVersion(t, out, ns, v1)
}

// One domain's snapshots cannot crowd out another's patches: domain "a"
// sends at most its outbound limit (each push over it waits, alone), so
// while its backlog drains, domain "b"'s one-key patches reach every host
// — and the bytes "a" sent stay within the limit.
func TestOutboundLimitPerDomain(t *testing.T) {
	const limit = 128 << 10 // bytes per second
	set := metrics.NewSet()
	e := newEnv(t, func(o *fanout.Options) { o.Metrics = set })
	e.srv.SetDomains(map[string]fanout.DomainPolicy{"a": {OutboundBytesPerSecond: limit}})
	big, small := "a/big", "b/small"
	bulk := func(tag string) map[string]string {
		m := map[string]string{}
		for i := range 64 {
			m[fmt.Sprintf("k/%03d", i)] = tag + strings.Repeat("x", 4<<10) // 256 KiB in all
		}
		return m
	}
	e.publish(small, map[string]string{"n": "0"})
	var agents []*agenttest.Agent
	for i := range 3 {
		agents = append(agents, e.dial(fmt.Sprintf("host-%d", i), agenttest.Options{Subscriptions: []string{big, small}}))
	}
	start := time.Now()
	var last = e.publish(big, bulk("v1"))
	for v := 2; v <= 3; v++ {
		last = e.publish(big, bulk(fmt.Sprintf("v%d", v)))
	}
	// "a" needs ≥ 3 × 256 KiB at 128 KiB/s per version round: seconds.
	for n := 1; n <= 5; n++ {
		p := e.publish(small, map[string]string{"n": fmt.Sprint(n)})
		for _, a := range agents {
			waitVersion(t, a, small, p)
		}
		done := 0
		for _, a := range agents {
			if h, ok := a.Held(big); ok && h.Ref.Seq == last.Seq {
				done++
			}
		}
		if done == len(agents) {
			t.Fatalf("b's patch %d arrived only after a's whole backlog: no evidence it was not held up", n)
		}
	}
	for _, a := range agents {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := a.WaitVersion(ctx, big, last.Seq); err != nil {
			t.Fatalf("%s never got a's last version: %v", a.HostID(), err)
		}
		cancel()
	}
	elapsed := time.Since(start)
	sent := 0
	for _, a := range agents {
		for _, ap := range a.Applied(big) {
			sent += ap.Bytes
		}
	}
	if max := limit*elapsed.Seconds() + limit; float64(sent) > max {
		t.Errorf("domain a: %d bytes in %v; its limit allows at most %.0f", sent, elapsed, max)
	}
	if got := set.GetOrCreateCounter(`lehr_distributor_throttled_pushes_total{domain="a"}`).Get(); got == 0 {
		t.Errorf("no throttled push of domain a counted")
	}
	t.Logf("domain a: %d bytes to %d agents in %v (limit %d B/s)", sent, len(agents), elapsed.Round(time.Millisecond), limit)
}

// A domain's subscription quota: subscriptions beyond it are told
// OVER_QUOTA and sent nothing; when one ends, a waiting one is served.
func TestSubscriptionQuota(t *testing.T) {
	e := newEnv(t)
	e.srv.SetDomains(map[string]fanout.DomainPolicy{"d": {MaxSubscriptions: 2}})
	ns := "d/x"
	v1 := e.publish(ns, props(2, "v1"))
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}})
	b := e.dial("host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)
	waitVersion(t, b, ns, v1)
	c := e.dial("host-3", agenttest.Options{Subscriptions: []string{ns, "other/y"}})
	wait.For(t, "host-3 told OVER_QUOTA", func() bool {
		u, ok := c.Unavailable(ns)
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA
	})
	if got := c.Applied(ns); len(got) != 0 {
		t.Fatalf("host-3 received %v beyond the quota", got)
	}
	if err := a.Unsubscribe(ns); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, c, ns, v1)
	b.Close() // a session's end frees its subscriptions too
	d := e.dial("host-4", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, d, ns, v1)
}

// A domain's quotas are per zone: with the zone's distributors counted by
// control (SetShare), each serves its share of the subscriptions, and
// serves more when the zone has fewer distributors.
func TestQuotasSplitBetweenDistributors(t *testing.T) {
	e := newEnv(t)
	e.srv.SetDomains(map[string]fanout.DomainPolicy{"d": {MaxSubscriptions: 4}})
	e.srv.SetShare(2)
	ns := "d/x"
	v1 := e.publish(ns, props(2, "v1"))
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}})
	b := e.dial("host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)
	waitVersion(t, b, ns, v1)
	c := e.dial("host-3", agenttest.Options{Subscriptions: []string{ns}})
	wait.For(t, "host-3 told OVER_QUOTA at a half share", func() bool {
		u, ok := c.Unavailable(ns)
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA &&
			strings.Contains(u.GetDetail(), "max_subscriptions 4 over 2 distributors")
	})
	e.srv.SetShare(1) // the other distributor is gone
	waitVersion(t, c, ns, v1)
}
