package store

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
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
	if got := ids(); !cmp.Equal(got, []string{"dies", "stays"}) {
		t.Fatalf("distributors before expiry = %v, want [dies stays]", got)
	}
	wait.For(t, "the unrenewed report to expire", func() bool { return cmp.Equal(ids(), []string{"stays"}) })

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
	if got := ids(); !cmp.Equal(got, []string{"dies", "stays"}) {
		t.Errorf("distributors after the new report = %v, want [dies stays]", got)
	}

	// A lease revoked behind the store's back (another process) is
	// replaced the same way.
	if _, err := s.cli.Revoke(ctx, keep.ID); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !cmp.Equal(got, []string{"dies"}) {
		t.Fatalf("distributors after revoking the lease of stays = %v, want [dies]", got)
	}
	again, err := s.PutZoneStatus(ctx, "z1", report("stays", 4), 60*time.Second, keep)
	if err != nil {
		t.Fatalf("PutZoneStatus with a revoked lease: %v", err)
	}
	if again.ID == keep.ID {
		t.Errorf("kept the revoked lease %x", keep.ID)
	}
	if got := ids(); !cmp.Equal(got, []string{"dies", "stays"}) {
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
	huge := report("big", 1)
	for i := range 40000 {
		huge.Versions = append(huge.Versions, &lehrpb.VersionCount{Namespace: "domain/" + strings.Repeat("n", 20), Version: uint64(i + 1), Agents: 1})
	}
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
		{"too large", "z1", huge, time.Minute, "at most 1048576 fit"},
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
