package control_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// bigProps returns n random values of size bytes each.
func bigProps(n, size int) []*lehrpb.Property {
	ps := make([]*lehrpb.Property, n)
	for i := range ps {
		v := make([]byte, size)
		rand.Read(v)
		ps[i] = &lehrpb.Property{Key: fmt.Sprintf("blob/%03d", i), Value: v}
	}
	return ps
}

// TestOneTenantCannotStopAnother is issue 26's first scenario on a real
// control with a small store: a tenant floods large snapshots until the
// store refuses it — cleanly, RESOURCE_EXHAUSTED/STORE_FULL naming its
// fair share, never INTERNAL — while another tenant publishes on, within
// its share, until it too is refused cleanly at the mark no content
// passes; its rollback of a bad version still succeeds and moves the
// zone's goal, every refusal is in the audit log, and once the flood's
// history is compacted (lehr history compact) publishes resume by
// themselves.
func TestOneTenantCannotStopAnother(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{StoreQuota: 96 << 20, Rollouts: true})
	cl := srv.Client
	ctx := testCtx(t)
	// Both may publish fast (a fleet admin raised their rates: the test's
	// plaintext caller is one, in dev mode); their bytes quota is the
	// default, which the small store cannot hold.
	fast := &lehrpb.Quotas{PublishesPerSecond: 1000, PublishBurst: 1000, PublishBytesPerSecond: 1 << 30}
	for _, d := range []*lehrpb.Domain{{Name: "flood", Quotas: fast}, {Name: "victim", Quotas: fast}} {
		if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: d}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "z"}); err != nil {
		t.Fatal(err)
	}
	// The victim's versions go through the rollout strategist, whose
	// election and every write are the safety path's.
	if _, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: "victim", Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}}); err != nil {
		t.Fatal(err)
	}
	good := publish(t, cl, "victim/app", prop("k", "", "good"))
	publish(t, cl, "victim/app", prop("k", "", "bad"))

	var refused *apierror.Error
	for i := 0; refused == nil; i++ {
		_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "flood/big", Properties: bigProps(4, 256<<10)})
		switch e := apierror.FromError(err); {
		case err == nil:
		case e.Code == codes.ResourceExhausted && e.Reason == apierror.ReasonStoreFull:
			refused = e
		default:
			t.Fatalf("flood publish %d: %v (want success or STORE_FULL)", i, err)
		}
		if i > 200 {
			t.Fatal("200 MiB published into a 96 MiB store without a refusal")
		}
	}
	for _, want := range []string{"high-water mark", "domain flood holds", "fair share", "lehr history compact", "--store-quota", "rollbacks still work"} {
		if !strings.Contains(refused.Message, want) {
			t.Errorf("STORE_FULL message lacks %q: %s", want, refused.Message)
		}
	}
	// The victim holds less than its fair share: it publishes on, then is
	// refused cleanly once the store reaches the mark no content passes.
	victimRefusals := 0
	for i := 0; victimRefusals == 0; i++ {
		v, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "victim/app", Properties: bigProps(1, 256<<10)})
		switch e := apierror.FromError(err); {
		case err == nil && i == 0:
			// The strategist rolls it out above the high-water mark.
			wait.Until(t, "the victim's version to be zone z's goal", func() error {
				goals, err := cl.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: "z", Namespace: "victim/app"})
				if err != nil {
					return err
				}
				if g := goals.GetGoals(); len(g) != 1 || g[0].GetVersion() != v.GetVersion().GetSeq() {
					return fmt.Errorf("goals %v, want version %d", g, v.GetVersion().GetSeq())
				}
				return nil
			})
		case err == nil:
			if i > 200 {
				t.Fatal("50 MiB more published above the high-water mark without a refusal")
			}
		case e.Code == codes.ResourceExhausted && e.Reason == apierror.ReasonStoreFull:
			if i == 0 {
				t.Fatalf("the victim's first publish above the mark, within its fair share: %v; want it accepted", err)
			}
			victimRefusals++
		default:
			t.Fatalf("victim publish %d: %v (want success or STORE_FULL)", i, err)
		}
	}

	// The safety path.
	rb, err := cl.Rollback(ctx, &lehrpb.RollbackRequest{Namespace: "victim/app", ToVersion: good.GetSeq(), Message: "undo the bad version"})
	if err != nil {
		t.Fatalf("the victim's rollback with the store full: %v", err)
	}
	goals, err := cl.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: "z", Namespace: "victim/app"})
	if err != nil || len(goals.GetGoals()) != 1 || goals.GetGoals()[0].GetVersion() != rb.GetVersion().GetSeq() {
		t.Fatalf("zone z's goal after the rollback: %v, %v; want version %d", goals, err, rb.GetVersion().GetSeq())
	}

	// Every refusal is audited.
	audit, err := cl.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	full := map[string]int{}
	for _, r := range audit.GetRecords() {
		if r.GetCode() == "RESOURCE_EXHAUSTED" && strings.HasPrefix(r.GetError(), apierror.ReasonStoreFull) {
			full[r.GetDomain()]++
		}
	}
	if full["flood"] != 1 || full["victim"] != victimRefusals {
		t.Errorf("audited STORE_FULL refusals per domain: %v, want flood 1 and victim 1", full)
	}

	// The flooder's admin frees its history; control gives the space back
	// by itself and publishes resume.
	resp, err := cl.CompactNamespace(ctx, &lehrpb.CompactNamespaceRequest{Name: "flood/big", KeepLast: 1, Message: "free the store"})
	if err != nil || resp.GetVersionsRemoved() == 0 {
		t.Fatalf("CompactNamespace: %v, %v", resp, err)
	}
	wait.Until(t, "the victim's large publish to be accepted again", func() error {
		_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "victim/app", Properties: bigProps(4, 256<<10)})
		return err
	})
}

// TestDomainStoredBytesQuota: a domain's stored bytes are counted against
// its quota; beyond it a publish is RESOURCE_EXHAUSTED/QUOTA_EXCEEDED
// naming the domain, what it stores, its quota and what to do, and every
// fix the message suggests works: compacting its history makes room, and
// a fleet admin may raise the quota — its own admin may not, above the
// server's default.
func TestDomainStoredBytesQuota(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"root"}},
		mtlsDial(pool, userCert(t, ca, caKey, "alice")))
	alice := srv.Client
	root := lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, userCert(t, ca, caKey, "root"))))
	ctx := testCtx(t)
	if _, err := alice.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay",
		Quotas: &lehrpb.Quotas{MaxStoredBytes: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	var quota *apierror.Error
	for i := 0; quota == nil; i++ {
		_, err := alice.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/rules", Properties: bigProps(1, 300<<10)})
		if e := apierror.FromError(err); err != nil {
			if e.Code != codes.ResourceExhausted || e.Reason != apierror.ReasonQuotaExceeded {
				t.Fatalf("publish %d: %v, want success or QUOTA_EXCEEDED", i, err)
			}
			quota = e
		}
		if i > 10 {
			t.Fatal("3 MiB published into a 1 MiB quota")
		}
	}
	for _, want := range []string{"domain pay", "of its 1.0 MiB quota", "lehr history compact", "lehr domain update pay --max-stored-bytes"} {
		if !strings.Contains(quota.Message, want) {
			t.Errorf("QUOTA_EXCEEDED message lacks %q: %s", want, quota.Message)
		}
	}
	d, err := alice.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	if u := d.GetUsage(); u.GetStoredBytes() < 600<<10 || u.GetStoredBytes() > 1<<20 || u.GetNamespaces() != 1 || d.GetEffectiveQuotas().GetMaxStoredBytes() != 1<<20 {
		t.Errorf("GetDomain: usage %v, effective quotas %v", u, d.GetEffectiveQuotas())
	}
	// Every quota it did not set is the server's default: a new domain is
	// never unlimited (the issue: no publish rate or outbound limit).
	if q := d.GetEffectiveQuotas(); q.GetPublishesPerSecond() != 10 || q.GetPublishBurst() != 20 || q.GetPublishBytesPerSecond() != 2<<20 ||
		q.GetOutboundBytesPerSecond() != 128<<20 || q.GetMaxNamespaces() != 1000 {
		t.Errorf("effective quotas of a domain that set only max_stored_bytes: %v; want the defaults for the rest", q)
	}

	// Its own admin cannot raise it above the default; a fleet admin can.
	raise := func(cl lehrpb.ControlClient, n int64) error {
		_, err := cl.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Quotas: &lehrpb.Quotas{MaxStoredBytes: n}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"quotas"}}})
		return err
	}
	err = raise(alice, 1<<30)
	if e := apierror.FromError(err); e.Code != codes.PermissionDenied || e.Field != "domain.quotas.max_stored_bytes" || !strings.Contains(e.Message, "fleet admin") {
		t.Fatalf("alice raising her domain's quota to 1 GiB: %v, want PERMISSION_DENIED on domain.quotas.max_stored_bytes naming fleet admins", err)
	}
	if _, err := alice.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "greedy", Quotas: &lehrpb.Quotas{MaxStoredBytes: 1 << 40}}}); !errors.Is(apierror.FromError(err), apierror.ErrDenied) {
		t.Fatalf("alice creating a domain with a 1 TiB quota: %v, want PERMISSION_DENIED", err)
	}
	if err := raise(alice, 2<<20); err != nil {
		t.Fatalf("alice raising her quota within the default: %v", err)
	}
	if _, err := alice.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/rules", Properties: bigProps(1, 300<<10)}); err != nil {
		t.Fatalf("publish after raising the quota: %v", err)
	}
	if err := raise(root, 1<<30); err != nil {
		t.Fatalf("a fleet admin raising the quota: %v", err)
	}

	// Compacting frees the domain's bytes.
	before, _ := alice.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "pay"})
	resp, err := alice.CompactNamespace(ctx, &lehrpb.CompactNamespaceRequest{Name: "pay/rules", KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := alice.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "pay"})
	if resp.GetVersionsRemoved() < 2 || after.GetUsage().GetStoredBytes() >= before.GetUsage().GetStoredBytes()/2 ||
		resp.GetNamespace().GetStoredBytes() != after.GetUsage().GetStoredBytes() {
		t.Errorf("CompactNamespace removed %d versions; domain stored %d bytes before, %d after (namespace says %d)",
			resp.GetVersionsRemoved(), before.GetUsage().GetStoredBytes(), after.GetUsage().GetStoredBytes(), resp.GetNamespace().GetStoredBytes())
	}
	if _, err := alice.CompactNamespace(ctx, &lehrpb.CompactNamespaceRequest{Name: "pay/rules", KeepLast: 0}); apierror.FromError(err).Field != "keep_last" {
		t.Errorf("CompactNamespace keep_last 0: %v, want INVALID_ARGUMENT on keep_last", err)
	}
}

// roundTrips sums control's etcd round trips so far.
func roundTrips(t *testing.T, srv *controltest.Server) int {
	t.Helper()
	var b strings.Builder
	srv.Control.Metrics().WritePrometheus(&b)
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "lehr_control_etcd_round_trips_total{") {
			var v int
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
	}
	return n
}

// TestRefusedFloodCostsLittle: a caller that retries rate-limited
// publishes at once (hostile, or a careless loop) is refused before
// control reads etcd, and its refusals are folded in the audit log — each
// counted, a record a second — so it neither takes etcd's time from other
// tenants nor fills the store with audit records.
func TestRefusedFloodCostsLittle(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "r",
		Quotas: &lehrpb.Quotas{PublishesPerSecond: 0.5, PublishBurst: 1}}}); err != nil {
		t.Fatal(err)
	}
	publish(t, cl, "r/app", prop("k", "", "v1"))
	const flood = 200
	before := roundTrips(t, srv)
	for i := range flood {
		_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "r/app", Properties: []*lehrpb.Property{prop("k", "", fmt.Sprint(i))}})
		if e := apierror.FromError(err); e.Reason != apierror.ReasonRateLimited {
			t.Fatalf("publish %d beyond the rate: %v, want RATE_LIMITED", i, err)
		}
	}
	if n := roundTrips(t, srv) - before; n > 20 {
		t.Errorf("%d refused publishes cost %d etcd round trips; want almost none (the first refusal reads, the rest are refused before)", flood, n)
	}
	wait.Until(t, "every refusal to be in the audit log", func() error {
		audit, err := cl.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{Domain: "r", PageSize: 1000})
		if err != nil {
			return err
		}
		calls, recs := 0, 0
		for _, r := range audit.GetRecords() {
			if r.GetCode() == "RESOURCE_EXHAUSTED" {
				calls, recs = calls+1+int(r.GetRepeats()), recs+1
			}
		}
		if calls != flood {
			return fmt.Errorf("%d refused calls in %d records, want %d calls", calls, recs, flood)
		}
		if recs > 10 {
			return fmt.Errorf("%d refused calls took %d records; want them folded, a record a second", calls, recs)
		}
		return nil
	})
}
