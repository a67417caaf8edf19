package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func prop(k, v string) content.Property { return content.Property{Key: k, Value: []byte(v)} }

func TestApplyUpdate(t *testing.T) {
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
		name        string
		baseVersion uint64
		baseSum     string
		u           *lehrpb.Update
		want        content.Snapshot
		wantErr     error
	}{
		{name: "patch on the right base", baseVersion: 4, baseSum: baseSum, u: patch(nil), want: next},
		{name: "snapshot over anything", baseVersion: 99, baseSum: sumA, u: snapshot, want: next},
		{name: "snapshot over nothing", u: snapshot, want: next},
		{name: "empty snapshot", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: sumEmpty}, want: content.Snapshot{}},
		{name: "patch deleting", baseVersion: 4, baseSum: baseSum, u: &lehrpb.Update{Namespace: "demo/a", BaseVersion: 4, BaseChecksum: baseSum, Version: 5,
			Checksum: mustSnap(prop("b", "2")).Checksum(), Delete: []string{"a"}}, want: mustSnap(prop("b", "2"))},
		{name: "wrong base version", baseVersion: 3, baseSum: baseSum, u: patch(nil), wantErr: ErrBaseMismatch},
		{name: "wrong base checksum", baseVersion: 4, baseSum: sumA, u: patch(nil), wantErr: ErrBaseMismatch},
		{name: "patch on nothing", u: patch(nil), wantErr: ErrBaseMismatch},
		{name: "checksum mismatch after patch", baseVersion: 4, baseSum: baseSum, u: patch(func(u *lehrpb.Update) { u.Checksum = sumA }), wantErr: ErrChecksumMismatch},
		{name: "checksum mismatch after snapshot", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: sumA}, wantErr: ErrChecksumMismatch},
		{name: "deleting a missing key", baseVersion: 4, baseSum: baseSum, u: patch(func(u *lehrpb.Update) { u.Delete = []string{"zz"} }), wantErr: ErrPatchConflict},
		{name: "missing namespace", u: &lehrpb.Update{Snapshot: true, Version: 1, Checksum: sumEmpty}, wantErr: ErrMalformed},
		{name: "version 0", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Checksum: sumEmpty}, wantErr: ErrMalformed},
		{name: "patch base not below version", baseVersion: 5, baseSum: baseSum, u: patch(func(u *lehrpb.Update) { u.BaseVersion = 5 }), wantErr: ErrMalformed},
		{name: "snapshot with a base", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 2, BaseVersion: 1, Checksum: sumEmpty}, wantErr: ErrMalformed},
		{name: "snapshot with deletes", u: &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 2, Checksum: sumEmpty, Delete: []string{"a"}}, wantErr: ErrMalformed},
		{name: "duplicate set key", baseVersion: 4, baseSum: baseSum, u: patch(func(u *lehrpb.Update) { u.Set = append(u.Set, u.Set[0]) }), wantErr: ErrMalformed},
		{name: "key set and deleted", baseVersion: 4, baseSum: baseSum, u: patch(func(u *lehrpb.Update) { u.Delete = []string{"b"} }), wantErr: ErrMalformed},
		{name: "nil update", u: nil, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.u)
			got, err := ApplyUpdate(base, tc.baseVersion, tc.baseSum, tc.u)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ApplyUpdate err = %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("ApplyUpdate: %v", err)
				}
				if !got.Equal(tc.want) {
					t.Errorf("ApplyUpdate = %v, want %v", got.Keys(), tc.want.Keys())
				}
				if got.Checksum() != tc.u.GetChecksum() {
					t.Errorf("result checksum %s, update says %s", got.Checksum(), tc.u.GetChecksum())
				}
			}
			if !proto.Equal(before, tc.u) {
				t.Errorf("ApplyUpdate modified the update")
			}
			if base.Checksum() != baseSum {
				t.Errorf("ApplyUpdate modified the base")
			}
		})
	}
}

func TestResyncReasonFor(t *testing.T) {
	base := mustSnap(prop("a", "1"))
	_, errBase := ApplyUpdate(base, 1, sumA, &lehrpb.Update{Namespace: "d/n", BaseVersion: 2, BaseChecksum: sumA, Version: 3, Checksum: sumA})
	_, errSum := ApplyUpdate(base, 1, sumA, &lehrpb.Update{Namespace: "d/n", Snapshot: true, Version: 3, Checksum: sumA})
	_, errConflict := ApplyUpdate(base, 1, sumA, &lehrpb.Update{Namespace: "d/n", BaseVersion: 1, BaseChecksum: sumA, Version: 3, Checksum: sumA, Delete: []string{"x"}})
	tests := []struct {
		err  error
		want lehrpb.ResyncReason
	}{
		{errBase, lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH},
		{errSum, lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH},
		{errConflict, lehrpb.ResyncReason_RESYNC_REASON_PATCH_CONFLICT},
		{&FrameError{Code: ErrMalformed}, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED},
		{nil, lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED},
	}
	for _, tc := range tests {
		if got := ResyncReasonFor(tc.err); got != tc.want {
			t.Errorf("ResyncReasonFor(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBuildUpdate(t *testing.T) {
	v1 := Version{Seq: 1, Content: mustSnap(prop("a", "1"), prop("b", "2"), prop("big", string(bytes.Repeat([]byte("x"), 4096))))}
	v2 := Version{Seq: 2, Content: mustSnap(prop("a", "10"), prop("big", string(bytes.Repeat([]byte("x"), 4096))), prop("c", "3")),
		Info: &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Author: "bob"}}
	kind := lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG

	t.Run("patch", func(t *testing.T) {
		u, err := BuildUpdate("demo/a", kind, &v1, v2)
		if err != nil {
			t.Fatal(err)
		}
		want := &lehrpb.Update{Namespace: "demo/a", Kind: kind, BaseVersion: 1, BaseChecksum: v1.Content.Checksum(), Version: 2,
			Checksum: v2.Content.Checksum(), Info: v2.Info,
			Set: content.ToProto([]content.Property{prop("a", "10"), prop("c", "3")}), Delete: []string{"b"}}
		if diff := cmp.Diff(want, u, protocmp.Transform()); diff != "" {
			t.Errorf("BuildUpdate mismatch (-want +got):\n%s", diff)
		}
		got, err := ApplyUpdate(v1.Content, 1, v1.Content.Checksum(), u)
		if err != nil || !got.Equal(v2.Content) {
			t.Errorf("applying the built patch: %v, %v; want v2", got.Keys(), err)
		}
		if proto.Size(u) >= 200 {
			t.Errorf("patch is %d bytes; it should not carry the unchanged 4 KiB value", proto.Size(u))
		}
	})
	t.Run("snapshot when base unknown", func(t *testing.T) {
		u, err := BuildUpdate("demo/a", kind, nil, v2)
		if err != nil {
			t.Fatal(err)
		}
		if !u.GetSnapshot() || u.GetBaseVersion() != 0 || len(u.GetSet()) != 3 {
			t.Errorf("got snapshot=%v base=%d set=%d, want a 3-key snapshot", u.GetSnapshot(), u.GetBaseVersion(), len(u.GetSet()))
		}
		got, err := ApplyUpdate(content.Snapshot{}, 0, "", u)
		if err != nil || !got.Equal(v2.Content) {
			t.Errorf("applying the built snapshot: %v, %v", got.Keys(), err)
		}
	})
	t.Run("snapshot when everything changed", func(t *testing.T) {
		v3 := Version{Seq: 3, Content: mustSnap(prop("z", "9"))}
		u, err := BuildUpdate("demo/a", kind, &v2, v3)
		if err != nil {
			t.Fatal(err)
		}
		if !u.GetSnapshot() {
			t.Errorf("got a patch (set %d, delete %d); a snapshot is smaller", len(u.GetSet()), len(u.GetDelete()))
		}
	})
	t.Run("cached checksum is used", func(t *testing.T) {
		v := v2
		v.Checksum = sumA // deliberately wrong: BuildUpdate trusts the cache
		u, err := BuildUpdate("demo/a", kind, nil, v)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetChecksum() != sumA {
			t.Errorf("checksum = %s, want the cached %s", u.GetChecksum(), sumA)
		}
		if _, err := ApplyUpdate(content.Snapshot{}, 0, "", u); !errors.Is(err, ErrChecksumMismatch) {
			t.Errorf("the agent must catch a wrong checksum: err = %v", err)
		}
	})
	for _, tc := range []struct {
		name string
		from *Version
		to   Version
	}{
		{"backwards", &v2, v1},
		{"same version", &v1, v1},
		{"from version 0", &Version{}, v2},
		{"to version 0", nil, Version{}},
		{"invalid namespace", nil, v1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "demo/a"
			if tc.name == "invalid namespace" {
				ns = "Not A Namespace"
			}
			if _, err := BuildUpdate(ns, kind, tc.from, tc.to); err == nil {
				t.Errorf("BuildUpdate succeeded, want an error")
			}
		})
	}
}

func TestPlan(t *testing.T) {
	const goal, goalSum, other = 5, "G", "X"
	tests := []struct {
		name      string
		have      uint64
		haveSum   string
		baseKnown bool
		want      Action
	}{
		{"at goal", goal, goalSum, true, SendNothing},
		{"at goal, corrupt", goal, other, true, SendSnapshot},
		{"behind, known", 3, "B", true, SendPatch},
		{"behind, unknown", 3, "B", false, SendSnapshot},
		{"nothing cached", 0, "", false, SendSnapshot},
		{"nothing cached, claims known", 0, "", true, SendSnapshot},
		{"ahead of a lagging distributor", 7, "Z", false, SendNothing},
	}
	for _, tc := range tests {
		if got := Plan(tc.have, tc.haveSum, goal, goalSum, tc.baseKnown); got != tc.want {
			t.Errorf("%s: Plan(%d, %q, %d, %q, %v) = %v, want %v", tc.name, tc.have, tc.haveSum, goal, goalSum, tc.baseKnown, got, tc.want)
		}
	}
	if got := Plan(0, "", 0, "", false); got != SendNothing {
		t.Errorf("Plan with no goal = %v, want nothing", got)
	}
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		name     string
		ours     VersionRange
		min, max uint32
		want     uint32
		wantErr  bool
	}{
		{"v1 agent, v1 distributor", Supported(), 1, 1, 1, false},
		{"v1 agent without min", Supported(), 0, 1, 1, false},
		{"v2 agent speaking 1-2, v1 distributor", Supported(), 1, 2, 1, false},
		{"v2-only agent, v1 distributor", Supported(), 2, 2, 0, true},
		{"v2 agent without min, v1 distributor", Supported(), 0, 2, 0, true},
		{"v1 agent, distributor 1-2", VersionRange{1, 2}, 1, 1, 1, false},
		{"v3 agent 1-3, distributor 1-2", VersionRange{1, 2}, 1, 3, 2, false},
		{"v1 agent, distributor 2-3", VersionRange{2, 3}, 1, 1, 0, true},
		{"version 0", Supported(), 0, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.ours.Negotiate(&lehrpb.Hello{MinProtocolVersion: tc.min, ProtocolVersion: tc.max})
			if tc.wantErr {
				if !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("Negotiate = %d, %v; want ErrUnsupportedVersion", got, err)
				}
				if CodeFor(err) != CodeUnsupportedVersion {
					t.Errorf("CodeFor = %v, want CodeUnsupportedVersion", CodeFor(err))
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Negotiate = %d, %v; want %d", got, err, tc.want)
			}
			agent := VersionRange{Min: max(tc.min, 1), Max: tc.max}
			if err := agent.Accept(&lehrpb.Welcome{ProtocolVersion: got}); err != nil {
				t.Errorf("agent refuses the negotiated version: %v", err)
			}
		})
	}
	if got, err := Negotiate(&lehrpb.Hello{ProtocolVersion: ProtocolVersion}); err != nil || got != ProtocolVersion {
		t.Errorf("Negotiate(current) = %d, %v", got, err)
	}
	if err := (VersionRange{1, 1}).Accept(&lehrpb.Welcome{ProtocolVersion: 2}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("agent 1-1 accepted version 2: %v", err)
	}
}

func TestCommonCapabilities(t *testing.T) {
	got := CommonCapabilities([]string{"zstd", "x", "", "zstd", "batch"}, []string{"batch", "zstd", "y"})
	if diff := cmp.Diff([]string{"batch", "zstd"}, got); diff != "" {
		t.Errorf("CommonCapabilities mismatch (-want +got):\n%s", diff)
	}
	if got := CommonCapabilities(nil, []string{"a"}); len(got) != 0 {
		t.Errorf("CommonCapabilities(nil) = %v, want none", got)
	}
}

// TestNewerPeerFieldsIgnored: a v1 reader accepts a message carrying fields
// it does not know (a newer peer's additions) and keeps them when
// re-encoding.
func TestNewerPeerFieldsIgnored(t *testing.T) {
	payload := mustMarshal(&lehrpb.Ack{Namespace: "demo/a", Version: 2, Checksum: sumA, Ok: true})
	payload = protowire.AppendTag(payload, 99, protowire.BytesType)
	payload = protowire.AppendString(payload, "from the future")
	got, err := ReadFrame(bytes.NewReader(frame(FrameAck, payload)), 0)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if got.(*lehrpb.Ack).GetVersion() != 2 {
		t.Errorf("known fields lost: %v", got)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("from the future")) {
		t.Errorf("unknown field dropped on re-encode")
	}
}
