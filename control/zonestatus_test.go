package control_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func vc(ns string, v uint64, agents int32) *lehrpb.VersionCount {
	return &lehrpb.VersionCount{Namespace: ns, Version: v, Agents: agents}
}

func bc(build string, n int32) *lehrpb.BuildCount {
	return &lehrpb.BuildCount{Build: build, Count: n}
}

func reportStatus(t *testing.T, cl lehrpb.ControlClient, req *lehrpb.ReportZoneStatusRequest) {
	t.Helper()
	if _, err := cl.ReportZoneStatus(testCtx(t), req); err != nil {
		t.Fatalf("ReportZoneStatus(%s/%s): %v", req.GetZone(), req.GetDistributorId(), err)
	}
}

func TestZoneStatusAggregates(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-b"}); err != nil {
		t.Fatal(err)
	}

	// A zone without reports.
	got, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatalf("GetZoneStatus before any report: %v", err)
	}
	if diff := cmp.Diff(&lehrpb.GetZoneStatusResponse{Zone: "zone-a"}, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetZoneStatus before any report (-want +got):\n%s", diff)
	}

	// An old report of d2 is replaced by its next one.
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d2", Agents: 9,
		Versions: []*lehrpb.VersionCount{vc("x/app", 1, 9)}})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d2", Agents: 4,
		Versions: []*lehrpb.VersionCount{vc("x/app", 3, 1), vc("x/app", 2, 3), vc("x/db", 1, 4)}})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 3,
		Versions: []*lehrpb.VersionCount{vc("x/app", 3, 2), vc("x/app", 0, 1), vc("x/db", 1, 3)}})
	// Another zone's report does not count.
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-b", DistributorId: "d1", Agents: 100,
		Versions: []*lehrpb.VersionCount{vc("x/app", 3, 100)}})
	// Each answer counts the zone's live reporters: the distributors the
	// zone's per-domain quotas are split between.
	for zone, want := range map[string]int32{"zone-a": 2, "zone-b": 1} {
		resp, err := cl.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: zone, DistributorId: "d1", Agents: 3})
		if err != nil || resp.GetDistributors() != want {
			t.Errorf("ReportZoneStatus(%s) = %v, %v; want %d distributors", zone, resp, err, want)
		}
	}
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 3,
		Versions: []*lehrpb.VersionCount{vc("x/app", 3, 2), vc("x/app", 0, 1), vc("x/db", 1, 3)}})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-b", DistributorId: "d1", Agents: 100,
		Versions: []*lehrpb.VersionCount{vc("x/app", 3, 100)}})

	got, err = cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatalf("GetZoneStatus: %v", err)
	}
	// These distributors report no builds, as those older than builds
	// being reported: they and their agents count as unknown.
	want := &lehrpb.GetZoneStatusResponse{
		Zone: "zone-a",
		Distributors: []*lehrpb.DistributorStatus{
			{DistributorId: "d1", Agents: 3, Versions: []*lehrpb.VersionCount{vc("x/app", 3, 2), vc("x/app", 0, 1), vc("x/db", 1, 3)},
				DistributorBuild: "unknown", AgentBuilds: []*lehrpb.BuildCount{bc("unknown", 3)}},
			{DistributorId: "d2", Agents: 4, Versions: []*lehrpb.VersionCount{vc("x/app", 3, 1), vc("x/app", 2, 3), vc("x/db", 1, 4)},
				DistributorBuild: "unknown", AgentBuilds: []*lehrpb.BuildCount{bc("unknown", 4)}},
		},
		Versions:          []*lehrpb.VersionCount{vc("x/app", 0, 1), vc("x/app", 2, 3), vc("x/app", 3, 3), vc("x/db", 1, 7)},
		DistributorBuilds: []*lehrpb.BuildCount{bc("unknown", 2)},
		AgentBuilds:       []*lehrpb.BuildCount{bc("unknown", 7)},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetZoneStatus (-want +got):\n%s", diff)
	}

	// Every replica sees the reports: they live in etcd, not in memory.
	srv.Stop()
	srv2 := controltest.StartControl(t, control.Options{DataDir: srv.DataDir})
	got, err = srv2.Client.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatalf("GetZoneStatus after a restart: %v", err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetZoneStatus after a restart (-want +got):\n%s", diff)
	}

	// Reports are counted.
	reportStatus(t, srv2.Client, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 3})
	resp, err := http.Get("http://" + srv2.Control.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := `lehr_control_zone_reports_total{zone="zone-a"} 1`; !strings.Contains(string(body), m) {
		t.Errorf("/metrics lacks %q", m)
	}
}

// A zone's status counts its distributors and agents per build, as they
// report them, mid-upgrade: a distributor of the new build whose agents
// are of both, one of the old build, and one older than builds being
// reported, whose agents are unknown (docs/operations.md, "Versions").
func TestZoneStatusCountsBuilds(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	const old, cur = "0.1.0+237c09b1a2b3", "0.2.0+5d1e8a2c9f00"
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 5, DistributorBuild: cur,
		AgentBuilds: []*lehrpb.BuildCount{bc(old, 3), bc(cur, 1), bc("unknown", 1)}})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d2", Agents: 2, DistributorBuild: old,
		AgentBuilds: []*lehrpb.BuildCount{bc(old, 2)}})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d3", Agents: 4})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d4", DistributorBuild: cur})
	got, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatalf("GetZoneStatus: %v", err)
	}
	if diff := cmp.Diff([]*lehrpb.BuildCount{bc(old, 1), bc(cur, 2), bc("unknown", 1)}, got.GetDistributorBuilds(), protocmp.Transform()); diff != "" {
		t.Errorf("distributor_builds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*lehrpb.BuildCount{bc(old, 5), bc(cur, 1), bc("unknown", 5)}, got.GetAgentBuilds(), protocmp.Transform()); diff != "" {
		t.Errorf("agent_builds (-want +got):\n%s", diff)
	}
	type dist struct {
		id, build string
		agents    []*lehrpb.BuildCount
	}
	var dists []dist
	for _, d := range got.GetDistributors() {
		dists = append(dists, dist{d.GetDistributorId(), d.GetDistributorBuild(), d.GetAgentBuilds()})
	}
	want := []dist{
		{"d1", cur, []*lehrpb.BuildCount{bc(old, 3), bc(cur, 1), bc("unknown", 1)}},
		{"d2", old, []*lehrpb.BuildCount{bc(old, 2)}},
		{"d3", "unknown", []*lehrpb.BuildCount{bc("unknown", 4)}},
		{"d4", cur, nil},
	}
	if diff := cmp.Diff(want, dists, protocmp.Transform(), cmp.AllowUnexported(dist{})); diff != "" {
		t.Errorf("distributors' builds (-want +got):\n%s", diff)
	}
}

func TestZoneStatusExpires(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "alive", Agents: 1, TtlSeconds: 120})
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dead", Agents: 2, TtlSeconds: 1,
		Versions: []*lehrpb.VersionCount{vc("x/app", 1, 2)}})
	ids := func() string {
		st, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
		if err != nil {
			t.Fatalf("GetZoneStatus: %v", err)
		}
		var out []string
		for _, d := range st.GetDistributors() {
			out = append(out, d.GetDistributorId())
		}
		return fmt.Sprintf("%v versions %d", out, len(st.GetVersions()))
	}
	if got := ids(); got != "[alive dead] versions 1" {
		t.Fatalf("before expiry: %s, want [alive dead] versions 1", got)
	}
	wait.For(t, "the report with ttl_seconds 1 to expire", func() bool { return ids() == "[alive] versions 0" })

	// A distributor that reports again after its lease expired is back.
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dead", Agents: 2, TtlSeconds: 1})
	if got := ids(); got != "[alive dead] versions 0" {
		t.Errorf("after reporting again: %s, want [alive dead] versions 0", got)
	}
}

// TestZoneStatusRejections sends bad reports and checks the error's code,
// reason and field, and that nothing was stored.
func TestZoneStatusRejections(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	ok := func() *lehrpb.ReportZoneStatusRequest {
		return &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 2,
			Versions: []*lehrpb.VersionCount{vc("x/app", 1, 2)}}
	}
	with := func(f func(r *lehrpb.ReportZoneStatusRequest)) *lehrpb.ReportZoneStatusRequest {
		r := ok()
		f(r)
		return r
	}
	many := make([]*lehrpb.VersionCount, 100_001)
	for i := range many {
		many[i] = vc("x/app", uint64(i+1), 1)
	}
	// 30,000 distinct long namespaces: within the count limit, beyond what
	// one etcd request holds.
	// Over the 6 MiB a report may take in store, with fewer counts than
	// the 100,000 allowed: long namespace names (a report over 1 MiB is
	// stored in parts; TestZoneStatusOfACatalogSizedReport).
	long := make([]*lehrpb.VersionCount, 60_000)
	for i := range long {
		long[i] = vc(fmt.Sprintf("x/%s-%05d", strings.Repeat("n", 110), i), 1, 1)
	}
	tests := []struct {
		name   string
		req    *lehrpb.ReportZoneStatusRequest
		code   codes.Code
		reason string
		field  string
		limit  string
	}{
		{"bad zone", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Zone = "Zone_A" }), codes.InvalidArgument, apierror.ReasonInvalidName, "zone", ""},
		{"unknown zone", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Zone = "zone-x" }), codes.NotFound, apierror.ReasonNotFound, "zone", ""},
		{"no distributor id", with(func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorId = "" }), codes.InvalidArgument, apierror.ReasonInvalidArgument, "distributor_id", ""},
		{"long distributor id", with(func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorId = strings.Repeat("d", 129) }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "distributor_id", "128 bytes"},
		{"negative agents", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Agents = -1 }), codes.InvalidArgument, apierror.ReasonInvalidArgument, "agents", ""},
		{"negative count", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Versions = append(r.Versions, vc("x/db", 1, -3)) }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions[1].agents", ""},
		{"bad namespace", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Versions = append(r.Versions, vc("nodomain", 1, 1)) }),
			codes.InvalidArgument, apierror.ReasonInvalidName, "versions[1].namespace", ""},
		{"counted twice", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions = append(r.Versions, vc("x/db", 1, 1), vc("x/app", 1, 1))
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions[2]", ""},
		{"bad service", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions[0].Consumers, r.Versions[0].Services = 2, []*lehrpb.ServiceConsumers{{Service: "Check Out", Consumers: 1}}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions[0].services", ""},
		{"more service consumers than consumers", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions[0].Consumers, r.Versions[0].Services = 2, []*lehrpb.ServiceConsumers{{Service: "api", Consumers: 2}, {Service: "web", Consumers: 1}}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions[0].services", ""},
		{"too many services", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions[0].Consumers = 100
			for i := range 17 {
				r.Versions[0].Services = append(r.Versions[0].Services, &lehrpb.ServiceConsumers{Service: fmt.Sprintf("s%d", i), Consumers: 1})
			}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions[0].services", ""},
		{"too many counts", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Versions = many }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions", "100000 entries"},
		{"too many bytes", with(func(r *lehrpb.ReportZoneStatusRequest) { r.Versions = long }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "versions", "6291456 bytes encoded"},
		{"ttl too long", with(func(r *lehrpb.ReportZoneStatusRequest) { r.TtlSeconds = 121 }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "ttl_seconds", "120 seconds"},
		{"long distributor build", with(func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorBuild = strings.Repeat("b", 129) }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "distributor_build", "128 bytes"},
		{"empty agent build", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.AgentBuilds = []*lehrpb.BuildCount{bc("0.1.0", 1), bc("", 1)}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "agent_builds[1].build", "128 bytes"},
		{"negative build count", with(func(r *lehrpb.ReportZoneStatusRequest) { r.AgentBuilds = []*lehrpb.BuildCount{bc("0.1.0", -1)} }),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "agent_builds[0].count", ""},
		{"build counted twice", with(func(r *lehrpb.ReportZoneStatusRequest) {
			r.AgentBuilds = []*lehrpb.BuildCount{bc("0.1.0", 1), bc("0.1.0", 1)}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "agent_builds[1].build", ""},
		{"too many builds", with(func(r *lehrpb.ReportZoneStatusRequest) {
			for i := range 257 {
				r.AgentBuilds = append(r.AgentBuilds, bc(fmt.Sprint(i), 1))
			}
		}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "agent_builds", "256 entries"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.ReportZoneStatus(testCtx(t), tc.req)
			if err == nil {
				t.Fatalf("call succeeded; want %v %s on %s", tc.code, tc.reason, tc.field)
			}
			e := apierror.FromError(err)
			if e.Code != tc.code || e.Reason != tc.reason || e.Field != tc.field {
				t.Errorf("got %v %s on %q; want %v %s on %q (error: %v)", e.Code, e.Reason, e.Field, tc.code, tc.reason, tc.field, e)
			}
			if tc.limit != "" && e.Limit != tc.limit {
				t.Errorf("limit = %q, want %q", e.Limit, tc.limit)
			}
			if e.Message == "" {
				t.Errorf("error has no message saying what is wrong")
			}
		})
	}
	st, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetDistributors()) != 0 || len(st.GetVersions()) != 0 {
		t.Errorf("rejected reports were stored: %v", st)
	}

	for _, tc := range []struct {
		zone  string
		code  codes.Code
		field string
	}{
		{"Zone_A", codes.InvalidArgument, "zone"},
		{"", codes.InvalidArgument, "zone"},
		{"zone-x", codes.NotFound, "zone"},
	} {
		_, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: tc.zone})
		if e := apierror.FromError(err); e.Code != tc.code || e.Field != tc.field {
			t.Errorf("GetZoneStatus(%q) = %v; want %v on %q", tc.zone, err, tc.code, tc.field)
		}
	}
	if _, err := cl.ReportZoneStatus(context.Background(), ok()); err != nil {
		t.Errorf("a valid report after the rejections: %v", err)
	}
}

// A zone's first report is recorded (Zone.last_report_time), so the
// strategist can tell a zone whose distributors stopped from one that
// never had any; a zone nobody reported in has none.
func TestZoneRecordsWhenItLastReported(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Second)
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 1})
	zs, err := cl.ListZones(testCtx(t), &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*lehrpb.Zone{}
	for _, z := range zs.GetZones() {
		got[z.GetName()] = z
	}
	if lr := got["zone-a"].GetLastReportTime(); lr == nil || lr.AsTime().Before(before) {
		t.Errorf("zone-a's last report time %v; want it set by its report", lr)
	}
	if lr := got["zone-b"].GetLastReportTime(); lr != nil {
		t.Errorf("zone-b's last report time %v; want none: nobody reported in it", lr)
	}
}

// GetZoneStatus answers one namespace's part of the reports when asked
// (the console's namespace page), and the basic view without each
// distributor's own counts (the fleet page), the sums unchanged.
func TestZoneStatusNamespaceAndView(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"d1", "d2"} {
		if _, err := cl.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: d, Agents: 2,
			Versions: []*lehrpb.VersionCount{vc("x/app", 1, 1), vc("x/db", 3, 1)},
			Health:   []*lehrpb.NamespaceHealth{{Namespace: "x/app", Version: 1, Agents: 1}, {Namespace: "x/db", Version: 3, Agents: 1}},
			Hosts:    []*lehrpb.HostReport{{HostId: d + "-h", Report: &lehrpb.NamespaceReport{Namespace: "x/db", Version: 3}}}}); err != nil {
			t.Fatal(err)
		}
	}
	nsOf := func(st *lehrpb.GetZoneStatusResponse) (out []string) {
		for _, v := range st.GetVersions() {
			out = append(out, fmt.Sprintf("%s@%d×%d", v.GetNamespace(), v.GetVersion(), v.GetAgents()))
		}
		for _, h := range st.GetHealth() {
			out = append(out, "health "+h.GetNamespace())
		}
		for _, h := range st.GetHosts() {
			out = append(out, "host "+h.GetHostId())
		}
		for _, d := range st.GetDistributors() {
			out = append(out, fmt.Sprintf("%s: %d counts, %d health", d.GetDistributorId(), len(d.GetVersions()), len(d.GetHealth())))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		req  *lehrpb.GetZoneStatusRequest
		want []string
	}{
		{"full", &lehrpb.GetZoneStatusRequest{Zone: "zone-a"},
			[]string{"x/app@1×2", "x/db@3×2", "health x/app", "health x/db", "host d1-h", "host d2-h", "d1: 2 counts, 2 health", "d2: 2 counts, 2 health"}},
		{"one namespace", &lehrpb.GetZoneStatusRequest{Zone: "zone-a", Namespace: "x/db"},
			[]string{"x/db@3×2", "health x/db", "host d1-h", "host d2-h", "d1: 1 counts, 1 health", "d2: 1 counts, 1 health"}},
		{"basic", &lehrpb.GetZoneStatusRequest{Zone: "zone-a", View: lehrpb.ZoneStatusView_ZONE_STATUS_VIEW_BASIC},
			[]string{"x/app@1×2", "x/db@3×2", "health x/app", "health x/db", "host d1-h", "host d2-h", "d1: 0 counts, 2 health", "d2: 0 counts, 2 health"}},
	} {
		st, err := cl.GetZoneStatus(testCtx(t), tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := nsOf(st); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q\nwant %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		req   *lehrpb.GetZoneStatusRequest
		field string
	}{
		{&lehrpb.GetZoneStatusRequest{Zone: "zone-a", Namespace: "nodomain"}, "namespace"},
		{&lehrpb.GetZoneStatusRequest{Zone: "zone-a", View: 7}, "view"},
	} {
		_, err := cl.GetZoneStatus(testCtx(t), tc.req)
		if e := apierror.FromError(err); err == nil || e.Code != codes.InvalidArgument || e.Field != tc.field {
			t.Errorf("GetZoneStatus(%v) = %v; want INVALID_ARGUMENT on %s", tc.req, err, tc.field)
		}
	}
}

// A distributor whose agents subscribe to the catalog's namespaces reports
// more version counts than one etcd request holds; the report is stored
// (in parts) and read back whole, and the strategist's view of the zone is
// the same as with a small report.
func TestZoneStatusOfACatalogSizedReport(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	// 50,000 namespaces of 277 domains with a consumer service each:
	// about 2.2 MB encoded, twice etcd's default request limit.
	req := &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 7500}
	for i := range 50_000 {
		req.Versions = append(req.Versions, &lehrpb.VersionCount{
			Namespace: fmt.Sprintf("domain-%03d/namespace-%05d", i%277, i), Version: uint64(1 + i%7), Agents: int32(1 + i%3),
			Consumers: 2, Services: []*lehrpb.ServiceConsumers{{Service: "checkout", Consumers: 2}},
		})
	}
	for round := range 2 { // the second stores only what changed
		reportStatus(t, cl, req)
		st, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
		if err != nil {
			t.Fatalf("round %d: GetZoneStatus: %v", round, err)
		}
		if got, want := len(st.GetVersions()), len(req.GetVersions()); got != want {
			t.Fatalf("round %d: GetZoneStatus has %d version counts, want %d", round, got, want)
		}
		one, err := cl.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: "zone-a", Namespace: req.Versions[40100].GetNamespace()})
		if err != nil {
			t.Fatalf("round %d: GetZoneStatus of one namespace: %v", round, err)
		}
		want := []*lehrpb.VersionCount{req.Versions[40100]}
		if diff := cmp.Diff(want, one.GetVersions(), protocmp.Transform()); diff != "" {
			t.Errorf("round %d: one namespace's counts (-want +got):\n%s", round, diff)
		}
		req.Versions[40100].Agents++
		req.Versions = req.Versions[:len(req.Versions)-1]
	}
}
