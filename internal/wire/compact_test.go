package wire

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func digestOf(t *testing.T, sum string) []byte {
	t.Helper()
	d, err := parseChecksum("checksum", sum)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestValidateUpdateChecksumForms(t *testing.T) {
	base, next := mustSnap(prop("a", "1")), mustSnap(prop("a", "2"))
	baseSum, nextSum := base.Checksum(), next.Checksum()
	baseD, nextD := digestOf(t, baseSum), digestOf(t, nextSum)
	patch := func(mod func(*lehrpb.Update)) *lehrpb.Update {
		u := &lehrpb.Update{Namespace: "demo/a", BaseVersion: 1, Version: 2, Set: content.ToProto(next.Props())}
		mod(u)
		return u
	}
	tests := []struct {
		name    string
		u       *lehrpb.Update
		wantErr string // substring; empty means valid
	}{
		{"text", patch(func(u *lehrpb.Update) { u.Checksum, u.BaseChecksum = nextSum, baseSum }), ""},
		{"digests", patch(func(u *lehrpb.Update) { u.ChecksumDigest, u.BaseChecksumDigest = nextD, baseD }), ""},
		{"both agreeing", patch(func(u *lehrpb.Update) {
			u.Checksum, u.ChecksumDigest, u.BaseChecksum, u.BaseChecksumDigest = nextSum, nextD, baseSum, baseD
		}), ""},
		{"no checksum", patch(func(u *lehrpb.Update) { u.BaseChecksumDigest = baseD }), "field checksum: missing"},
		{"no base checksum", patch(func(u *lehrpb.Update) { u.ChecksumDigest = nextD }), "field base_checksum: missing"},
		{"short digest", patch(func(u *lehrpb.Update) { u.ChecksumDigest, u.BaseChecksumDigest = nextD[:31], baseD }), "field checksum_digest: 31 bytes, want 32"},
		{"long base digest", patch(func(u *lehrpb.Update) { u.ChecksumDigest, u.BaseChecksumDigest = nextD, append(baseD, 0) }), "field base_checksum_digest: 33 bytes"},
		{"text and digest disagree", patch(func(u *lehrpb.Update) { u.Checksum, u.ChecksumDigest, u.BaseChecksumDigest = nextSum, baseD, baseD }), "name different checksums"},
		{"snapshot with base digest", &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 2, ChecksumDigest: nextD, BaseChecksumDigest: baseD}, "must be unset in a snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateUpdate(tt.u)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateUpdate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateUpdate = %v, want ErrMalformed containing %q", err, tt.wantErr)
			}
			// The decoder refuses it too, and a sender cannot encode it.
			if _, err := AppendFrame(nil, tt.u, Limits{}); !errors.Is(err, ErrMalformed) {
				t.Errorf("AppendFrame = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	caps := Capabilities()
	if !HasCapability(caps, CapCompactUpdate) {
		t.Fatalf("Capabilities() = %v, want it to contain %q", caps, CapCompactUpdate)
	}
	caps[0] = "changed"
	if !HasCapability(Capabilities(), CapCompactUpdate) {
		t.Error("Capabilities() shares its slice with callers")
	}
	if got := CommonCapabilities(nil, Capabilities()); HasCapability(got, CapCompactUpdate) {
		t.Errorf("common capabilities with an agent offering none = %v, want none", got)
	}
}

// The signed goal travels in a compact Update unchanged: a changed byte
// would break its signature.
func TestCompactUpdateKeepsGoal(t *testing.T) {
	next := mustSnap(prop("a", "2"))
	g := &lehrpb.GoalState{Zone: "z", Namespace: "demo/a", Version: 2, Checksum: next.Checksum(), Signature: []byte("sig"), SignatureKeyId: "ed25519:00"}
	c, err := CompactUpdate(&lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 2, Checksum: next.Checksum(), Set: content.ToProto(next.Props()), Goal: g})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(c.GetGoal(), g) {
		t.Errorf("compact update's goal %v; want %v", c.GetGoal(), g)
	}
}
