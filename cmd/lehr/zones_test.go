package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestWriteZoneStatusGolden(t *testing.T) {
	vc := func(ns string, v uint64, n int32) *lehrpb.VersionCount {
		return &lehrpb.VersionCount{Namespace: ns, Version: v, Agents: n}
	}
	bc := func(build string, n int32) *lehrpb.BuildCount { return &lehrpb.BuildCount{Build: build, Count: n} }
	const old, cur = "0.1.0+237c09b1a2b3", "0.2.0+5d1e8a2c9f00"
	// Mid-upgrade: dist-0 runs the new build and serves an agent of each
	// build, dist-1 the old one, dist-2 one too old to say.
	st := &lehrpb.GetZoneStatusResponse{
		Zone: "zone-a",
		Distributors: []*lehrpb.DistributorStatus{
			{DistributorId: "zone-a-dist-0", Agents: 2, Versions: []*lehrpb.VersionCount{vc("demo/app", 2, 1), vc("demo/app", 3, 1), vc("demo/banner", 1, 2)},
				DistributorBuild: cur, AgentBuilds: []*lehrpb.BuildCount{bc(old, 1), bc(cur, 1)}},
			{DistributorId: "zone-a-dist-1", Agents: 1, Versions: []*lehrpb.VersionCount{vc("demo/app", 3, 1)},
				DistributorBuild: old, AgentBuilds: []*lehrpb.BuildCount{bc("unknown", 1)}},
			{DistributorId: "zone-a-dist-2", Agents: 0, DistributorBuild: "unknown"},
		},
		Versions: []*lehrpb.VersionCount{vc("demo/app", 2, 1), {Namespace: "demo/app", Version: 3, Agents: 2, Consumers: 6,
			Services: []*lehrpb.ServiceConsumers{{Service: "checkout", Consumers: 3}, {Service: "search", Consumers: 1}}}, vc("demo/banner", 1, 2)},
		DistributorBuilds: []*lehrpb.BuildCount{bc(old, 1), bc(cur, 1), bc("unknown", 1)},
		AgentBuilds:       []*lehrpb.BuildCount{bc(old, 1), bc(cur, 1), bc("unknown", 1)},
	}
	goals := map[string]uint64{"demo/app": 3}
	var b bytes.Buffer
	writeZoneStatus(&b, st, goals, true)
	b.WriteString("--- a control older than builds in zone status\n")
	older := proto.Clone(st).(*lehrpb.GetZoneStatusResponse)
	older.DistributorBuilds, older.AgentBuilds = nil, nil
	for _, d := range older.GetDistributors() {
		d.DistributorBuild, d.AgentBuilds = "", nil
	}
	writeZoneStatus(&b, older, goals, true)
	b.WriteString("--- without goals\n")
	writeZoneStatus(&b, st, nil, false)
	b.WriteString("--- nobody reporting\n")
	writeZoneStatus(&b, &lehrpb.GetZoneStatusResponse{Zone: "zone-b"}, nil, true)
	b.WriteString("--- a host failing its host-level checks\n")
	hc := &lehrpb.HostChecks{Version: 3, PreviousVersion: 2, Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, Look: 4, Looks: 30,
		Reason: `check "error ratio" failed at look 4 of 30 (4 interval(s) after the change): the host got worse than it was before the change`,
		Checks: []*lehrpb.HostCheckResult{
			{Name: "error ratio", Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL, Before: 0.009, After: 0.4,
				Explanation: "request_errors/requests went from 0.9 % before the change to 40 % after on this host: a change this large happens by chance with p = 1e-12, below the 3e-07 this look allows (the host compared with its own history; the whole fleet may have moved too)."},
			{Name: "throughput", Verdict: lehrpb.CanaryVerdict_CANARY_VERDICT_PASS},
		}}
	st.Health = []*lehrpb.NamespaceHealth{{Namespace: "demo/app", Version: 3, Agents: 1, Consumers: 1, ConsumersApplied: 1}}
	st.Hosts = []*lehrpb.HostReport{
		{HostId: "host-1", Report: &lehrpb.NamespaceReport{Namespace: "demo/app", Version: 3, Clients: 1, ClientsApplied: 1, HostChecks: hc}},
		{HostId: "host-2", Cohort: true, Report: &lehrpb.NamespaceReport{Namespace: "demo/app", Version: 2, Clients: 1, ClientsApplied: 1}},
	}
	writeZoneStatus(&b, st, goals, true)
	b.WriteString("--- an agent that moved its cache aside\n")
	st.Health, st.Hosts = nil, nil
	st.CacheQuarantines = []*lehrpb.CacheQuarantine{{HostId: "host-3", QuarantineTime: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}}
	writeZoneStatus(&b, st, goals, true)
	golden(t, "zone-status", b.Bytes())
}

// A control plane that predates GetZoneStatus gets a clear message, not a
// raw gRPC error.
func TestZonesStatusUnimplemented(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	lehrpb.RegisterControlServer(srv, struct {
		lehrpb.UnimplementedControlServer
	}{})
	go srv.Serve(l)
	defer srv.Stop()
	code, stdout, stderr := runCLI(t, nil, "zones", "status", "zone-a", "--control", l.Addr().String())
	if code != exitError {
		t.Errorf("exit code %d, want %d (stdout %q)", code, exitError, stdout)
	}
	want := "lehr zones status: control at " + l.Addr().String() + " does not implement GetZoneStatus (it is older than this lehr); upgrade control, or use 'lehr goals zone-a'"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want it to contain %q", stderr, want)
	}
}

// lehr zones delete retires a zone; --force is for delete only.
func TestZonesDelete(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("zones", "create", "zone-old")
	out := c.ok("zones", "delete", "zone-old")
	mustContain(t, "zones delete", out, "deleted zone zone-old")
	if list := c.ok("zones", "list"); strings.Contains(list, "zone-old") {
		t.Errorf("zones list after delete:\n%s", list)
	}
	if code, _, errOut := c.run("", "zones", "list", "--force"); code != exitUsage || !strings.Contains(errOut, "--force is not a flag of lehr zones list") {
		t.Errorf("zones list --force: exit %d\n%s", code, errOut)
	}
	errOut := c.fails("zones", "delete", "zone-old")
	mustContain(t, "deleting a deleted zone", errOut, "zone-old")
}
