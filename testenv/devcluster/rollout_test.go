package devcluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// host is one consumer of the rollout tests: the versions its callbacks
// saw and when.
type host struct {
	zone string
	id   string
	mu   sync.Mutex
	seen []seenVersion
}

type seenVersion struct {
	version    uint64
	rollbackOf uint64
	at         time.Time
}

func (h *host) got(v uint64) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.seen {
		if s.version == v {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// A publish under a staged policy reaches one canary host per zone, then
// the first zone, then the rest — each host only after the stage that
// selects it began, as the event log says; a change the canary consumers
// reject is rolled back on them and never reaches another host.
func TestProgressiveRollout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startRollouts(t, ctx, 3)
	prod := c.Producer()
	ns := domain + "/limits"
	stage := func(name string, bake time.Duration) *lehrpb.RolloutStage {
		return &lehrpb.RolloutStage{Name: name, Bake: durationpb.New(bake), ApplyDeadline: durationpb.New(time.Minute)}
	}
	canary := stage("canary", 2*time.Second)
	canary.Target = &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}
	// The built-in gates decide here; TestCanaryAnalysis covers the judge.
	canary.Analysis = &lehrpb.CanaryAnalysis{Disabled: true}
	first := stage("first zone", time.Second)
	first.Target = &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Count: 1}}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary, first}}, "test policy", 0); err != nil {
		t.Fatal(err)
	}

	// Every host's consumer rejects a limit of "0"; the first version goes
	// everywhere at once.
	var hosts []*host
	for _, z := range []string{zoneA, zoneB} {
		for i := range 3 {
			cl, err := c.Consumer(z, i)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			a, _ := c.Agent(z, i)
			h := &host{zone: z, id: a.HostID}
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			sub.OnChange(func(ch consumer.Change) error {
				h.mu.Lock()
				h.seen = append(h.seen, seenVersion{ch.New.Version(), ch.New.RollbackOf(), time.Now()})
				h.mu.Unlock()
				if v, _ := ch.New.Get("limit"); string(v) == "0" {
					return errors.New("a limit of 0 stops all traffic")
				}
				return nil
			})
			hosts = append(hosts, h)
		}
	}
	v1, err := prod.Publish(ctx, ns, props("limit", "10"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		wait.For(t, h.id+" at version 1", func() bool { _, ok := h.got(v1.GetSeq()); return ok })
	}

	// A good change rolls out stage by stage.
	v2, err := prod.Publish(ctx, ns, props("limit", "20"))
	if err != nil {
		t.Fatal(err)
	}
	r := waitRollout(t, ctx, c, ns, v2.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	evs := events(t, ctx, c, ns, v2.GetSeq())
	if got, want := kinds(evs), []string{"started", "stage", "selected", "selected", "applied", "advanced", "stage", "applied", "advanced", "stage", "applied", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("event kinds %v, want %v", got, want)
	}
	canaries := map[string]bool{}
	for _, zh := range r.GetCanaryHosts() {
		if len(zh.GetHosts()) != 1 {
			t.Errorf("canary hosts of %s: %v, want exactly 1", zh.GetZone(), zh.GetHosts())
		}
		for _, id := range zh.GetHosts() {
			canaries[id] = true
		}
	}
	stageStart := map[int32]time.Time{}
	for _, ev := range evs {
		if ev.GetKind() == "stage" {
			stageStart[ev.GetStage()] = ev.GetTime().AsTime()
		}
	}
	for _, h := range hosts {
		at, ok := h.got(v2.GetSeq())
		if !ok {
			t.Errorf("%s never got version %d", h.id, v2.GetSeq())
			continue
		}
		want := int32(2) // the rest
		switch {
		case canaries[h.id]:
			want = 0
		case h.zone == zoneA: // the first zone in name order
			want = 1
		}
		if at.Before(stageStart[want]) {
			t.Errorf("%s got version %d at %v, before stage %d began at %v", h.id, v2.GetSeq(), at, want, stageStart[want])
		}
	}

	// A bad change: the canary consumers reject it, the rollout fails and
	// rolls back; no other host ever sees it.
	v3, err := prod.Publish(ctx, ns, props("limit", "0"))
	if err != nil {
		t.Fatal(err)
	}
	r = waitRollout(t, ctx, c, ns, v3.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_FAILED)
	if r.GetRollbackVersion() == 0 {
		t.Fatalf("failed rollout %v has no rollback version", r)
	}
	bad := map[string]bool{}
	for _, zh := range r.GetCanaryHosts() {
		for _, id := range zh.GetHosts() {
			bad[id] = true
		}
	}
	for _, h := range hosts {
		wait.For(t, fmt.Sprintf("%s at the rollback version %d", h.id, r.GetRollbackVersion()), func() bool {
			_, ok := h.got(r.GetRollbackVersion())
			return ok
		})
		// A canary may or may not have taken the bad version before the
		// first rejection failed the rollout; no other host ever does.
		if _, saw := h.got(v3.GetSeq()); saw && !bad[h.id] {
			t.Errorf("%s saw the bad version %d but is not a canary", h.id, v3.GetSeq())
		}
		h.mu.Lock()
		last := h.seen[len(h.seen)-1]
		h.mu.Unlock()
		if last.version != r.GetRollbackVersion() || last.rollbackOf != v2.GetSeq() {
			t.Errorf("%s ends at version %d (rollback of %d); want %d, a rollback of %d", h.id, last.version, last.rollbackOf, r.GetRollbackVersion(), v2.GetSeq())
		}
	}
	if got := kinds(events(t, ctx, c, ns, v3.GetSeq())); !slices.Contains(got, "failed") || !slices.Contains(got, "rolled back") {
		t.Errorf("events of the bad rollout %v; want failed and rolled back", got)
	}
	t.Logf("bad rollout: %s", r.GetReason())
	// The automatic rollback is in the audit log, as the strategist's.
	wait.Until(t, "the automatic rollback in the audit log", func() error {
		resp, err := prod.RPC().ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{Domain: domain, PageSize: 1000})
		if err != nil {
			return err
		}
		for _, rec := range resp.GetRecords() {
			if rec.GetMethod() == "Rollback" && rec.GetAuthor() == "lehr-rollout" && rec.GetVersion() == r.GetRollbackVersion() &&
				strings.Contains(rec.GetMessage(), "rolled back") && strings.Contains(rec.GetTransportIdentity(), r.GetId()) {
				return nil
			}
		}
		return fmt.Errorf("no Rollback record by lehr-rollout of version %d among %d records", r.GetRollbackVersion(), len(resp.GetRecords()))
	})

	// Promote skips a long bake: with a 10-minute canary bake the rollout
	// still ends within the test's wait once promoted.
	canary.Bake = durationpb.New(10 * time.Minute)
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary, first}}, "long canary bake", 0); err != nil {
		t.Fatal(err)
	}
	v5, err := prod.Publish(ctx, ns, props("limit", "30"))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the canary stage baking", func() bool {
		r, err := prod.GetRollout(ctx, ns, v5.GetSeq())
		return err == nil && r.GetStageAppliedTime() != nil
	})
	if _, err := prod.UpdateRollout(ctx, ns, v5.GetSeq(), lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE, "looks fine"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
	defer wcancel()
	r, err = prod.WaitRollout(wctx, ns, v5.GetSeq(), 100*time.Millisecond, nil)
	if err != nil || r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		t.Fatalf("promoted rollout: %v, %v; want it succeeded", r, err)
	}
	if got := kinds(events(t, ctx, c, ns, v5.GetSeq())); !slices.Contains(got, "promoted") {
		t.Errorf("events %v lack promoted", got)
	}
}

// startRollouts starts two zones of agents hosts each, with the rollout
// strategist deciding every 100 ms on reports every 200 ms, closed at the
// end of the test.
func startRollouts(t *testing.T, ctx context.Context, agents int) *devcluster.Cluster {
	t.Helper()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Dir: t.TempDir(), Zones: []string{zoneA, zoneB},
		AgentsPerZone: agents, Domains: []string{domain},
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
	return c
}

func waitRollout(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, v uint64, want lehrpb.RolloutState) *lehrpb.Rollout {
	t.Helper()
	var r *lehrpb.Rollout
	wait.For(t, fmt.Sprintf("rollout %s@%d %v", ns, v, want), func() bool {
		var err error
		r, err = c.Producer().RPC().GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: v})
		return err == nil && r.GetState() == want
	})
	return r
}

func events(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, v uint64) []*lehrpb.RolloutEvent {
	t.Helper()
	resp, err := c.Producer().RPC().ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: ns, Version: v})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetEvents()
}

func kinds(evs []*lehrpb.RolloutEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.GetKind())
	}
	return out
}
