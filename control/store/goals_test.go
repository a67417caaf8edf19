package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
)

// goalVersions maps namespace to goal version.
func goalVersions(gs []*lehrpb.GoalState) map[string]uint64 {
	out := map[string]uint64{}
	for _, g := range gs {
		out[g.GetNamespace()] = g.GetVersion()
	}
	return out
}

func TestZonesAndGoals(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	commit(t, s, Commit{Namespace: "d/a", Create: true, Content: snap(t, "k", "1")})
	commit(t, s, Commit{Namespace: "d/a", ExpectedLatest: 1, Content: snap(t, "k", "2")})
	commit(t, s, Commit{Namespace: "d/b", Create: true, Content: snap(t, "k", "1")})
	if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: "d/empty"}); err != nil {
		t.Fatal(err)
	}

	// A new zone starts at every namespace's latest version.
	z, err := s.CreateZone(ctx, "zone-a")
	if err != nil {
		t.Fatalf("CreateZone: %v", err)
	}
	if z.GetName() != "zone-a" {
		t.Errorf("CreateZone returned %v", z)
	}
	if _, err := s.CreateZone(ctx, "zone-a"); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second CreateZone: %v, want ErrAlreadyExists", err)
	}
	if err := s.EnsureZone(ctx, "zone-a"); err != nil {
		t.Errorf("EnsureZone of an existing zone: %v", err)
	}
	if err := s.EnsureZone(ctx, "zone-b"); err != nil {
		t.Errorf("EnsureZone of a new zone: %v", err)
	}
	goals, rev, err := s.Goals(ctx, "zone-a", "")
	if err != nil {
		t.Fatalf("Goals: %v", err)
	}
	if rev <= 0 {
		t.Errorf("Goals revision = %d, want > 0", rev)
	}
	if diff := cmp.Diff(map[string]uint64{"d/a": 2, "d/b": 1}, goalVersions(goals)); diff != "" {
		t.Errorf("goals after CreateZone (-want +got):\n%s", diff)
	}
	for _, g := range goals {
		if g.GetReason() != ZoneCreatedReason || g.GetZone() != "zone-a" || g.GetChecksum() == "" {
			t.Errorf("goal %v: want zone-a, reason %q and a checksum", g, ZoneCreatedReason)
		}
	}

	// A commit with GoalsAllZones moves every zone.
	info := commit(t, s, Commit{Namespace: "d/b", ExpectedLatest: 1, Content: snap(t, "k", "2"), GoalReason: "publish"})
	for _, zone := range []string{"zone-a", "zone-b"} {
		gs, _, err := s.Goals(ctx, zone, "d/b")
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) != 1 || gs[0].GetVersion() != 2 || gs[0].GetChecksum() != info.GetChecksum() || gs[0].GetReason() != "publish" {
			t.Errorf("goal of d/b in %s = %v, want version 2 reason publish", zone, gs)
		}
	}
	// GoalsNone leaves them alone; SetGoal moves one.
	commit(t, s, Commit{Namespace: "d/b", ExpectedLatest: 2, Content: snap(t, "k", "3"), Goals: GoalsNone})
	if gs, _, _ := s.Goals(ctx, "zone-a", "d/b"); len(gs) != 1 || gs[0].GetVersion() != 2 {
		t.Errorf("after a GoalsNone commit goal = %v, want still 2", gs)
	}
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "zone-a", Namespace: "d/b", Version: 3, Reason: "canary"}); err != nil {
		t.Fatalf("SetGoal: %v", err)
	}
	if gs, _, _ := s.Goals(ctx, "zone-a", "d/b"); len(gs) != 1 || gs[0].GetVersion() != 3 || gs[0].GetReason() != "canary" {
		t.Errorf("after SetGoal goal = %v, want 3 with reason canary", gs)
	}

	var nf *NotFoundError
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "zone-a", Namespace: "d/b", Version: 9}); !errors.As(err, &nf) || nf.What != "version" {
		t.Errorf("SetGoal to a missing version: %v, want version not found", err)
	}
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "nozone", Namespace: "d/b", Version: 1}); !errors.As(err, &nf) || nf.What != "zone" {
		t.Errorf("SetGoal in a missing zone: %v, want zone not found", err)
	}
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "zone-a", Namespace: "d/b", Version: 1, Checksum: "sha256:00"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetGoal with a wrong checksum: %v, want ErrInvalid", err)
	}
	if _, _, err := s.Goals(ctx, "nozone", ""); !errors.As(err, &nf) || nf.What != "zone" {
		t.Errorf("Goals of a missing zone: %v, want zone not found", err)
	}
	zones, err := s.ListZones(ctx)
	if err != nil || len(zones) != 2 {
		t.Errorf("ListZones = %v, %v; want 2 zones", zones, err)
	}
}

// TestCreateZoneManyNamespaces crosses the size where goals no longer fit in
// the registering transaction.
func TestCreateZoneManyNamespaces(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	const n = maxOpsPerTxn + 20
	want := map[string]uint64{}
	for i := range n {
		ns := fmt.Sprintf("d/ns-%03d", i)
		commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", ns), Goals: GoalsNone})
		want[ns] = 1
	}
	if _, err := s.CreateZone(ctx, "big"); err != nil {
		t.Fatalf("CreateZone: %v", err)
	}
	goals, _, err := s.Goals(ctx, "big", "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, goalVersions(goals)); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
}

func TestWatchGoals(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, Commit{Namespace: "d/w", Create: true, Content: snap(t, "k", "1")})
	_, rev, err := s.Goals(ctx, "z", "")
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	ch := s.WatchGoals(wctx, "z", rev+1)
	info := commit(t, s, Commit{Namespace: "d/w", ExpectedLatest: 1, Content: snap(t, "k", "2")})
	b := recvBatch(t, ch)
	if b.Err != nil {
		t.Fatalf("batch error: %v", b.Err)
	}
	if len(b.Events) != 1 || b.Events[0].GetType() != lehrpb.GoalEvent_TYPE_PUT ||
		b.Events[0].GetGoal().GetVersion() != 2 || b.Events[0].GetGoal().GetChecksum() != info.GetChecksum() {
		t.Fatalf("batch = %v, want one PUT of version 2", b.Events)
	}
	if b.Revision <= rev {
		t.Errorf("batch revision %d, want > %d", b.Revision, rev)
	}
	cancel()
	for range ch { // must close after cancel
	}

	// Resume after the batch: v3 only, not v2 again.
	commit(t, s, Commit{Namespace: "d/w", ExpectedLatest: 2, Content: snap(t, "k", "3")})
	wctx, cancel = context.WithCancel(ctx)
	defer cancel()
	ch = s.WatchGoals(wctx, "z", b.Revision+1)
	b2 := recvBatch(t, ch)
	if b2.Err != nil || len(b2.Events) != 1 || b2.Events[0].GetGoal().GetVersion() != 3 {
		t.Fatalf("resumed batch = %+v, want one PUT of version 3", b2)
	}
	// A delete shows up as a DELETE event.
	if _, err := s.cli.Delete(ctx, s.lay.goal("z", "d/w")); err != nil {
		t.Fatal(err)
	}
	b3 := recvBatch(t, ch)
	if b3.Err != nil || len(b3.Events) != 1 || b3.Events[0].GetType() != lehrpb.GoalEvent_TYPE_DELETE ||
		b3.Events[0].GetGoal().GetNamespace() != "d/w" || b3.Events[0].GetGoal().GetZone() != "z" {
		t.Fatalf("batch = %+v, want a DELETE of d/w in z", b3)
	}

	// After etcd compacts the revision, resuming from it is ErrRevisionGone.
	cur, err := s.cli.Get(ctx, "anything")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatalf("etcd compact: %v", err)
	}
	gone := recvBatch(t, s.WatchGoals(ctx, "z", rev+1))
	if !errors.Is(gone.Err, ErrRevisionGone) {
		t.Errorf("watch from a compacted revision: %v, want ErrRevisionGone", gone.Err)
	}
	if bad := recvBatch(t, s.WatchGoals(ctx, "z", 0)); !errors.Is(bad.Err, ErrInvalid) {
		t.Errorf("watch from revision 0: %v, want ErrInvalid", bad.Err)
	}
}

func recvBatch(t *testing.T, ch <-chan GoalBatch) GoalBatch {
	t.Helper()
	select {
	case b, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed, want a batch")
		}
		return b
	case <-time.After(30 * time.Second):
		t.Fatalf("no goal batch within 30s")
	}
	return GoalBatch{}
}

func TestDomainsAndNamespaces(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	for _, d := range []string{"c", "a", "b"} {
		mustDomain(t, s, d)
	}
	if _, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "a"}); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("duplicate CreateDomain: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "Bad/Name"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateDomain with a bad name: %v, want ErrInvalid", err)
	}
	var nf *NotFoundError
	if _, err := s.GetDomain(ctx, "zz"); !errors.As(err, &nf) || nf.What != "domain" {
		t.Errorf("GetDomain(zz): %v, want domain not found", err)
	}
	ds, err := s.ListDomains(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := domainNames(ds); !cmp.Equal(got, []string{"a", "b"}) {
		t.Errorf("ListDomains(first 2) = %v, want [a b]", got)
	}
	ds, err = s.ListDomains(ctx, "b", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := domainNames(ds); !cmp.Equal(got, []string{"c"}) {
		t.Errorf("ListDomains(after b) = %v, want [c]", got)
	}

	for _, n := range []string{"a/x", "a/y", "a/z", "b/x"} {
		if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: n, JsonSchema: `{"type":"object"}`}); err != nil {
			t.Fatalf("CreateNamespace(%s): %v", n, err)
		}
	}
	if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: "a/x"}); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("duplicate CreateNamespace: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: "nod/x"}); !errors.As(err, &nf) || nf.What != "domain" {
		t.Errorf("CreateNamespace in a missing domain: %v, want domain not found", err)
	}
	nss, err := s.ListNamespaces(ctx, "a", "a/x", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nss {
		got = append(got, n.GetName())
		if n.GetJsonSchema() != `{"type":"object"}` || n.GetLatestVersion() != 0 {
			t.Errorf("namespace %v: want the schema kept and latest 0", n)
		}
	}
	if !cmp.Equal(got, []string{"a/y", "a/z"}) {
		t.Errorf("ListNamespaces(a, after a/x) = %v, want [a/y a/z]", got)
	}
	if n, err := s.CountNamespaces(ctx, "a"); err != nil || n != 3 {
		t.Errorf("CountNamespaces(a) = %d, %v; want 3", n, err)
	}
	if n, err := s.CountNamespaces(ctx, "c"); err != nil || n != 0 {
		t.Errorf("CountNamespaces(c) = %d, %v; want 0", n, err)
	}
}

func domainNames(ds []*lehrpb.Domain) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.GetName())
	}
	return out
}

// A goal may carry a newer candidate version for a cohort of hosts; the
// store fills in its checksum and refuses what the distributors could not
// act on, changing nothing.
func TestGoalCandidate(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	const ns = "d/a"
	commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "1")})
	v2 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", "2"), Goals: GoalsNone})

	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: ns, Version: 1, Reason: "canary",
		Candidate: &lehrpb.CandidateGoal{Version: 2, Hosts: []string{"host-1"}, PerMillion: 50_000, Salt: "r1"}}); err != nil {
		t.Fatalf("SetGoal with a candidate: %v", err)
	}
	goals, _, err := s.Goals(ctx, "z", ns)
	if err != nil || len(goals) != 1 {
		t.Fatalf("Goals: %v, %v", goals, err)
	}
	c := goals[0].GetCandidate()
	if goals[0].GetVersion() != 1 || c.GetVersion() != 2 || c.GetChecksum() != v2.GetChecksum() || c.GetPerMillion() != 50_000 || c.GetSalt() != "r1" {
		t.Errorf("stored goal %v; want version 1 with candidate 2 (checksum filled in)", goals[0])
	}

	many := make([]string, MaxCohortHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d", i)
	}
	for _, tc := range []struct {
		name string
		c    *lehrpb.CandidateGoal
		want string
	}{
		{"not newer", &lehrpb.CandidateGoal{Version: 1}, "not newer"},
		{"unknown version", &lehrpb.CandidateGoal{Version: 9}, "not found"},
		{"wrong checksum", &lehrpb.CandidateGoal{Version: 2, Checksum: "sha256:00"}, "does not match"},
		{"too many hosts", &lehrpb.CandidateGoal{Version: 2, Hosts: many}, "at most 1000"},
		{"empty host", &lehrpb.CandidateGoal{Version: 2, Hosts: []string{""}}, "hosts[0]"},
		{"over a million", &lehrpb.CandidateGoal{Version: 2, PerMillion: 1_000_001}, "per_million"},
	} {
		err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: ns, Version: 1, Candidate: tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: SetGoal: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	after, _, _ := s.Goals(ctx, "z", ns)
	if !proto.Equal(after[0], goals[0]) {
		t.Errorf("refused goals changed the stored one: %v, was %v", after[0], goals[0])
	}
}

// TestGoalsAreSigned: with a Signer, a commit, a new zone and SetGoal
// write their goals signed (a rollout step goes through the same
// encodeGoal), and the signature sanctions what the goal names.
func TestGoalsAreSigned(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Options{Signer: signing.NewSigner(key)})
	v := signing.NewVerifier(pub)
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	const ns = "d/a"
	v1 := commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "1")})
	verify := func(zone, host string, ref content.Ref) {
		t.Helper()
		goals, _, err := s.Goals(ctx, zone, ns)
		if err != nil || len(goals) != 1 {
			t.Fatalf("Goals(%s): %v, %v", zone, goals, err)
		}
		if err := v.VerifyGoal(signing.GoalProof(goals[0]), zone, host, ns, ref); err != nil {
			t.Errorf("goal %v: %v", goals[0], err)
		}
	}
	verify("z", "h", content.Ref{Seq: 1, Checksum: v1.GetChecksum()}) // Commit
	if _, err := s.CreateZone(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	verify("y", "h", content.Ref{Seq: 1, Checksum: v1.GetChecksum()}) // a new zone
	v2 := commit(t, s, Commit{Namespace: ns, ExpectedLatest: 1, Content: snap(t, "k", "2"), Goals: GoalsNone})
	if err := s.SetGoal(ctx, &lehrpb.GoalState{Zone: "z", Namespace: ns, Version: 1,
		Candidate: &lehrpb.CandidateGoal{Version: 2, Hosts: []string{"canary-1"}}}); err != nil {
		t.Fatal(err)
	}
	verify("z", "canary-1", content.Ref{Seq: 2, Checksum: v2.GetChecksum()}) // SetGoal
}

// Goals written unsigned (by a control of an earlier release) are signed
// once by a control that has a key, leaving their content as it was; the
// pass runs once per store.
func TestSignUnsignedGoals(t *testing.T) {
	prefix := testPrefix(t)
	old := newTestStore(t, Options{Prefix: prefix})
	ctx := testCtx(t)
	mustDomain(t, old, "d")
	for _, z := range []string{"y", "z"} {
		if _, err := old.CreateZone(ctx, z); err != nil {
			t.Fatal(err)
		}
	}
	sums := map[string]string{}
	for _, ns := range []string{"d/a", "d/b"} {
		sums[ns] = commit(t, old, Commit{Namespace: ns, Create: true, Content: snap(t, "k", ns)}).GetChecksum()
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Options{Prefix: prefix, Signer: signing.NewSigner(key)})
	n, err := s.SignUnsignedGoals(ctx)
	if err != nil || n != 4 {
		t.Fatalf("SignUnsignedGoals = %d, %v; want 4 goals signed (2 zones × 2 namespaces)", n, err)
	}
	for _, z := range []string{"y", "z"} {
		for ns, sum := range sums {
			goals, _, err := s.Goals(ctx, z, ns)
			if err != nil || len(goals) != 1 {
				t.Fatalf("Goals(%s, %s): %v, %v", z, ns, goals, err)
			}
			if err := signing.NewVerifier(pub).VerifyGoal(signing.GoalProof(goals[0]), z, "h", ns, content.Ref{Seq: 1, Checksum: sum}); err != nil {
				t.Errorf("goal of %s in %s after signing: %v", ns, z, err)
			}
		}
	}
	if n, err := s.SignUnsignedGoals(ctx); err != nil || n != 0 {
		t.Errorf("a second pass signed %d, %v; want none (it ran already)", n, err)
	}
}

// DeleteZone removes a zone with its goals, reports and last report
// time; it refuses while a distributor reports unless forced.
func TestDeleteZone(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	for _, z := range []string{"a", "b"} {
		if _, err := s.CreateZone(ctx, z); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, s, Commit{Namespace: "d/n", Create: true, Content: snap(t, "k", "1"), Goals: GoalsAllZones})
	if err := s.MarkZoneReported(ctx, "a", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutZoneStatus(ctx, "a", &lehrpb.DistributorStatus{DistributorId: "d1"}, 30*time.Second, ReportLease{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteZone(ctx, "a", false); !errors.Is(err, ErrZoneInUse) {
		t.Fatalf("DeleteZone of a reporting zone = %v, want ErrZoneInUse", err)
	}
	if err := s.DeleteZone(ctx, "a", true); err != nil {
		t.Fatalf("DeleteZone forced: %v", err)
	}
	zs, err := s.ListZones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 1 || zs[0].GetName() != "b" {
		t.Errorf("zones after deleting a: %v, want [b]", zs)
	}
	for _, prefix := range []string{s.lay.goalsZone("a"), s.lay.zoneStatusPrefix("a"), s.lay.zoneReported("a")} {
		resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("%d keys left under %s (%v)", resp.Count, prefix, err)
		}
	}
	if gs, _, err := s.Goals(ctx, "b", "d/n"); err != nil || len(gs) != 1 {
		t.Errorf("zone b's goals after deleting a: %v, %v", gs, err)
	}
	var nf *NotFoundError
	if err := s.DeleteZone(ctx, "a", false); !errors.As(err, &nf) {
		t.Errorf("DeleteZone of a deleted zone = %v, want NotFound", err)
	}
	if err := s.DeleteZone(ctx, "b", false); err != nil {
		t.Errorf("DeleteZone of a zone without reports: %v", err)
	}
}
