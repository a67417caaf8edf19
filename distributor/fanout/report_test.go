package fanout

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// reportServer is a Server holding n sessions without connections, each
// subscribed to two namespaces with a report of each, and a rollout of
// the first namespace moving 1 % of the hosts: what the distributor's
// zone-status report walks every report interval. Only the aggregations
// below may run on it (it has no listener, goals writer or metrics).
func reportServer(n int) *Server {
	s := &Server{sessions: map[string]*session{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	goals := map[string]*Goal{
		"app/a": {
			Stable:    &content.Version{Seq: 1},
			Candidate: &content.Version{Seq: 2},
			Cohort:    cohort.Cohort{PerMillion: 10_000, Salt: "bench"},
		},
		"app/b": {Stable: &content.Version{Seq: 7}},
	}
	s.goals.Store(&goals)
	for i := range n {
		host := fmt.Sprintf("host-%05d", i)
		ss := &session{srv: s, host: host, log: s.log, ns: map[string]*nsState{}}
		for ns, g := range goals {
			seq := g.For(host).Seq
			ss.ns[ns] = &nsState{subscribed: true, have: content.Ref{Seq: seq}, report: &lehrpb.NamespaceReport{
				Namespace: ns, Version: seq, Clients: 2, ClientsApplied: 2,
				Preview: []*lehrpb.HostPreviewCounts{{Experiment: "exp", Counts: &lehrpb.PreviewCounts{LiveEtag: "l1", ExperimentEtag: "e1", AllowAllow: 10}}},
			}}
		}
		s.sessions[host] = ss
	}
	return s
}

// The sums of reportServer's sessions, which the benchmark below times.
func TestZoneReportSums(t *testing.T) {
	const n = 1000
	s := reportServer(n)
	agents, counts := s.Convergence()
	if agents != n {
		t.Errorf("Convergence: %d agents; want %d", agents, n)
	}
	total := map[string]int{}
	for _, c := range counts {
		total[c.Namespace] += c.Agents
	}
	if total["app/a"] != n || total["app/b"] != n || len(counts) != 3 {
		t.Errorf("Convergence counts = %+v; want app/a split between versions 1 and 2, app/b at 7, %d agents each", counts, n)
	}
	health, _ := s.Health()
	agentsA := 0
	for _, h := range health {
		if h.GetNamespace() != "app/a" {
			t.Errorf("Health reports %s, which no rollout moves and is in no trouble", h.GetNamespace())
		}
		agentsA += int(h.GetAgents())
		if int(h.GetConsumers()) != 2*int(h.GetAgents()) {
			t.Errorf("Health %s v%d: %d consumers for %d agents; want 2 each", h.GetNamespace(), h.GetVersion(), h.GetConsumers(), h.GetAgents())
		}
	}
	if agentsA != n {
		t.Errorf("Health of app/a sums %d agents; want %d", agentsA, n)
	}
	preview := s.Preview()
	if len(preview) != 2 {
		t.Fatalf("Preview = %v; want one entry per namespace", preview)
	}
	for _, p := range preview {
		if got := p.GetCounts()[0].GetCounts().GetAllowAllow(); got != 10*n {
			t.Errorf("Preview %s: %d allow-allow; want %d", p.GetNamespace(), got, 10*n)
		}
	}
}

// BenchmarkZoneReport times what the distributor's report loop computes
// from its sessions every report interval, at 10,000 agents.
func BenchmarkZoneReport(b *testing.B) {
	s := reportServer(10_000)
	b.ReportAllocs()
	for b.Loop() {
		s.Convergence()
		s.Health()
		s.Samples()
		s.Signals()
		s.RequestSignals(time.Now())
		s.Preview()
	}
}

// Health names a few hosts behind their goal per namespace — the lowest
// host ids, with what they hold — so a rollout waiting for hosts can say
// which; hosts that hold their goal, or reported it, are not named.
func TestHealthNamesHostsBehindTheirGoal(t *testing.T) {
	s := reportServer(20)
	behind := func(host, ns string, have uint64, reported bool) {
		st := s.sessions[host].ns[ns]
		st.have = content.Ref{Seq: have}
		if !reported {
			st.report.Version = have
		}
	}
	for _, h := range []string{"host-00003", "host-00011", "host-00007", "host-00001", "host-00019", "host-00005", "host-00013"} {
		behind(h, "app/b", 6, false)
	}
	behind("host-00002", "app/b", 6, true) // reported 7 already: not named
	s.sessions["host-00004"].ns["app/b"].report = nil
	behind("host-00004", "app/b", 0, true) // no report yet, holds nothing

	_, hosts := s.Health()
	var got []string
	for _, hr := range hosts {
		if hr.GetReport().GetNamespace() == "app/b" {
			got = append(got, fmt.Sprintf("%s@%d", hr.GetHostId(), hr.GetReport().GetVersion()))
		}
	}
	want := []string{"host-00001@6", "host-00003@6", "host-00004@0", "host-00005@6", "host-00007@6"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("hosts of app/b in Health = %v; want the %d lowest behind their goal, %v", got, MaxBehindHosts, want)
	}
	for i := 1; i < len(hosts); i++ {
		if hosts[i-1].GetHostId() > hosts[i].GetHostId() {
			t.Errorf("Health hosts not sorted by host id: %s before %s", hosts[i-1].GetHostId(), hosts[i].GetHostId())
		}
	}
}
