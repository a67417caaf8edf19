package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

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

func TestCompactUpdateRoundTrip(t *testing.T) {
	v1 := Version{Seq: 1, Content: mustSnap(prop("a", "1"), prop("big", strings.Repeat("x", 4096)))}
	v2 := Version{Seq: 2, Content: mustSnap(prop("a", "2"), prop("big", strings.Repeat("x", 4096)))}
	full := func(info *lehrpb.VersionInfo) *lehrpb.VersionInfo {
		return &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m",
			Parent: 1, SizeBytes: v2.Content.Size(), PropertyCount: int32(v2.Content.Len()), TransportIdentity: "127.0.0.1:1"}
	}
	tests := []struct {
		name     string
		from     *Version
		info     *lehrpb.VersionInfo
		wantInfo *lehrpb.VersionInfo // after compact + decode
	}{
		{"patch", &v1, full(nil), &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m", Parent: 1}},
		{"snapshot", nil, full(nil), &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m", Parent: 1}},
		{"no info", &v1, nil, nil},
		{"info with only derivable fields is dropped", &v1, &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, SizeBytes: 9}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to := v2
			to.Info = tt.info
			u, err := BuildUpdate("demo/a", lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, tt.from, to)
			if err != nil {
				t.Fatal(err)
			}
			before := proto.Clone(u)
			c, err := CompactUpdate(u)
			if err != nil {
				t.Fatalf("CompactUpdate: %v", err)
			}
			if diff := cmp.Diff(before, u, protocmp.Transform()); diff != "" {
				t.Errorf("CompactUpdate modified its argument (-before +after):\n%s", diff)
			}
			if c.GetChecksum() != "" || c.GetBaseChecksum() != "" {
				t.Errorf("compact form carries text checksums %q, %q; want digests only", c.GetChecksum(), c.GetBaseChecksum())
			}
			if c.GetSnapshot() != (tt.from == nil) {
				t.Errorf("compact snapshot = %v, want %v", c.GetSnapshot(), tt.from == nil)
			}
			var buf bytes.Buffer
			if err := WriteFrame(&buf, c); err != nil {
				t.Fatalf("WriteFrame(compact): %v", err)
			}
			msg, err := ReadFrame(&buf, 0)
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			got := msg.(*lehrpb.Update)
			if got.GetChecksum() != u.GetChecksum() || got.GetBaseChecksum() != u.GetBaseChecksum() {
				t.Errorf("decoded checksums = %q, %q; want %q, %q", got.GetChecksum(), got.GetBaseChecksum(), u.GetChecksum(), u.GetBaseChecksum())
			}
			if diff := cmp.Diff(tt.wantInfo, got.GetInfo(), protocmp.Transform()); diff != "" {
				t.Errorf("decoded info mismatch (-want +got):\n%s", diff)
			}
			var from content.Snapshot
			var fromSeq uint64
			var fromSum string
			if tt.from != nil {
				from, fromSeq, fromSum = tt.from.Content, tt.from.Seq, tt.from.Content.Checksum()
			}
			out, err := ApplyUpdate(from, fromSeq, fromSum, got)
			if err != nil {
				t.Fatalf("ApplyUpdate(decoded): %v", err)
			}
			if out.Checksum() != v2.Content.Checksum() {
				t.Errorf("applied checksum = %s, want %s", out.Checksum(), v2.Content.Checksum())
			}
		})
	}
}

// A compact patch against the wrong base, or whose result differs, is
// refused exactly like a full one.
func TestApplyCompactUpdateRefusals(t *testing.T) {
	v1 := Version{Seq: 1, Content: mustSnap(prop("a", "1"), prop("big", strings.Repeat("x", 4096)))}
	v2 := Version{Seq: 2, Content: mustSnap(prop("a", "2"), prop("big", strings.Repeat("x", 4096)))}
	u, err := BuildUpdate("demo/a", 0, &v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := CompactUpdate(u)
	if err != nil {
		t.Fatal(err)
	}
	other := mustSnap(prop("a", "1"), prop("big", strings.Repeat("y", 4096)))
	if _, err := ApplyUpdate(other, 1, other.Checksum(), c); !errors.Is(err, ErrBaseMismatch) {
		t.Errorf("ApplyUpdate(wrong base checksum) = %v, want ErrBaseMismatch", err)
	}
	if _, err := ApplyUpdate(other, 1, v1.Content.Checksum(), c); !errors.Is(err, ErrChecksumMismatch) {
		t.Errorf("ApplyUpdate(base content differs from its checksum) = %v, want ErrChecksumMismatch", err)
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
