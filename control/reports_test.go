package control_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A distributor's report is its own word (issue 28, item 2). With a
// zone-a distributor certificate, a report under another distributor's
// id — the one that used to fail a rollout with a fabricated rejection,
// and 30 phantom ids that split every domain's zone quotas 32 ways — is
// refused with PERMISSION_DENIED and stores nothing; a report may not ask
// to live longer than MaxReportTTLSeconds; and a rollout failed on a
// distributor's report says whose word it rests on.
func TestReportsAreTheSendersWord(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	admin := issue(t, ca, caKey, "admin", false)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"admin"},
		Rollouts: true, RolloutInterval: 50 * time.Millisecond}, mtlsDial(pool, admin))
	ctx, cl := testCtx(t), srv.Client
	createDomain(t, cl, "pay", nil)
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	distA1 := lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, issueID(t, ca, caKey, "dist-a1", false,
		tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "dist-a1"}.URI()))))

	// Under another distributor's id, or phantom ones: refused.
	for _, id := range append([]string{"dist-a2"}, phantoms(30)...) {
		_, err := distA1.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: id, Agents: 1})
		e := apierror.FromError(err)
		if err == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `only as distributor "dist-a1"`) {
			t.Fatalf("a report of dist-a1's certificate under id %s: %v; want PERMISSION_DENIED saying it may report only as dist-a1", id, err)
		}
	}
	st, err := cl.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: "zone-a"})
	if err != nil || len(st.GetDistributors()) != 0 {
		t.Fatalf("zone status after refused reports: %v, %v; want no distributor", st, err)
	}
	// A report may not outlive its distributor for long.
	_, err = distA1.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dist-a1", Agents: 1, TtlSeconds: 300})
	if e := apierror.FromError(err); err == nil || e.Code != codes.InvalidArgument || e.Field != "ttl_seconds" || e.Limit != "120 seconds" {
		t.Fatalf("a report asking for a 300 s TTL: %v; want INVALID_ARGUMENT on ttl_seconds, limit 120 seconds", err)
	}
	// Under its own id: stored, and the zone's quotas are split one way.
	resp, err := distA1.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dist-a1", Agents: 1})
	if err != nil || resp.GetDistributors() != 1 {
		t.Fatalf("dist-a1's own report: %v, %v; want 1 distributor", resp, err)
	}

	// A rollout that fails on its report names it.
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "pay", Policy: &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{
		Name: "a", Bake: durationpb.New(time.Hour), Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-a"}}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	publishIdentified(t, cl, "pay/app", prop("k", "", "1"))
	v2 := publishIdentified(t, cl, "pay/app", prop("k", "", "2")).GetSeq()
	get := func() *lehrpb.Rollout { // nil until the strategist starts it
		r, _ := cl.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "pay/app", Version: v2})
		return r
	}
	wait.For(t, "the rollout to enter its stage", func() bool { return get().GetStageStartTime() != nil })
	if _, err := distA1.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "dist-a1", Agents: 1,
		Versions: []*lehrpb.VersionCount{{Namespace: "pay/app", Version: v2, Agents: 1}},
		Health:   []*lehrpb.NamespaceHealth{{Namespace: "pay/app", Version: v2, Agents: 1, Consumers: 1, ConsumersRejected: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the rollout to fail", func() bool { return get().GetState() == lehrpb.RolloutState_ROLLOUT_STATE_FAILED })
	want := fmt.Sprintf("1 of 1 consumers rejected version %d (ratio 1, stage \"a\" allows 0) on no host named; on the word of distributor zone-a/dist-a1", v2)
	if got := get().GetReason(); !strings.HasPrefix(got, want) {
		t.Errorf("reason %q, want it to start %q", got, want)
	}
	evs, err := cl.ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: "pay/app", Version: v2})
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, ev := range evs.GetEvents() {
		if ev.GetKind() == "failed" {
			failed = true
			if !strings.Contains(ev.GetMessage(), "on the word of distributor zone-a/dist-a1") {
				t.Errorf("failed event %q does not name the distributor whose report decided", ev.GetMessage())
			}
		}
	}
	if !failed {
		t.Errorf("no failed event in %v", evs.GetEvents())
	}
}

// phantoms returns n made-up distributor ids.
func phantoms(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("phantom-%02d", i)
	}
	return out
}
