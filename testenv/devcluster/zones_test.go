package devcluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// zoneC is served by a distributor without hosts (zonesCluster).
const zoneC = "zone-c"

// waitEnded waits until the rollout of ns@v has ended, whatever its state.
func waitEnded(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, v uint64) *lehrpb.Rollout {
	t.Helper()
	var r *lehrpb.Rollout
	wait.For(t, fmt.Sprintf("rollout %s@%d to end", ns, v), func() bool {
		var err error
		r, err = c.Producer().RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v})
		st := r.GetState()
		return err == nil && st != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING && st != lehrpb.RolloutState_ROLLOUT_STATE_PAUSED
	})
	return r
}

// zonesCluster starts zone-a, served by a distributor with a real agent
// (host zone-a-host-0) and seven simulated hosts (zone-a-h1…h7) that
// subscribe to app/stuck and take its first version but refuse every
// later one; zone-b, registered but never served; and zone-c, served by a
// distributor without hosts. It returns once zone-a's and zone-c's
// distributors report what they serve.
func zonesCluster(t *testing.T, ctx context.Context) (*devcluster.Cluster, string) {
	t.Helper()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Dir: t.TempDir(), Zones: []string{zoneA, zoneC}, Domains: []string{domain},
		ReportInterval: 200 * time.Millisecond, Rollouts: true, RolloutInterval: 100 * time.Millisecond,
		Logger: controltest.Logger(t, slog.LevelError),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	prod := c.Producer()
	if _, err := prod.CreateZone(ctx, zoneB); err != nil {
		t.Fatal(err)
	}
	if err := c.Agents(zoneC)[0].Stop(); err != nil {
		t.Fatal(err)
	}
	stuck := domain + "/stuck"
	s1, err := prod.Publish(ctx, stuck, props("limit", "10"))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Distributors(zoneA)[0]
	for i := range 7 {
		id := fmt.Sprintf("zone-a-h%d", i+1)
		tlsCfg, err := c.HostTLS(zoneA, id)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agenttest.Dial(ctx, agenttest.Options{
			Addr: d.Addr(), TLS: tlsCfg, HostID: id, Zone: zoneA, Subscriptions: []string{stuck},
			Logger: controltest.Logger(t, slog.LevelError),
			Answer: func(u *lehrpb.Update, ack *lehrpb.Ack) *lehrpb.Ack {
				if u.GetVersion() <= s1.GetSeq() {
					return ack
				}
				return &lehrpb.Ack{Namespace: stuck, Error: "this host is stuck", UpdateVersion: u.GetVersion()}
			},
		})
		if err != nil {
			t.Fatalf("dial %s: %v", id, err)
		}
		t.Cleanup(func() { a.Close() })
		if err := a.WaitVersion(ctx, stuck, s1.GetSeq()); err != nil {
			t.Fatal(err)
		}
	}
	for z, agents := range map[string]int32{zoneA: 8, zoneC: 0} {
		wait.For(t, fmt.Sprintf("%s's distributor reporting %d hosts", z, agents), func() bool {
			st, err := prod.RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
			return err == nil && len(st.GetDistributors()) == 1 && st.GetDistributors()[0].GetAgents() == agents
		})
	}
	return c, stuck
}

// A zone nobody serves never holds a rollout back (issue 26): with zone
// zone-b registered but without a distributor, and zone-c served by a
// distributor without hosts, a rollout under a canary-per-zone policy
// completes instead of failing at its apply deadline; the events say
// which zones were skipped and why, and those zones' goals move all the
// same.
func TestRolloutSkipsZonesWithoutHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, _ := zonesCluster(t, ctx)
	prod := c.Producer()
	ns := domain + "/limits"
	cl, err := c.Consumer(zoneA, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	sub, err := cl.Subscribe(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}

	// A canary host per zone, then every zone; short deadlines, no bake
	// to speak of.
	canary := &lehrpb.RolloutStage{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
		Bake: durationpb.New(500 * time.Millisecond), ApplyDeadline: durationpb.New(5 * time.Second), Analysis: &lehrpb.CanaryAnalysis{Disabled: true}}
	rest := &lehrpb.RolloutStage{Name: "everywhere", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}},
		ApplyDeadline: durationpb.New(5 * time.Second)}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary, rest}}, "canary per zone", 0); err != nil {
		t.Fatal(err)
	}
	v1, err := prod.Publish(ctx, ns, props("limit", "10"))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the consumer at version 1", func() bool { return sub.View().Version() == v1.GetSeq() })

	// The empty zones are skipped, the rollout succeeds.
	v2, err := prod.Publish(ctx, ns, props("limit", "20"))
	if err != nil {
		t.Fatal(err)
	}
	r := waitEnded(t, ctx, c, ns, v2.GetSeq())
	evs := events(t, ctx, c, ns, v2.GetSeq())
	var log []string
	for _, ev := range evs {
		log = append(log, ev.GetKind()+": "+ev.GetMessage())
	}
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Fatalf("rollout %s: %s; want it SUCCEEDED, the empty zones skipped. Events:\n%s", r.GetState(), r.GetReason(), strings.Join(log, "\n"))
	}
	for _, w := range []string{
		"selected: canary hosts of zone-a: zone-a-host-0",
		"skipped: zone zone-b: no distributor has reported for it, so no canary there",
		"skipped: zone zone-c: its distributors serve no hosts, so no canary there",
		"skipped: zone zone-b: no distributor has reported for it; zone zone-c: its distributors serve no hosts: nothing to wait for there",
	} {
		if !slices.ContainsFunc(log, func(m string) bool { return strings.HasPrefix(m, w) }) {
			t.Errorf("no event %q; events:\n%s", w, strings.Join(log, "\n"))
		}
	}
	for _, z := range []string{zoneA, zoneB, zoneC} {
		g, err := prod.RPC().GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: z, Namespace: ns})
		if err != nil || len(g.GetGoals()) != 1 || g.GetGoals()[0].GetVersion() != v2.GetSeq() {
			t.Errorf("goal of %s: %v, %v; want version %d (a distributor that comes later serves it)", z, g, err, v2.GetSeq())
		}
	}
}

// A rollout that waits for hosts names their zone and a few of them, then
// a count; so does its failure at the apply deadline (issue 26).
func TestRolloutReasonsNameZonesAndHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, stuck := zonesCluster(t, ctx)
	prod := c.Producer()
	rest := &lehrpb.RolloutStage{Name: "everywhere", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}}

	long := copyStage(rest)
	long.ApplyDeadline = durationpb.New(time.Hour)
	if _, err := prod.SetRolloutPolicy(ctx, stuck, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{long}}, "whole zones, patient", 0); err != nil {
		t.Fatal(err)
	}
	s2, err := prod.Publish(ctx, stuck, props("limit", "20"))
	if err != nil {
		t.Fatal(err)
	}
	wantHosts := fmt.Sprintf("zone zone-a: 0 of 7 host(s) hold version %d (pending: zone-a/zone-a-h1, zone-a/zone-a-h2, zone-a/zone-a-h3, zone-a/zone-a-h4, zone-a/zone-a-h5 and 2 more)", s2.GetSeq())
	wait.Until(t, "the waiting reason to name zone-a's hosts", func() error {
		r, err := prod.GetRollout(ctx, stuck, s2.GetSeq())
		if err != nil {
			return err
		}
		if !strings.Contains(r.GetReason(), "waiting for hosts") || !strings.HasSuffix(r.GetReason(), wantHosts) {
			return fmt.Errorf("reason %q", r.GetReason())
		}
		return nil
	})
	if _, err := prod.UpdateRollout(ctx, stuck, s2.GetSeq(), lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, "seen enough"); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ctx, c, stuck, s2.GetSeq())

	// A stage failing for them at its deadline names them too.
	short := copyStage(rest)
	short.ApplyDeadline = durationpb.New(2 * time.Second)
	if _, err := prod.SetRolloutPolicy(ctx, stuck, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{short}}, "whole zones, impatient", 0); err != nil {
		t.Fatal(err)
	}
	s4, err := prod.Publish(ctx, stuck, props("limit", "30"))
	if err != nil {
		t.Fatal(err)
	}
	r := waitEnded(t, ctx, c, stuck, s4.GetSeq())
	wantHosts = strings.ReplaceAll(wantHosts, fmt.Sprintf("version %d", s2.GetSeq()), fmt.Sprintf("version %d", s4.GetSeq()))
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_FAILED || !strings.Contains(r.GetReason(), "and 7 do not") || !strings.Contains(r.GetReason(), wantHosts) {
		t.Errorf("rollout %s: %q; want FAILED naming the zone and its hosts: %q", r.GetState(), r.GetReason(), wantHosts)
	}
	if !strings.Contains(r.GetReason(), "; on the word of distributor zone-a/zone-a-dist-") {
		t.Errorf("rollout %s: %q; want it to name the distributors that reported the hosts behind", r.GetState(), r.GetReason())
	}
}

// copyStage copies a stage.
func copyStage(st *lehrpb.RolloutStage) *lehrpb.RolloutStage {
	return &lehrpb.RolloutStage{Name: st.GetName(), Target: st.GetTarget(), Bake: st.GetBake(), ApplyDeadline: st.GetApplyDeadline()}
}
