package signing_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
)

const config = lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG

func version() *lehrpb.VersionInfo {
	return &lehrpb.VersionInfo{Namespace: "pay/limits", Seq: 7, Checksum: "sha256:" + strings.Repeat("ab", 32), Author: "alice",
		CreateTime: timestamppb.New(time.Unix(1_800_000_000, 123)), Message: "raise the limit", RollbackOf: 3,
		Parent: 6, Source: lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, SizeBytes: 10, PropertyCount: 1, TransportIdentity: "127.0.0.1:5"}
}

// A signed version verifies; every signed field changed after signing —
// the namespace's kind, the message and rollback_of too (issue 28, item 5)
// — an unknown (or revoked) key and a missing signature are refused, each
// with its own error.
func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	s, created, err := signing.LoadOrCreate(filepath.Join(dir, "keys", "signing.key"))
	if err != nil || !created {
		t.Fatalf("LoadOrCreate: %v, created %v", err, created)
	}
	v := signing.NewVerifier(s.Public())
	info := version()
	s.Sign(info, config)
	if pv, err := v.Verify(info, config); err != nil || pv != signing.PayloadV2 {
		t.Fatalf("a signed version: payload %d, %v; want %d", pv, err, signing.PayloadV2)
	}
	for _, tc := range []struct {
		name   string
		change func(*lehrpb.VersionInfo)
		kind   lehrpb.NamespaceKind
		want   error
	}{
		{"namespace", func(i *lehrpb.VersionInfo) { i.Namespace = "pay/other" }, config, signing.ErrBadSignature},
		{"seq", func(i *lehrpb.VersionInfo) { i.Seq++ }, config, signing.ErrBadSignature},
		{"checksum", func(i *lehrpb.VersionInfo) { i.Checksum = "sha256:" + strings.Repeat("cd", 32) }, config, signing.ErrBadSignature},
		{"author", func(i *lehrpb.VersionInfo) { i.Author = "mallory" }, config, signing.ErrBadSignature},
		{"time", func(i *lehrpb.VersionInfo) { i.CreateTime = timestamppb.New(time.Unix(1_800_000_001, 0)) }, config, signing.ErrBadSignature},
		{"kind", func(*lehrpb.VersionInfo) {}, lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, signing.ErrBadSignature},
		{"message", func(i *lehrpb.VersionInfo) { i.Message = "nothing to see" }, config, signing.ErrBadSignature},
		{"rollback_of", func(i *lehrpb.VersionInfo) { i.RollbackOf = 0 }, config, signing.ErrBadSignature},
		{"signature", func(i *lehrpb.VersionInfo) { i.Signature[0] ^= 1 }, config, signing.ErrBadSignature},
		{"unsigned", func(i *lehrpb.VersionInfo) { i.Signature, i.SignatureKeyId = nil, "" }, config, signing.ErrUnsigned},
		{"unknown key", func(i *lehrpb.VersionInfo) { i.SignatureKeyId = "ed25519:0000000000000000" }, config, signing.ErrUnknownKey},
		// Not signed, and not delivered by agents that verify (Covered).
		{"parent", func(i *lehrpb.VersionInfo) { i.Parent = 1 }, config, nil},
		{"source", func(i *lehrpb.VersionInfo) { i.Source = lehrpb.VersionSource_VERSION_SOURCE_PATCH }, config, nil},
		{"sizes", func(i *lehrpb.VersionInfo) { i.SizeBytes, i.PropertyCount = 99, 9 }, config, nil},
		{"transport identity", func(i *lehrpb.VersionInfo) { i.TransportIdentity = "mallory" }, config, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := proto.CloneOf(info)
			tc.change(i)
			if _, err := v.Verify(i, tc.kind); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("Verify after changing the %s: %v; want %v", tc.name, err, tc.want)
			}
		})
	}

	// Rotation: agents trust the old and the new key for a while; a key
	// taken out of the trusted file (revoked) is refused.
	_, newKey, _ := ed25519.GenerateKey(rand.Reader)
	next := signing.NewSigner(newKey)
	both, err := signing.EncodePublic(s.Public(), next.Public())
	if err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(dir, "trusted.pub")
	if err := os.WriteFile(trust, both, 0o644); err != nil {
		t.Fatal(err)
	}
	rotating, err := signing.LoadVerifier(trust)
	if err != nil {
		t.Fatal(err)
	}
	fresh := version()
	next.Sign(fresh, config)
	_, errOld := rotating.Verify(info, config)
	_, errNew := rotating.Verify(fresh, config)
	if errOld != nil || errNew != nil {
		t.Errorf("during a rotation both keys' versions must verify: %v, %v", errOld, errNew)
	}
	only, _ := signing.EncodePublic(next.Public())
	if err := os.WriteFile(trust, only, 0o644); err != nil {
		t.Fatal(err)
	}
	revoked, err := signing.LoadVerifier(trust)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := revoked.Verify(info, config); !errors.Is(err, signing.ErrUnknownKey) || !strings.Contains(err.Error(), s.KeyID()) {
		t.Errorf("a version signed by the revoked key: %v; want ErrUnknownKey naming %s", err, s.KeyID())
	}

	// The key survives a restart and is private.
	again, created, err := signing.LoadOrCreate(filepath.Join(dir, "keys", "signing.key"))
	if err != nil || created || again.KeyID() != s.KeyID() {
		t.Errorf("LoadOrCreate again: %v, created %v, key %s; want the same key %s", err, created, again.KeyID(), s.KeyID())
	}
	for path, want := range map[string]os.FileMode{filepath.Join(dir, "keys"): 0o700, filepath.Join(dir, "keys", "signing.key"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v); want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "keys", "signing.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := signing.Load(filepath.Join(dir, "keys", "signing.key")); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key others may read: %v; want it refused", err)
	}
}

// The payloads are fixed, documented layouts (docs/files.md): consumers in
// other languages rebuild them byte for byte.
func TestPayloadLayout(t *testing.T) {
	info := &lehrpb.VersionInfo{Namespace: "pay/limits", Seq: 7, Checksum: "sha256:ab", Author: "alice",
		CreateTime: timestamppb.New(time.Unix(1_800_000_000, 123)), Message: "raise it", RollbackOf: 0}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"v2", signing.Payload(info, lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY),
			"lehr-version-v2\n10:pay/limits,1:7,9:sha256:ab,5:alice,19:1800000000000000123,6:policy,8:raise it,1:0,"},
		{"v1", signing.LegacyPayload(info),
			"lehr-version-v1\n10:pay/limits,1:7,9:sha256:ab,5:alice,19:1800000000000000123,"},
	} {
		if string(tc.got) != tc.want {
			t.Errorf("payload %s %q; want %q", tc.name, tc.got, tc.want)
		}
	}
}

// Versions a control signed before payload v2 (the legacy payload, which
// covers neither kind, message nor rollback_of) stay verifiable: Verify
// says which payload a signature covers, and Covered keeps only what it
// covers, so an agent that verifies delivers nothing unsigned — a changed
// message or rollback_of of a legacy version never reaches a file.
func TestLegacyPayload(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	v := signing.NewVerifier(key.Public().(ed25519.PublicKey))
	info := version()
	info.Signature, info.SignatureKeyId = ed25519.Sign(key, signing.LegacyPayload(info)), signing.KeyID(key.Public().(ed25519.PublicKey))
	info.Message, info.RollbackOf = "changed on the way", 1 // not covered: still verifies
	pv, err := v.Verify(info, lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY)
	if err != nil || pv != signing.PayloadV1 {
		t.Fatalf("a legacy signature: payload %d, %v; want %d", pv, err, signing.PayloadV1)
	}
	got := signing.Covered(info, pv)
	want := &lehrpb.VersionInfo{Namespace: info.Namespace, Seq: info.Seq, Checksum: info.Checksum, Author: info.Author, CreateTime: info.CreateTime,
		Signature: info.Signature, SignatureKeyId: info.SignatureKeyId}
	if !proto.Equal(got, want) {
		t.Errorf("Covered(legacy) = %v; want %v", got, want)
	}
	bad := proto.CloneOf(info)
	bad.Author = "mallory"
	if _, err := v.Verify(bad, config); !errors.Is(err, signing.ErrBadSignature) {
		t.Errorf("a legacy version with another author: %v; want ErrBadSignature", err)
	}

	s := signing.NewSigner(key)
	cur := version()
	s.Sign(cur, config)
	want = proto.CloneOf(cur)
	want.Parent, want.Source, want.SizeBytes, want.PropertyCount, want.TransportIdentity = 0, 0, 0, 0, ""
	if got := signing.Covered(cur, signing.PayloadV2); !proto.Equal(got, want) {
		t.Errorf("Covered(v2) = %v; want %v", got, want)
	}
}

func TestLoadVerifierRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty":   "",
		"private": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := signing.LoadVerifier(p); err == nil {
			t.Errorf("%s trusted-keys file accepted", name)
		}
	}
}

// What signing costs: control signs once per version, every agent verifies
// once per update (bench/RESULTS.md, "Signing").
func BenchmarkSign(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	s := signing.NewSigner(key)
	info := version()
	for b.Loop() {
		s.Sign(info, config)
	}
}

func BenchmarkVerify(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	s := signing.NewSigner(key)
	v := signing.NewVerifier(s.Public())
	info := version()
	s.Sign(info, config)
	for b.Loop() {
		if _, err := v.Verify(info, config); err != nil {
			b.Fatal(err)
		}
	}
}
