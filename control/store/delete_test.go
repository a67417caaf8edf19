package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/proto/lehrpb"
)

// keysOf returns every key of the store that belongs to name (a
// namespace "d/n" or a domain "d"), but its tombstones and audit records.
func keysOf(t *testing.T, s *Store, name string) []string {
	t.Helper()
	resp, err := s.cli.Get(testCtx(t), s.lay.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), s.lay.prefix)
		if strings.HasPrefix(k, "tombstones/") || strings.HasPrefix(k, "audit/") {
			continue
		}
		if strings.Contains(k, "/"+name+"/") || strings.HasSuffix(k, "/"+name) {
			out = append(out, k)
		}
	}
	return out
}

// A namespace with more versions than an etcd transaction has operations,
// goals in every zone, request records, a rollout with its events and
// command, a rollout policy and its history goes in one DeleteNamespace:
// nothing of it is left but its tombstone, its domain's usage is credited
// back, another namespace is untouched, and the name created again
// continues after its last version.
func TestDeleteNamespace(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	for _, z := range []string{"a", "b"} {
		if _, err := s.CreateZone(ctx, z); err != nil {
			t.Fatal(err)
		}
	}
	const ns, versions = "d/n", 130
	for i := range versions {
		commit(t, s, Commit{Namespace: ns, Create: i == 0, ExpectedLatest: uint64(i), Content: snap(t, "k", fmt.Sprint(i), "big", strings.Repeat("x", i)),
			RequestID: fmt.Sprintf("req-%d", i), Goals: GoalsAllZones})
	}
	keep := commit(t, s, Commit{Namespace: "d/n2", Create: true, Content: snap(t, "k", "kept"), Goals: GoalsAllZones})
	if _, err := s.PutRolloutPolicy(ctx, ns, &lehrpb.RolloutPolicyRecord{Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}}, 0); err != nil {
		t.Fatal(err)
	}
	r := &lehrpb.Rollout{Id: RolloutID(ns, versions), Namespace: ns, Version: versions, State: lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED}
	if err := s.PutRollout(ctx, Guard{}, RolloutStep{Rollout: r, Events: []*lehrpb.RolloutEvent{{RolloutId: r.Id, Seq: 1, Kind: "started"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.QueueRolloutCommand(ctx, ns, versions, &lehrpb.RolloutCommand{RolloutId: r.Id}); err != nil {
		t.Fatal(err)
	}
	head, err := s.GetNamespace(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := s.DomainUsage(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	var checked DeletionState
	del, err := s.DeleteNamespace(ctx, ns, DeleteOptions{RequestID: "del-1", Check: func(st DeletionState) error { checked = st; return nil }})
	if err != nil {
		t.Fatalf("DeleteNamespace: %v", err)
	}
	if len(checked.Namespaces) != 1 || checked.Namespaces[0].GetName() != ns || len(checked.Rollouts) != 1 {
		t.Errorf("Check saw %d heads and %d rollouts; want %s and its rollout", len(checked.Namespaces), len(checked.Rollouts), ns)
	}
	want := Deletion{Namespaces: 1, Versions: versions, StoredBytes: head.GetStoredBytes(), LastVersion: versions}
	if del != want {
		t.Errorf("DeleteNamespace = %+v, want %+v", del, want)
	}
	if left := keysOf(t, s, ns); len(left) > 0 {
		t.Errorf("keys of %s left after its deletion: %q", ns, left)
	}
	var nf *NotFoundError
	if _, err := s.GetNamespace(ctx, ns); !errors.As(err, &nf) {
		t.Errorf("GetNamespace after deletion: %v, want NotFound", err)
	}
	if _, err := s.History(ctx, ns, 0, 10); !errors.As(err, &nf) {
		t.Errorf("History after deletion: %v, want NotFound", err)
	}
	after, nss, err := s.DomainUsage(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if after != before-head.GetStoredBytes() || nss != 1 {
		t.Errorf("domain usage after deletion: %d bytes in %d namespaces; want %d - %d in 1", after, nss, before, head.GetStoredBytes())
	}
	for _, z := range []string{"a", "b"} {
		gs, _, err := s.Goals(ctx, z, "")
		if err != nil || len(gs) != 1 || gs[0].GetNamespace() != "d/n2" || gs[0].GetVersion() != keep.GetSeq() {
			t.Errorf("zone %s's goals after the deletion: %v, %v; want d/n2's only", z, gs, err)
		}
	}
	readBack(t, s, "d/n2", keep.GetSeq(), snap(t, "k", "kept"))

	// A rollout step of the deleted namespace is not written again.
	if err := s.PutRollout(ctx, Guard{}, RolloutStep{Rollout: r}); !errors.As(err, &nf) || nf.What != "namespace" {
		t.Errorf("PutRollout of a deleted namespace = %v, want NotFound namespace", err)
	}
	// A retry of the deletion is answered as it was; another deletion
	// finds nothing.
	if again, err := s.DeleteNamespace(ctx, ns, DeleteOptions{RequestID: "del-1"}); err != nil || !again.Repeated || again.LastVersion != versions {
		t.Errorf("DeleteNamespace retried = %+v, %v; want it repeated", again, err)
	}
	if _, err := s.DeleteNamespace(ctx, ns, DeleteOptions{RequestID: "del-2"}); !errors.As(err, &nf) {
		t.Errorf("DeleteNamespace of a deleted namespace = %v, want NotFound", err)
	}

	// Created again, by a publish or CreateNamespace, it continues after
	// the deleted namespace's last version.
	v := commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "new"), Goals: GoalsAllZones})
	if v.GetSeq() != versions+1 || v.GetParent() != 0 {
		t.Errorf("first version of the namespace created again: seq %d parent %d; want %d, 0", v.GetSeq(), v.GetParent(), versions+1)
	}
	if h, err := s.GetNamespace(ctx, ns); err != nil || h.GetOldestVersion() != versions+1 || h.GetStoredBytes() <= 0 {
		t.Errorf("head of the namespace created again: %v, %v", h, err)
	}
	if _, err := s.DeleteNamespace(ctx, ns, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNamespace(ctx, &lehrpb.Namespace{Name: ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG}); err != nil {
		t.Fatal(err)
	}
	if del, err := s.DeleteNamespace(ctx, ns, DeleteOptions{}); err != nil || del.LastVersion != versions+1 {
		t.Errorf("deleting the namespace created without a version: %+v, %v; want last version %d kept", del, err, versions+1)
	}
	if v := commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "newer")}); v.GetSeq() != versions+2 {
		t.Errorf("third incarnation starts at %d, want %d", v.GetSeq(), versions+2)
	}
}

// A Check's refusal deletes nothing; the reports it is given are every
// zone's live ones.
func TestDeleteNamespaceRefused(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	const ns = "d/n"
	commit(t, s, Commit{Namespace: ns, Create: true, Content: snap(t, "k", "1"), Goals: GoalsAllZones})
	st := &lehrpb.DistributorStatus{DistributorId: "d1", Agents: 3, Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 1, Agents: 3}}}
	if _, err := s.PutZoneStatus(ctx, "a", st, 30*time.Second, ReportLease{}); err != nil {
		t.Fatal(err)
	}
	keys := keysOf(t, s, ns)
	refusal := errors.New("in use")
	_, err := s.DeleteNamespace(ctx, ns, DeleteOptions{ReadReports: true, Check: func(st DeletionState) error {
		if rs := st.Reports["a"]; len(rs) != 1 || rs[0].GetDistributorId() != "d1" || rs[0].GetVersions()[0].GetAgents() != 3 {
			t.Errorf("Check saw reports %v; want zone a's from d1", st.Reports)
		}
		return refusal
	}})
	if !errors.Is(err, refusal) {
		t.Fatalf("DeleteNamespace refused by Check = %v, want the refusal", err)
	}
	if got := keysOf(t, s, ns); !slices.Equal(got, keys) {
		t.Errorf("keys after a refused deletion:\n%q\nwant\n%q", got, keys)
	}
}

// A policy's preview namespace goes with it — in the same transaction, or
// with many zones in one of its own — and its tombstone too.
func TestDeleteNamespaceWithPreview(t *testing.T) {
	for _, zones := range []int{1, 50} {
		t.Run(fmt.Sprintf("%d zones", zones), func(t *testing.T) {
			s := newTestStore(t, Options{})
			ctx := testCtx(t)
			mustDomain(t, s, "d")
			for i := range zones {
				if _, err := s.CreateZone(ctx, fmt.Sprintf("z%02d", i)); err != nil {
					t.Fatal(err)
				}
			}
			const ns, pns = "d/fw", "d/fw--preview"
			policy := lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY
			commit(t, s, Commit{Namespace: ns, Create: true, Kind: policy, Content: snap(t, "r", "1"), Goals: GoalsAllZones})
			for i := range 3 {
				commit(t, s, Commit{Namespace: pns, Create: i == 0, ExpectedLatest: uint64(i), Content: snap(t, "e", fmt.Sprint(i)), Goals: GoalsAllZones})
			}
			if _, err := s.CreateExperiment(ctx, ns, "x", &lehrpb.PolicyExperiment{}, 5); err != nil {
				t.Fatal(err)
			}
			before, _, _ := s.DomainUsage(ctx, "d")
			del, err := s.DeleteNamespace(ctx, ns, DeleteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if del.Namespaces != 2 || del.Versions != 4 || del.StoredBytes != before || del.LastVersion != 1 {
				t.Errorf("DeleteNamespace = %+v; want 2 namespaces, 4 versions, %d bytes, last version 1", del, before)
			}
			if left := append(keysOf(t, s, ns), keysOf(t, s, pns)...); len(left) > 0 {
				t.Errorf("keys left: %q", left)
			}
			if after, nss, _ := s.DomainUsage(ctx, "d"); after != 0 || nss != 0 {
				t.Errorf("domain usage after deleting both: %d bytes, %d namespaces", after, nss)
			}
			if v := commit(t, s, Commit{Namespace: pns, Create: true, Content: snap(t, "e", "x")}); v.GetSeq() != 4 {
				t.Errorf("the preview namespace created again starts at %d, want 4", v.GetSeq())
			}
		})
	}
}

// DeleteDomain removes the domain and every namespace of it in one
// transaction; a namespace of it created again continues after the
// highest version any of them had.
func TestDeleteDomain(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	mustDomain(t, s, "other")
	if _, err := s.CreateZone(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		commit(t, s, Commit{Namespace: "d/x", Create: i == 0, ExpectedLatest: uint64(i), Content: snap(t, "k", fmt.Sprint(i)), Goals: GoalsAllZones})
	}
	commit(t, s, Commit{Namespace: "d/y", Create: true, Content: snap(t, "k", "y"), Goals: GoalsAllZones})
	for i := range 9 {
		commit(t, s, Commit{Namespace: "d/gone", Create: i == 0, ExpectedLatest: uint64(i), Content: snap(t, "k", fmt.Sprint(i))})
	}
	if _, err := s.DeleteNamespace(ctx, "d/gone", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	commit(t, s, Commit{Namespace: "other/z", Create: true, Content: snap(t, "k", "z"), Goals: GoalsAllZones})
	if _, err := s.PutRolloutPolicy(ctx, "d", &lehrpb.RolloutPolicyRecord{Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}}, 0); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("not empty")
	if _, err := s.DeleteDomain(ctx, "d", DeleteOptions{Check: func(st DeletionState) error {
		if st.Domain.GetName() != "d" || len(st.Namespaces) != 2 {
			t.Errorf("Check saw domain %q with %d namespaces; want d with 2", st.Domain.GetName(), len(st.Namespaces))
		}
		return refusal
	}}); !errors.Is(err, refusal) {
		t.Fatalf("DeleteDomain refused = %v", err)
	}
	if _, err := s.GetDomain(ctx, "d"); err != nil {
		t.Fatalf("the domain after a refused deletion: %v", err)
	}
	del, err := s.DeleteDomain(ctx, "d", DeleteOptions{RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if del.Namespaces != 2 || del.Versions != 8 || del.LastVersion != 9 {
		t.Errorf("DeleteDomain = %+v; want 2 namespaces, 8 versions, last version 9 (d/gone's)", del)
	}
	if left := keysOf(t, s, "d"); len(left) > 0 {
		t.Errorf("keys of domain d left: %q", left)
	}
	resp, err := s.cli.Get(ctx, s.lay.tombstonesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != s.lay.domainTombstone("d") {
		t.Errorf("tombstones after deleting the domain: %v (%v); want the domain's only", resp.Kvs, err)
	}
	if gs, _, err := s.Goals(ctx, "a", ""); err != nil || len(gs) != 1 || gs[0].GetNamespace() != "other/z" {
		t.Errorf("zone a's goals after deleting d: %v, %v; want other/z's only", gs, err)
	}
	if again, err := s.DeleteDomain(ctx, "d", DeleteOptions{RequestID: "r1"}); err != nil || !again.Repeated {
		t.Errorf("DeleteDomain retried = %+v, %v; want it repeated", again, err)
	}
	var nf *NotFoundError
	if _, err := s.DeleteDomain(ctx, "d", DeleteOptions{}); !errors.As(err, &nf) {
		t.Errorf("DeleteDomain of a deleted domain = %v, want NotFound", err)
	}
	if _, err := s.Commit(ctx, Commit{Namespace: "d/y", Create: true, Content: snap(t, "k", "y")}); !errors.As(err, &nf) || nf.What != "domain" {
		t.Errorf("publishing to a deleted domain = %v, want NotFound domain", err)
	}
	mustDomain(t, s, "d")
	if v := commit(t, s, Commit{Namespace: "d/y", Create: true, Content: snap(t, "k", "y")}); v.GetSeq() != 10 {
		t.Errorf("a namespace of the domain created again starts at %d, want 10", v.GetSeq())
	}
}

// A zone registered after a namespace was deleted gets no goal of it,
// even one a CreateZone that died midway left behind.
func TestCreateZoneDropsGoalsOfDeletedNamespaces(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "d")
	commit(t, s, Commit{Namespace: "d/gone", Create: true, Content: snap(t, "k", "1")})
	commit(t, s, Commit{Namespace: "d/kept", Create: true, Content: snap(t, "k", "1")})
	if _, err := s.DeleteNamespace(ctx, "d/gone", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// What an interrupted CreateZone of "late" left before the deletion.
	if _, err := s.cli.Put(ctx, s.lay.goal("late", "d/gone"), "left over"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateZone(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	gs, _, err := s.Goals(ctx, "late", "")
	if err != nil || len(gs) != 1 || gs[0].GetNamespace() != "d/kept" {
		t.Errorf("goals of the new zone: %v, %v; want d/kept's only", gs, err)
	}
}
