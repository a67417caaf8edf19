package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func prop(k, v string) content.Property { return content.Property{Key: k, Value: []byte(v)} }

// Malformed Updates are protocol violations, refused by validation (and
// so by every Decoder) before any agent logic sees them.
func TestValidateUpdateRefusesMalformed(t *testing.T) {
	base := mustSnap(prop("a", "1"), prop("b", "2"))
	baseSum := base.Checksum()
	patch := func(mod func(*lehrpb.Update)) *lehrpb.Update {
		u := &lehrpb.Update{
			Namespace: "demo/a", BaseVersion: 4, BaseChecksum: baseSum, Version: 5, Checksum: sumA,
			Set: content.ToProto([]content.Property{prop("b", "20"), prop("c", "3")}),
		}
		if mod != nil {
			mod(u)
		}
		return u
	}
	if err := ValidateUpdate(patch(nil)); err != nil {
		t.Fatalf("ValidateUpdate(a good patch) = %v", err)
	}
	for name, u := range map[string]*lehrpb.Update{
		"missing namespace":            {Snapshot: true, Version: 1, Checksum: sumEmpty},
		"version 0":                    {Namespace: "demo/a", Snapshot: true, Checksum: sumEmpty},
		"patch base not below version": patch(func(u *lehrpb.Update) { u.BaseVersion = 5 }),
		"snapshot with a base":         {Namespace: "demo/a", Snapshot: true, Version: 2, BaseVersion: 1, Checksum: sumEmpty},
		"snapshot with deletes":        {Namespace: "demo/a", Snapshot: true, Version: 2, Checksum: sumEmpty, Delete: []string{"a"}},
		"duplicate set key":            patch(func(u *lehrpb.Update) { u.Set = append(u.Set, u.Set[0]) }),
		"key set and deleted":          patch(func(u *lehrpb.Update) { u.Delete = []string{"b"} }),
		"nil update":                   nil,
	} {
		if err := ValidateUpdate(u); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ValidateUpdate = %v, want ErrMalformed", name, err)
		}
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
