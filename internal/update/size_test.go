package update

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// oneKeyChange returns a namespace of 64 keys at version 41 and version 42
// in which only "hot" (a 1 KiB value) changed, with the version metadata
// control records: the shape of the benchmark's one-key change.
func oneKeyChange(t *testing.T) (from, to *content.Version, changed int) {
	t.Helper()
	var props []content.Property
	for i := range 64 {
		props = append(props, content.Property{Key: fmt.Sprintf("filler/%02d", i), Value: []byte(strings.Repeat("f", 8<<10))})
	}
	hot := func(c byte) content.Property {
		return content.Property{Key: "hot", Value: []byte(strings.Repeat(string(c), 1024))}
	}
	base := mustSnap(append(props, hot('a'))...)
	next := mustSnap(append(props, hot('b'))...)
	info := &lehrpb.VersionInfo{
		Namespace: "bench/wire-1mib", Seq: 42, Checksum: next.Checksum(),
		Author: "bench", Message: "one-key change 17",
		CreateTime: timestamppb.New(time.Date(2026, 11, 21, 10, 12, 39, 123456789, time.UTC)),
		Parent:     41, Source: lehrpb.VersionSource_VERSION_SOURCE_PATCH,
		SizeBytes: next.Size(), PropertyCount: int32(next.Len()),
		TransportIdentity: "127.0.0.1:54321",
	}
	kind := lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG
	return &content.Version{Namespace: info.Namespace, Seq: 41, Kind: kind, Content: base},
		&content.Version{Namespace: info.Namespace, Seq: 42, Kind: kind, Content: next, Info: info}, len("hot") + 1024
}

// fieldSizes returns the encoded size of each populated field of m,
// including its tag and length prefix, with info's fields nested.
func fieldSizes(m proto.Message) []string {
	var out []string
	r := m.ProtoReflect()
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		one := r.New()
		one.Set(fd, v)
		n := proto.Size(one.Interface())
		out = append(out, fmt.Sprintf("%-14s %5d B", fd.Name(), n))
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			for _, s := range fieldSizes(v.Message().Interface()) {
				out = append(out, "  "+s)
			}
		}
		return true
	})
	return out
}

// TestUpdateSizeBreakdown logs where the bytes of a one-key patch go, in
// the full (v1) form and the compact form. It asserts nothing; run it with
// -v to see the breakdown.
func TestUpdateSizeBreakdown(t *testing.T) {
	from, to, changed := oneKeyChange(t)
	full, err := Build(from, to)
	if err != nil {
		t.Fatal(err)
	}
	compact, err := wire.CompactUpdate(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		u    *lehrpb.Update
	}{{"full form", full}, {"compact form", compact}} {
		f, err := wire.AppendFrame(nil, c.u, wire.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: frame %d B for %d changed bytes (header %d B, payload %d B)\n%s",
			c.name, len(f), changed, len(f)-proto.Size(c.u), proto.Size(c.u), strings.Join(fieldSizes(c.u), "\n"))
	}
}

// TestOneKeyPatchBudget: a one-key change with a 1 KiB value costs at most
// 1.1 × the changed bytes + 128 B as a whole frame (header included) in
// compact form, and the frame decodes to the full form, bit for bit what
// Build made except for the info fields the compact form leaves to
// the agent.
func TestOneKeyPatchBudget(t *testing.T) {
	from, to, changed := oneKeyChange(t)
	full, err := Build(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if full.GetSnapshot() {
		t.Fatal("Build made a snapshot, want a patch")
	}
	compact, err := wire.CompactUpdate(full)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := wire.AppendFrame(nil, compact, wire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	budget := 1.1*float64(changed) + 128
	if float64(len(frame)) > budget {
		t.Errorf("one-key patch frame = %d B, want <= 1.1 × %d + 128 = %.1f B", len(frame), changed, budget)
	}

	msg, err := wire.ReadFrame(bytes.NewReader(frame), 0)
	if err != nil {
		t.Fatalf("wire.ReadFrame(compact frame): %v", err)
	}
	got := msg.(*lehrpb.Update)
	want := proto.Clone(full).(*lehrpb.Update)
	want.ChecksumDigest, want.BaseChecksumDigest = compact.GetChecksumDigest(), compact.GetBaseChecksumDigest()
	want.Info.SizeBytes, want.Info.PropertyCount, want.Info.TransportIdentity = 0, 0, ""
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("decoded compact Update mismatch (-want +got):\n%s", diff)
	}
	for name, u := range map[string]*lehrpb.Update{"decoded compact Update": got, "compact Update as built": compact} {
		if err := Check(content.Ref{Seq: from.Seq, Checksum: from.Content.Checksum()}, u); err != nil {
			t.Errorf("Check(%s) = %v, want nil", name, err)
		}
		if _, err := Apply(from.Content, u); err != nil {
			t.Errorf("Apply(%s) = %v, want nil", name, err)
		}
	}
}
