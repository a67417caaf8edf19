package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// opCounter counts the etcd operations a Store makes.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) observe(op string, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = make(map[string]int)
	}
	c.ops[op]++
}

func (c *opCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// report builds a report from (namespace, version, agents) triples.
func report(id string, agents int32, kv ...any) *lehrpb.DistributorStatus {
	st := &lehrpb.DistributorStatus{DistributorId: id, Agents: agents}
	for i := 0; i+3 <= len(kv); i += 3 {
		st.Versions = append(st.Versions, &lehrpb.VersionCount{
			Namespace: kv[i].(string), Version: uint64(kv[i+1].(int)), Agents: int32(kv[i+2].(int)),
		})
	}
	return st
}

func TestZoneStatusReusesOneLease(t *testing.T) {
	var ops opCounter
	s := newTestStore(t, Options{OnRoundTrip: ops.observe})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}

	var la, lb ReportLease
	var err error
	for i := range 3 {
		if la, err = s.PutZoneStatus(ctx, "z1", report("dist-a", int32(i), "d/app", 1, i), 30*time.Second, la); err != nil {
			t.Fatalf("PutZoneStatus(dist-a) #%d: %v", i, err)
		}
	}
	if lb, err = s.PutZoneStatus(ctx, "z1", report("dist-b", 5, "d/app", 2, 5), 30*time.Second, lb); err != nil {
		t.Fatalf("PutZoneStatus(dist-b): %v", err)
	}
	if got := ops.get("lease_grant"); got != 2 {
		t.Errorf("leases granted for 3 reports of one distributor and 1 of another = %d, want 2", got)
	}
	if got := ops.get("lease_keepalive"); got != 2 {
		t.Errorf("lease keep-alives = %d, want 2 (the second and third report of dist-a)", got)
	}
	if la.ID == lb.ID {
		t.Errorf("two distributors share lease %x", la.ID)
	}

	got, err := s.ZoneStatus(ctx, "z1")
	if err != nil {
		t.Fatalf("ZoneStatus: %v", err)
	}
	want := []*lehrpb.DistributorStatus{report("dist-a", 2, "d/app", 1, 2), report("dist-b", 5, "d/app", 2, 5)}
	if diff := gocmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("ZoneStatus (-want +got):\n%s", diff)
	}

	// A new TTL moves the report to a new lease and revokes the old one.
	old := la
	if la, err = s.PutZoneStatus(ctx, "z1", report("dist-a", 3), 20*time.Second, la); err != nil {
		t.Fatalf("PutZoneStatus with a new TTL: %v", err)
	}
	if la.ID == old.ID || la.TTL != 20*time.Second {
		t.Errorf("lease after a TTL change = %+v, want a new lease with TTL 20s (old %+v)", la, old)
	}
	ttl, err := s.cli.TimeToLive(ctx, old.ID)
	if err != nil {
		t.Fatalf("TimeToLive(old lease): %v", err)
	}
	if ttl.TTL != -1 {
		t.Errorf("old lease TTL = %d, want -1 (revoked)", ttl.TTL)
	}
	ttl, err = s.cli.TimeToLive(ctx, la.ID)
	if err != nil {
		t.Fatalf("TimeToLive(new lease): %v", err)
	}
	if ttl.GrantedTTL != 20 {
		t.Errorf("new lease granted TTL = %d, want 20", ttl.GrantedTTL)
	}
	if got, err := s.ZoneStatus(ctx, "z1"); err != nil || len(got) != 2 || got[0].GetAgents() != 3 {
		t.Errorf("ZoneStatus after the TTL change = %v, %v; want dist-a with 3 agents and dist-b", got, err)
	}
}

func TestZoneStatusExpires(t *testing.T) {
	var ops opCounter
	s := newTestStore(t, Options{OnRoundTrip: ops.observe})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	keep, err := s.PutZoneStatus(ctx, "z1", report("stays", 1), 60*time.Second, ReportLease{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := s.PutZoneStatus(ctx, "z1", report("dies", 2), time.Second, ReportLease{})
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		sts, err := s.ZoneStatus(ctx, "z1")
		if err != nil {
			t.Fatalf("ZoneStatus: %v", err)
		}
		var out []string
		for _, st := range sts {
			out = append(out, st.GetDistributorId())
		}
		return out
	}
	if got := ids(); !gocmp.Equal(got, []string{"dies", "stays"}) {
		t.Fatalf("distributors before expiry = %v, want [dies stays]", got)
	}
	wait.For(t, "the unrenewed report to expire", func() bool { return gocmp.Equal(ids(), []string{"stays"}) })

	// The distributor comes back with its expired lease: a new one is
	// granted and the report is live again.
	grants := ops.get("lease_grant")
	back, err := s.PutZoneStatus(ctx, "z1", report("dies", 3), time.Second, dead)
	if err != nil {
		t.Fatalf("PutZoneStatus with an expired lease: %v", err)
	}
	if back.ID == dead.ID || ops.get("lease_grant") != grants+1 {
		t.Errorf("lease after expiry = %x (was %x), grants %d → %d; want a new grant", back.ID, dead.ID, grants, ops.get("lease_grant"))
	}
	if got := ids(); !gocmp.Equal(got, []string{"dies", "stays"}) {
		t.Errorf("distributors after the new report = %v, want [dies stays]", got)
	}

	// A lease revoked behind the store's back (another process) is
	// replaced the same way.
	if _, err := s.cli.Revoke(ctx, keep.ID); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !gocmp.Equal(got, []string{"dies"}) {
		t.Fatalf("distributors after revoking the lease of stays = %v, want [dies]", got)
	}
	again, err := s.PutZoneStatus(ctx, "z1", report("stays", 4), 60*time.Second, keep)
	if err != nil {
		t.Fatalf("PutZoneStatus with a revoked lease: %v", err)
	}
	if again.ID == keep.ID {
		t.Errorf("kept the revoked lease %x", keep.ID)
	}
	if got := ids(); !gocmp.Equal(got, []string{"dies", "stays"}) {
		t.Errorf("distributors after re-reporting = %v, want [dies stays]", got)
	}
}

func TestZoneStatusUnknownZone(t *testing.T) {
	var ops opCounter
	s := newTestStore(t, Options{OnRoundTrip: ops.observe})
	ctx := testCtx(t)
	l, err := s.PutZoneStatus(ctx, "nowhere", report("d1", 1), 30*time.Second, ReportLease{})
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.What != "zone" || nf.Name != "nowhere" {
		t.Fatalf("PutZoneStatus(unknown zone) = %v, want a NotFoundError for zone nowhere", err)
	}
	if l.ID != 0 {
		t.Errorf("PutZoneStatus(unknown zone) returned lease %x, want none", l.ID)
	}
	if ops.get("lease_grant") != ops.get("lease_revoke") {
		t.Errorf("granted %d leases and revoked %d; want every lease granted for nothing revoked", ops.get("lease_grant"), ops.get("lease_revoke"))
	}
	if _, err := s.ZoneStatus(ctx, "nowhere"); !errors.As(err, &nf) {
		t.Errorf("ZoneStatus(unknown zone) = %v, want a NotFoundError", err)
	}
	resp, err := s.cli.Get(ctx, s.opts.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys stored after a rejected report, want 0", resp.Count)
	}
}

func TestZoneStatusInvalid(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	huge := bigReport("big", 200_000)
	for _, tc := range []struct {
		name string
		zone string
		st   *lehrpb.DistributorStatus
		ttl  time.Duration
		want string
	}{
		{"bad zone", "Zone_1", report("d", 1), time.Minute, "invalid zone"},
		{"empty id", "z1", report("", 1), time.Minute, "distributor id is 0 bytes"},
		{"long id", "z1", report(strings.Repeat("x", MaxDistributorIDBytes+1), 1), time.Minute, "distributor id is 129 bytes"},
		{"zero ttl", "z1", report("d", 1), 0, "ttl 0s"},
		{"fractional ttl", "z1", report("d", 1), 1500 * time.Millisecond, "ttl 1.5s"},
		{"too large", "z1", huge, time.Minute, "at most 6291456 are stored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.PutZoneStatus(ctx, tc.zone, tc.st, tc.ttl, ReportLease{})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PutZoneStatus = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	if got, err := s.ZoneStatus(ctx, "z1"); err != nil || len(got) != 0 {
		t.Errorf("ZoneStatus after rejected reports = %v, %v; want none", got, err)
	}
}

// bigReport is a report of n version counts of distinct namespaces, about
// 36 bytes each encoded: more than one etcd request holds from 30,000.
func bigReport(id string, n int) *lehrpb.DistributorStatus {
	st := report(id, int32(n))
	for i := range n {
		st.Versions = append(st.Versions, &lehrpb.VersionCount{
			Namespace: fmt.Sprintf("domain-%03d/namespace-%06d", i%277, i), Version: uint64(1 + i%5), Agents: int32(1 + i%4)})
	}
	return st
}

// reportKeys returns the keys of the parts of zone's reports.
func reportKeys(t *testing.T, s *Store, zone string) []string {
	t.Helper()
	resp, err := s.cli.Get(testCtx(t), s.lay.zoneReportsZone(zone), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// sortedCounts returns st's version counts sorted by namespace and version.
func sortedCounts(st *lehrpb.DistributorStatus) []*lehrpb.VersionCount {
	vs := slices.Clone(st.GetVersions())
	slices.SortFunc(vs, func(a, b *lehrpb.VersionCount) int {
		return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetVersion(), b.GetVersion()))
	})
	return vs
}

func TestZoneStatusInParts(t *testing.T) {
	var ops opCounter
	s := newTestStore(t, Options{OnRoundTrip: ops.observe})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	var lease ReportLease
	put := func(what string, st *lehrpb.DistributorStatus) (txns int) {
		t.Helper()
		before := ops.get("txn")
		var err error
		if lease, err = s.PutZoneStatus(ctx, "z1", st, 30*time.Second, lease); err != nil {
			t.Fatalf("%s: PutZoneStatus: %v", what, err)
		}
		got, err := s.ZoneStatus(ctx, "z1")
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: ZoneStatus = %d reports, %v; want 1", what, len(got), err)
		}
		if diff := gocmp.Diff(sortedCounts(st), sortedCounts(got[0]), protocmp.Transform()); diff != "" {
			t.Fatalf("%s: the counts read back differ from the report's (-want +got):\n%s", what, diff)
		}
		if got[0].GetAgents() != st.GetAgents() {
			t.Errorf("%s: agents read back %d, want %d", what, got[0].GetAgents(), st.GetAgents())
		}
		return ops.get("txn") - before - 1 // less ZoneStatus's read
	}

	big := bigReport("dist-a", 60_000) // about 2.2 MB
	first := put("the first large report", big)
	parts := len(reportKeys(t, s, "z1")) - 1 // less the index
	if parts < 2 {
		t.Fatalf("a 2 MB report is stored in %d parts, want several", parts)
	}
	if first < 3 {
		t.Errorf("the first large report took %d transactions; want its parts written in at least 2, then the report", first)
	}
	if got := put("the same report again", big); got != 1 {
		t.Errorf("the same report again took %d transactions, want 1: no part rewritten", got)
	}
	big.Versions[30_000].Agents += 10
	if got := put("one count changed", big); got != 2 {
		t.Errorf("a report with one count changed took %d transactions, want 2: the one part that changed, then the report", got)
	}
	if got := len(reportKeys(t, s, "z1")) - 1; got != parts {
		t.Errorf("after one count changed, %d parts are stored, want %d: the replaced part deleted", got, parts)
	}

	// A part gone behind the store's back (an operator's delete) is
	// written again by the next report.
	keys := reportKeys(t, s, "z1")
	if _, err := s.cli.Delete(ctx, keys[len(keys)-1]); err != nil {
		t.Fatal(err)
	}
	put("after a part was deleted", big)

	// Another replica reports for the same distributor on its own lease:
	// every part is written on it, and nothing of the first is left.
	other := New(s.cli, Options{Prefix: s.opts.Prefix, Logger: quietLogger()})
	big.Versions[10].Agents++
	if _, err := other.PutZoneStatus(ctx, "z1", big, 30*time.Second, ReportLease{}); err != nil {
		t.Fatalf("PutZoneStatus from another replica: %v", err)
	}
	lease = ReportLease{} // forget ours, as the first replica would once the lease expired
	put("after another replica's report", big)
	if got := len(reportKeys(t, s, "z1")) - 1; got != parts {
		t.Errorf("after reports on two leases, %d parts are stored, want %d", got, parts)
	}

	// Small again: one key, no parts.
	put("a small report", report("dist-a", 1, "d/app", 1, 1))
	if got := reportKeys(t, s, "z1"); len(got) != 0 {
		t.Errorf("after a small report, the parts' keys %q are left", got)
	}

	// A zone deleted with its distributors' reports takes their parts.
	put("large again", big)
	if err := s.DeleteZone(ctx, "z1", true); err != nil {
		t.Fatal(err)
	}
	if got := reportKeys(t, s, "z1"); len(got) != 0 {
		t.Errorf("after the zone was deleted, %d keys of its reports' parts are left", len(got))
	}
}

func TestZoneStatusInPartsExpires(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutZoneStatus(ctx, "z1", bigReport("dies", 40_000), time.Second, ReportLease{}); err != nil {
		t.Fatal(err)
	}
	if len(reportKeys(t, s, "z1")) < 3 {
		t.Fatalf("parts stored: %q, want an index and 2 parts or more", reportKeys(t, s, "z1"))
	}
	wait.For(t, "the report and its parts to expire", func() bool {
		sts, err := s.ZoneStatus(ctx, "z1")
		return err == nil && len(sts) == 0 && len(reportKeys(t, s, "z1")) == 0
	})
}

// Cutting a report where its namespaces say so keeps a part's name when
// the counts it holds do not change, whatever changes elsewhere.
func TestSplitZoneReportIsStable(t *testing.T) {
	names := func(st *lehrpb.DistributorStatus) []string {
		t.Helper()
		rep, err := splitZoneReport(st)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, p := range rep.parts {
			if len(p.b) > MaxZoneReportPartBytes {
				t.Errorf("part %d is %d bytes, over %d", i, len(p.b), MaxZoneReportPartBytes)
			}
			if len(p.b) < partMinBytes && i < len(rep.parts)-1 {
				t.Errorf("part %d of %d is %d bytes, under %d", i, len(rep.parts), len(p.b), partMinBytes)
			}
			out = append(out, p.name)
		}
		return out
	}
	st := bigReport("d", 100_000)
	base := names(st)
	if len(base) < 8 {
		t.Fatalf("100,000 counts in %d parts, want several", len(base))
	}
	// Shuffled: the same parts.
	rev := slices.Clone(st.Versions)
	slices.Reverse(rev)
	if got := names(&lehrpb.DistributorStatus{DistributorId: "d", Agents: st.Agents, Versions: rev}); !slices.Equal(got, base) {
		t.Errorf("the counts in another order give other parts")
	}
	// One namespace more in the middle: at most two parts differ.
	st.Versions = slices.Insert(st.Versions, 50_000, &lehrpb.VersionCount{Namespace: "domain-050/namespace-050000a", Version: 1, Agents: 1})
	got := names(st)
	changed := 0
	for _, n := range got {
		if !slices.Contains(base, n) {
			changed++
		}
	}
	if changed > 2 {
		t.Errorf("one namespace added changed %d of %d parts, want at most 2", changed, len(got))
	}
	if _, err := splitZoneReport(&lehrpb.DistributorStatus{DistributorId: "d", Versions: st.Versions[:10]}); err != nil {
		t.Errorf("a small report: %v", err)
	}
	if rep, _ := splitZoneReport(&lehrpb.DistributorStatus{DistributorId: "d", Versions: st.Versions[:10]}); len(rep.parts) != 0 {
		t.Errorf("a small report is cut in %d parts, want none", len(rep.parts))
	}
}
