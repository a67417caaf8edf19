package update

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestCompactUpdateRoundTrip(t *testing.T) {
	v1 := &content.Version{Namespace: "demo/a", Seq: 1, Content: mustSnap(prop("a", "1"), prop("big", strings.Repeat("x", 4096)))}
	v2 := &content.Version{Namespace: "demo/a", Seq: 2, Content: mustSnap(prop("a", "2"), prop("big", strings.Repeat("x", 4096)))}
	full := func(info *lehrpb.VersionInfo) *lehrpb.VersionInfo {
		return &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m",
			Parent: 1, SizeBytes: v2.Content.Size(), PropertyCount: int32(v2.Content.Len()), TransportIdentity: "127.0.0.1:1"}
	}
	tests := []struct {
		name     string
		from     *content.Version
		info     *lehrpb.VersionInfo
		wantInfo *lehrpb.VersionInfo // after compact + decode
	}{
		{"patch", v1, full(nil), &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m", Parent: 1}},
		{"snapshot", nil, full(nil), &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, Checksum: v2.Content.Checksum(), Author: "bob", Message: "m", Parent: 1}},
		{"no info", v1, nil, nil},
		{"info with only derivable fields is dropped", v1, &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 2, SizeBytes: 9}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to := *v2
			to.Kind, to.Info = lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, tt.info
			u, err := Build(tt.from, &to)
			if err != nil {
				t.Fatal(err)
			}
			before := proto.Clone(u)
			c, err := wire.CompactUpdate(u)
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
			if err := wire.WriteFrame(&buf, c); err != nil {
				t.Fatalf("wire.WriteFrame(compact): %v", err)
			}
			msg, err := wire.ReadFrame(&buf, 0)
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
			var held content.Ref
			if tt.from != nil {
				from, held = tt.from.Content, content.Ref{Seq: tt.from.Seq, Checksum: tt.from.Content.Checksum()}
			}
			if err := Check(held, got); err != nil {
				t.Fatalf("Check(decoded): %v", err)
			}
			out, err := Apply(from, got)
			if err != nil {
				t.Fatalf("Apply(decoded): %v", err)
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
	v1 := &content.Version{Namespace: "demo/a", Seq: 1, Content: mustSnap(prop("a", "1"), prop("big", strings.Repeat("x", 4096)))}
	v2 := &content.Version{Namespace: "demo/a", Seq: 2, Content: mustSnap(prop("a", "2"), prop("big", strings.Repeat("x", 4096)))}
	u, err := Build(v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := wire.CompactUpdate(u)
	if err != nil {
		t.Fatal(err)
	}
	other := mustSnap(prop("a", "1"), prop("big", strings.Repeat("y", 4096)))
	if err := Check(content.Ref{Seq: 1, Checksum: other.Checksum()}, c); !errors.Is(err, ErrBaseMismatch) {
		t.Errorf("Check(wrong base checksum) = %v, want ErrBaseMismatch", err)
	}
	if _, err := Apply(other, c); !errors.Is(err, ErrChecksumMismatch) {
		t.Errorf("Apply(base content differs from its checksum) = %v, want ErrChecksumMismatch", err)
	}
}
