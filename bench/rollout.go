package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
)

func rolloutScenario() Scenario {
	return Scenario{
		Name:  "rollout",
		Title: "rollout overhead: publish → canary hosts applied → every host, and the report path's bytes (issue 9)",
		Run:   runRollout,
	}
}

type rolloutParams struct {
	reps, perRep int
}

// rolloutSeen records, per version, when each host's consumer called back.
type rolloutSeen struct {
	mu   sync.Mutex
	at   map[uint64]map[string]time.Time
	wake chan struct{}
}

func (s *rolloutSeen) add(host string, v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at[v] == nil {
		s.at[v] = map[string]time.Time{}
	}
	if _, ok := s.at[v][host]; !ok {
		s.at[v][host] = time.Now()
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// wait returns the callback times of version v once n hosts called back.
func (s *rolloutSeen) wait(ctx context.Context, v uint64, n int) ([]time.Time, error) {
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	for {
		s.mu.Lock()
		got, wake := s.at[v], s.wake
		var out []time.Time
		for _, at := range got {
			out = append(out, at)
		}
		s.mu.Unlock()
		if len(out) >= n {
			return out, nil
		}
		select {
		case <-wake:
		case <-t.C:
			return nil, fmt.Errorf("version %d reached %d of %d hosts within 2 minutes", v, len(out), n)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func runRollout(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile, rolloutParams{1, 2}, rolloutParams{2, 4}, rolloutParams{5, 10})
	const zones, hostsPerZone = 2, 2
	res := &Result{
		Setup: fmt.Sprintf("one process (testenv/devcluster): control + embedded etcd (fsync on) running the rollout strategist at its defaults "+
			"(a round every second), %d zones × (1 distributor reporting every second, %d real agents with a consumer). "+
			"Policy of domain bench: one canary host per zone, bake 0, then every zone, bake 0 — the stage machinery alone; "+
			"domain blast: global_blast (one stage, every zone). Each sample patches one 1 KiB key and waits until every host's callback. "+
			"%d repetitions × %d; times from the Patch call.", zones, hostsPerZone, p.reps, p.perRep),
		Notes: []string{
			"a canary stage costs a sampling round trip: the strategist writes the candidate asking for a sample, the distributors report their lowest-position hosts with their next zone-status report (every second here; --report-interval, 10 s by default in production), the strategist names the hosts at its next round; then the canary hosts apply, and their reports (the agents' report interval, the distributor's) must show it before the next stage. With production intervals (10 s reports, agents every 30 s) each stage's evidence takes correspondingly longer: bakes are minutes, so this is small next to them.",
			"without --rollouts a publish reaches every host in milliseconds (scenario e2e); a 'global blast' publish writes every zone's goal itself (issue 29), so it is that too — before, it was that plus the strategist's round (~1 s).",
			"report path: an agent's Report for one namespace and the distributor's summary are measured as encoded protobuf sizes of the messages this run produced, not on the wire (QUIC and gRPC framing add a few bytes).",
		},
	}
	cl, err := devcluster.Start(ctx, devcluster.Options{
		DomainQuotas:  benchQuotas(),
		Dir:           filepath.Join(e.Dir, "cluster"),
		Zones:         []string{"zone-a", "zone-b"},
		AgentsPerZone: hostsPerZone,
		Domains:       []string{benchDomain, "blast"},
		Rollouts:      true,
		Logger:        e.Log,
	})
	if err != nil {
		return res, err
	}
	defer cl.Close()
	prod := cl.Producer()
	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "canary", Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}},
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}},
	}}
	if _, err := prod.SetRolloutPolicy(ctx, benchDomain, staged, "bench", 0); err != nil {
		return res, err
	}
	if _, err := prod.SetRolloutPolicy(ctx, "blast", &lehrpb.RolloutPolicy{GlobalBlast: true}, "bench", 0); err != nil {
		return res, err
	}

	hosts := zones * hostsPerZone
	measure := func(ns string) (canary, all []time.Duration, err error) {
		seen := &rolloutSeen{at: map[uint64]map[string]time.Time{}, wake: make(chan struct{})}
		for _, z := range []string{"zone-a", "zone-b"} {
			for i, a := range cl.Agents(z) {
				c, err := cl.Consumer(z, i)
				if err != nil {
					return nil, nil, err
				}
				defer c.Close()
				sub, err := c.Subscribe(ctx, ns)
				if err != nil {
					return nil, nil, err
				}
				host := a.HostID
				sub.OnChange(func(ch consumer.Change) error { seen.add(host, ch.New.Version()); return nil })
			}
		}
		vals := newValueSource(1 << 10)
		v, err := prod.Publish(ctx, ns, []producer.Property{{Key: "k", Value: vals.next()}})
		if err != nil {
			return nil, nil, err
		}
		if _, err := seen.wait(ctx, v.GetSeq(), hosts); err != nil {
			return nil, nil, err
		}
		for range p.reps * p.perRep {
			start := time.Now()
			nv, err := prod.Patch(ctx, ns, v.GetSeq(), producer.Patch{Set: []producer.Property{{Key: "k", Value: vals.next()}}})
			if err != nil {
				return nil, nil, err
			}
			v = nv
			ats, err := seen.wait(ctx, v.GetSeq(), hosts)
			if err != nil {
				return nil, nil, err
			}
			first, last := ats[0], ats[0]
			for _, at := range ats {
				first, last = minTime(first, at), maxTime(last, at)
			}
			canary = append(canary, first.Sub(start))
			all = append(all, last.Sub(start))
			// The rollout has ended once every host has the version; wait
			// for the record to say so, so the next sample starts clean.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			r, err := prod.WaitRollout(wctx, ns, v.GetSeq(), 100*time.Millisecond, nil)
			cancel()
			if err != nil {
				return nil, nil, fmt.Errorf("every host applied %s@%d but its rollout did not end within 2 minutes (last seen: %v): %w", ns, v.GetSeq(), r, err)
			}
		}
		return canary, all, nil
	}
	canary, all, err := measure(benchDomain + "/rollout")
	if err != nil {
		return res, err
	}
	_, blast, err := measure("blast/rollout")
	if err != nil {
		return res, err
	}
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"canary → first canary host applied", canary}, {"canary → every host applied", all}, {"global blast → every host applied", blast}} {
		row := Row{System: "lehr", Case: r.name}
		row.AddLatency("", Summarize(r.d))
		res.Rows = append(res.Rows, row)
	}

	// The report path, as encoded: one agent's report of one namespace,
	// and what the distributors sent control about this run's namespaces.
	st, err := prod.RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		return res, err
	}
	var agentReport int
	for _, h := range st.GetHosts() {
		agentReport = max(agentReport, proto.Size(h.GetReport()))
	}
	if agentReport == 0 {
		agentReport = proto.Size(&lehrpb.NamespaceReport{Namespace: benchDomain + "/rollout", Version: 1 << 20, Checksum: "sha256:" + fmt.Sprintf("%064x", 0), Clients: 1, ClientsApplied: 1})
	}
	var summary int
	for _, d := range st.GetDistributors() {
		summary = max(summary, proto.Size(d))
	}
	perThousand := float64(agentReport*1000) / 30 // agents report every 30 s by default
	row := Row{System: "lehr", Case: "report path"}
	row.Add("agent report per namespace", float64(agentReport), "B")
	row.Add("agents→distributor per 1,000 agents, 1 namespace each, 30 s interval", perThousand, "B/s")
	row.Add("distributor→control status (this run)", float64(summary), "B")
	res.Rows = append(res.Rows, row)
	return res, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
