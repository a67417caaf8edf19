package store

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
)

// Control signs every version with the current payload, which covers the
// namespace's kind, the message and rollback_of (issue 28, item 5), and
// serves every version signed so: a record signed with the legacy payload
// — or not at all, by a control with signing off — is signed with this
// control's key as Content serves it (FetchVersion, FetchDelta and the
// goal watch's deltas read through it), while the record itself stays as
// it was written.
func TestVersionsAreServedSignedWithTheCurrentPayload(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v := signing.NewVerifier(pub)
	const policy = lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY
	prefix := testPrefix(t)
	ctx := testCtx(t)

	// Written by a control that signed nothing, and one that signed the
	// legacy payload.
	old := newTestStore(t, Options{Prefix: prefix})
	mustDomain(t, old, "d")
	unsigned := commit(t, old, Commit{Namespace: "d/unsigned", Create: true, Kind: policy, Content: snap(t, "k", "1"),
		Info: &lehrpb.VersionInfo{Author: "alice", Message: "first"}})
	legacy := commit(t, old, Commit{Namespace: "d/legacy", Create: true, Kind: policy, Content: snap(t, "k", "1"),
		Info: &lehrpb.VersionInfo{Author: "alice", Message: "first"}})
	rec, err := old.record(ctx, "d/legacy", legacy.GetSeq(), 0)
	if err != nil || rec == nil {
		t.Fatalf("record: %v, %v", rec, err)
	}
	rec.Info.Signature, rec.Info.SignatureKeyId = ed25519.Sign(key, signing.LegacyPayload(rec.Info)), signing.KeyID(pub)
	b, err := encode(&lehrpb.VersionRecord{Info: rec.Info, ManifestChunks: rec.ManifestChunks, RequestId: rec.RequestId})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.cli.Put(ctx, old.lay.version("d/legacy", legacy.GetSeq()), string(b)); err != nil {
		t.Fatal(err)
	}
	if pv, err := v.Verify(rec.Info, policy); err != nil || pv != signing.PayloadV1 {
		t.Fatalf("the legacy record: payload %d, %v", pv, err)
	}

	s := newTestStore(t, Options{Prefix: prefix, Signer: signing.NewSigner(key)})
	fresh := commit(t, s, Commit{Namespace: "d/fresh", Create: true, Kind: policy, Content: snap(t, "k", "1"),
		Info: &lehrpb.VersionInfo{Author: "alice", Message: "first", RollbackOf: 0}})
	if pv, err := v.Verify(fresh, policy); err != nil || pv != signing.PayloadV2 {
		t.Errorf("a new version: payload %d, %v; want %d", pv, err, signing.PayloadV2)
	}
	for _, ns := range []string{"d/unsigned", "d/legacy", "d/fresh"} {
		for range 2 { // read from etcd, then from the content cache
			info, _, err := s.Content(ctx, ns, 1)
			if err != nil {
				t.Fatal(err)
			}
			if pv, err := v.Verify(info, policy); err != nil || pv != signing.PayloadV2 {
				t.Errorf("%s as served: payload %d, %v; want %d", ns, pv, err, signing.PayloadV2)
			}
			if info.GetMessage() != "first" {
				t.Errorf("%s as served: message %q", ns, info.GetMessage())
			}
			if _, err := v.Verify(info, lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG); err == nil {
				t.Errorf("%s as served verifies as a config namespace's version: the kind is not signed", ns)
			}
		}
		cached, _, ok := s.CachedContent(ctx, ns, content.Ref{Seq: 1, Checksum: fresh.GetChecksum()})
		if pv, err := v.Verify(cached, policy); !ok || err != nil || pv != signing.PayloadV2 {
			t.Errorf("%s from the content cache: ok %v, payload %d, %v", ns, ok, pv, err)
		}
	}
	// The records are not rewritten.
	stored, err := s.Version(ctx, "d/unsigned", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(stored, unsigned) {
		t.Errorf("the unsigned record changed: %v, was %v", stored, unsigned)
	}
}
