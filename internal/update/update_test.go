package update

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func prop(k, v string) content.Property { return content.Property{Key: k, Value: []byte(v)} }

func mustSnap(props ...content.Property) content.Snapshot {
	s, err := content.New(props)
	if err != nil {
		panic(err)
	}
	return s
}

var (
	sumEmpty = content.Snapshot{}.Checksum()
	sumA     = mustSnap(prop("a", "1")).Checksum()
	sumB     = mustSnap(prop("b", "2")).Checksum()
)

func ref(seq uint64, sum string) content.Ref { return content.Ref{Seq: seq, Checksum: sum} }

func TestCheck(t *testing.T) {
	snap := func(v uint64, sum string) *lehrpb.Update {
		return &lehrpb.Update{Namespace: "d/n", Snapshot: true, Version: v, Checksum: sum}
	}
	patch := func(base uint64, baseSum string, v uint64, sum string) *lehrpb.Update {
		return &lehrpb.Update{Namespace: "d/n", BaseVersion: base, BaseChecksum: baseSum, Version: v, Checksum: sum}
	}
	tests := []struct {
		name string
		held content.Ref
		u    *lehrpb.Update
		want error // nil: apply
	}{
		{"snapshot over nothing", content.Ref{}, snap(1, sumA), nil},
		{"newer snapshot", ref(3, sumA), snap(4, sumB), nil},
		{"snapshot of the held version, same checksum", ref(4, sumA), snap(4, sumA), ErrStale},
		{"snapshot of the held version, other checksum: a repair", ref(4, sumA), snap(4, sumB), nil},
		{"older snapshot", ref(5, sumA), snap(4, sumB), ErrStale},
		{"patch on the held version", ref(3, sumA), patch(3, sumA, 4, sumB), nil},
		{"patch to the held version", ref(4, sumB), patch(3, sumA, 4, sumB), ErrStale},
		{"patch to the held version, other checksum", ref(4, sumA), patch(3, sumA, 4, sumB), ErrBaseMismatch},
		{"patch to an older version", ref(5, sumA), patch(3, sumA, 4, sumB), ErrStale},
		{"patch whose base has not arrived", ref(2, sumA), patch(3, sumA, 4, sumB), ErrGap},
		{"patch over nothing", content.Ref{}, patch(3, sumA, 4, sumB), ErrGap},
		{"patch on an older base", ref(3, sumA), patch(2, sumA, 4, sumB), ErrBaseMismatch},
		{"patch on the held version, other checksum", ref(3, sumB), patch(3, sumA, 4, sumB), ErrBaseMismatch},
	}
	for _, tc := range tests {
		err := Check(tc.held, tc.u)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Check(%v, %v) = %v, want %v", tc.name, tc.held, tc.u, err, tc.want)
		}
	}
}

func TestApply(t *testing.T) {
	base := mustSnap(prop("a", "1"), prop("b", "2"))
	baseSum := base.Checksum()
	next := mustSnap(prop("a", "1"), prop("b", "20"), prop("c", "3"))
	nextSum := next.Checksum()

	patch := func(mod func(*lehrpb.Update)) *lehrpb.Update {
		u := &lehrpb.Update{
			Namespace: "demo/a", BaseVersion: 4, BaseChecksum: baseSum, Version: 5, Checksum: nextSum,
			Set: content.ToProto([]content.Property{prop("b", "20"), prop("c", "3")}),
		}
		if mod != nil {
			mod(u)
		}
		return u
	}
	snapshot := &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 7, Checksum: nextSum, Set: content.ToProto(next.Props())}
	tests := []struct {
		name    string
		u       *lehrpb.Update
		want    content.Snapshot
		wantErr error
	}{
		{name: "patch", u: patch(nil), want: next},
		{name: "snapshot", u: snapshot, want: next},
		{name: "empty snapshot", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: sumEmpty}, want: content.Snapshot{}},
		{name: "patch deleting", u: &lehrpb.Update{Namespace: "demo/a", BaseVersion: 4, BaseChecksum: baseSum, Version: 5,
			Checksum: mustSnap(prop("b", "2")).Checksum(), Delete: []string{"a"}}, want: mustSnap(prop("b", "2"))},
		{name: "checksum mismatch after patch", u: patch(func(u *lehrpb.Update) { u.Checksum = sumA }), wantErr: ErrChecksumMismatch},
		{name: "checksum mismatch after snapshot", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: sumA}, wantErr: ErrChecksumMismatch},
		{name: "deleting a missing key", u: patch(func(u *lehrpb.Update) { u.Delete = []string{"zz"} }), wantErr: ErrPatchConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.u)
			got, err := Apply(base, tc.u)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Apply err = %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if !got.Equal(tc.want) {
					t.Errorf("Apply = %v, want %v", got.Keys(), tc.want.Keys())
				}
				if got.Checksum() != tc.u.GetChecksum() {
					t.Errorf("result checksum %s, update says %s", got.Checksum(), tc.u.GetChecksum())
				}
			}
			if !proto.Equal(before, tc.u) {
				t.Errorf("Apply modified the update")
			}
			if base.Checksum() != baseSum {
				t.Errorf("Apply modified the base")
			}
		})
	}
}

func TestResyncReason(t *testing.T) {
	base := mustSnap(prop("a", "1"))
	errBase := Check(ref(1, sumA), &lehrpb.Update{Namespace: "d/n", BaseVersion: 0, Version: 3, Checksum: sumA})
	errGap := Check(ref(1, sumA), &lehrpb.Update{Namespace: "d/n", BaseVersion: 2, BaseChecksum: sumA, Version: 3, Checksum: sumA})
	_, errSum := Apply(base, &lehrpb.Update{Namespace: "d/n", Snapshot: true, Version: 3, Checksum: sumA + "x"})
	_, errConflict := Apply(base, &lehrpb.Update{Namespace: "d/n", BaseVersion: 1, BaseChecksum: sumA, Version: 3, Checksum: sumA, Delete: []string{"x"}})
	errStale := Check(ref(3, sumA), &lehrpb.Update{Namespace: "d/n", Snapshot: true, Version: 3, Checksum: sumA})
	tests := []struct {
		err  error
		want lehrpb.ResyncReason
	}{
		{errBase, lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH},
		{errGap, lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH},
		{errSum, lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH},
		{errConflict, lehrpb.ResyncReason_RESYNC_REASON_PATCH_CONFLICT},
		{errStale, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED},
		{nil, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED},
	}
	for _, tc := range tests {
		if tc.err == nil && tc.want != lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED {
			t.Fatalf("test setup: no error for %v", tc.want)
		}
		if got := ResyncReason(tc.err); got != tc.want {
			t.Errorf("ResyncReason(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBuild(t *testing.T) {
	kind := lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG
	v1 := &content.Version{Namespace: "demo/a", Seq: 1, Kind: kind,
		Content: mustSnap(prop("a", "1"), prop("b", "2"), prop("big", string(bytes.Repeat([]byte("x"), 4096))))}
	v2 := &content.Version{Namespace: "demo/a", Seq: 2, Kind: kind,
		Content: mustSnap(prop("a", "10"), prop("big", string(bytes.Repeat([]byte("x"), 4096))), prop("c", "3")),
		Info:    &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Author: "bob"}}

	t.Run("patch", func(t *testing.T) {
		u, err := Build(v1, v2)
		if err != nil {
			t.Fatal(err)
		}
		want := &lehrpb.Update{Namespace: "demo/a", Kind: kind, BaseVersion: 1, BaseChecksum: v1.Content.Checksum(), Version: 2,
			Checksum: v2.Content.Checksum(), Info: v2.Info,
			Set: content.ToProto([]content.Property{prop("a", "10"), prop("c", "3")}), Delete: []string{"b"}}
		if diff := cmp.Diff(want, u, protocmp.Transform()); diff != "" {
			t.Errorf("Build mismatch (-want +got):\n%s", diff)
		}
		if err := Check(ref(1, v1.Content.Checksum()), u); err != nil {
			t.Errorf("Check(the built patch on v1) = %v", err)
		}
		got, err := Apply(v1.Content, u)
		if err != nil || !got.Equal(v2.Content) {
			t.Errorf("applying the built patch: %v, %v; want v2", got.Keys(), err)
		}
		if proto.Size(u) >= 200 {
			t.Errorf("patch is %d bytes; it should not carry the unchanged 4 KiB value", proto.Size(u))
		}
	})
	t.Run("snapshot when base unknown", func(t *testing.T) {
		u, err := Build(nil, v2)
		if err != nil {
			t.Fatal(err)
		}
		if !u.GetSnapshot() || u.GetBaseVersion() != 0 || len(u.GetSet()) != 3 {
			t.Errorf("got snapshot=%v base=%d set=%d, want a 3-key snapshot", u.GetSnapshot(), u.GetBaseVersion(), len(u.GetSet()))
		}
		got, err := Apply(content.Snapshot{}, u)
		if err != nil || !got.Equal(v2.Content) {
			t.Errorf("applying the built snapshot: %v, %v", got.Keys(), err)
		}
	})
	t.Run("snapshot when everything changed", func(t *testing.T) {
		v3 := &content.Version{Namespace: "demo/a", Seq: 3, Kind: kind, Content: mustSnap(prop("z", "9"))}
		u, err := Build(v2, v3)
		if err != nil {
			t.Fatal(err)
		}
		if !u.GetSnapshot() {
			t.Errorf("got a patch (set %d, delete %d); a snapshot is smaller", len(u.GetSet()), len(u.GetDelete()))
		}
	})
	t.Run("cached checksum is used", func(t *testing.T) {
		v := *v2
		v.Checksum = sumA // deliberately wrong: Build trusts the cache
		u, err := Build(nil, &v)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetChecksum() != sumA {
			t.Errorf("checksum = %s, want the cached %s", u.GetChecksum(), sumA)
		}
		if _, err := Apply(content.Snapshot{}, u); !errors.Is(err, ErrChecksumMismatch) {
			t.Errorf("the agent must catch a wrong checksum: err = %v", err)
		}
	})
	bad := *v1
	bad.Namespace = "Not A Namespace"
	for _, tc := range []struct {
		name     string
		from, to *content.Version
	}{
		{"backwards", v2, v1},
		{"same version", v1, v1},
		{"from version 0", &content.Version{Namespace: "demo/a"}, v2},
		{"to version 0", nil, &content.Version{Namespace: "demo/a"}},
		{"no target", nil, nil},
		{"invalid namespace", nil, &bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Build(tc.from, tc.to); err == nil {
				t.Errorf("Build succeeded, want an error")
			}
		})
	}
}

func TestPlan(t *testing.T) {
	goal := ref(5, "G")
	tests := []struct {
		name      string
		have      content.Ref
		baseKnown bool
		want      Action
	}{
		{"at goal", goal, true, SendNothing},
		{"at goal, corrupt", ref(5, "X"), true, SendSnapshot},
		{"behind, known", ref(3, "B"), true, SendPatch},
		{"behind, unknown", ref(3, "B"), false, SendSnapshot},
		{"nothing cached", content.Ref{}, false, SendSnapshot},
		{"nothing cached, claims known", content.Ref{}, true, SendSnapshot},
		{"ahead of a lagging distributor", ref(7, "Z"), false, SendNothing},
	}
	for _, tc := range tests {
		if got := Plan(tc.have, goal, tc.baseKnown); got != tc.want {
			t.Errorf("%s: Plan(%#v, %#v, %v) = %v, want %v", tc.name, tc.have, goal, tc.baseKnown, got, tc.want)
		}
	}
	if got := Plan(content.Ref{}, content.Ref{}, false); got != SendNothing {
		t.Errorf("Plan with no goal = %v, want nothing", got)
	}
}

// A repair snapshot the distributor plans (same version, other checksum)
// is one the holder's Check accepts: the two sides agree, so the repair
// cannot loop.
func TestPlannedRepairIsAccepted(t *testing.T) {
	if a := Plan(ref(4, sumA), ref(4, sumB), true); a != SendSnapshot {
		t.Fatalf("Plan = %v, want a snapshot", a)
	}
	if err := Check(ref(4, sumA), &lehrpb.Update{Namespace: "d/n", Snapshot: true, Version: 4, Checksum: sumB}); err != nil {
		t.Fatalf("Check(repair snapshot) = %v, want it applied", err)
	}
}
