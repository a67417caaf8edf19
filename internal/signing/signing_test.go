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

func version() *lehrpb.VersionInfo {
	return &lehrpb.VersionInfo{Namespace: "pay/limits", Seq: 7, Checksum: "sha256:" + strings.Repeat("ab", 32), Author: "alice",
		CreateTime: timestamppb.New(time.Unix(1_800_000_000, 123)), Message: "not signed: free text"}
}

// A signed version verifies; every signed field changed after signing, an
// unknown (or revoked) key and a missing signature are refused, each with
// its own error.
func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	s, created, err := signing.LoadOrCreate(filepath.Join(dir, "keys", "signing.key"))
	if err != nil || !created {
		t.Fatalf("LoadOrCreate: %v, created %v", err, created)
	}
	v := signing.NewVerifier(s.Public())
	info := version()
	s.Sign(info)
	if err := v.Verify(info); err != nil {
		t.Fatalf("a signed version: %v", err)
	}
	info.Message = "messages are not signed"
	if err := v.Verify(info); err != nil {
		t.Errorf("the message changed: %v; only what the version is is signed", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*lehrpb.VersionInfo)
		want   error
	}{
		{"namespace", func(i *lehrpb.VersionInfo) { i.Namespace = "pay/other" }, signing.ErrBadSignature},
		{"seq", func(i *lehrpb.VersionInfo) { i.Seq++ }, signing.ErrBadSignature},
		{"checksum", func(i *lehrpb.VersionInfo) { i.Checksum = "sha256:" + strings.Repeat("cd", 32) }, signing.ErrBadSignature},
		{"author", func(i *lehrpb.VersionInfo) { i.Author = "mallory" }, signing.ErrBadSignature},
		{"time", func(i *lehrpb.VersionInfo) { i.CreateTime = timestamppb.New(time.Unix(1_800_000_001, 0)) }, signing.ErrBadSignature},
		{"signature", func(i *lehrpb.VersionInfo) { i.Signature[0] ^= 1 }, signing.ErrBadSignature},
		{"unsigned", func(i *lehrpb.VersionInfo) { i.Signature, i.SignatureKeyId = nil, "" }, signing.ErrUnsigned},
		{"unknown key", func(i *lehrpb.VersionInfo) { i.SignatureKeyId = "ed25519:0000000000000000" }, signing.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := proto.CloneOf(info)
			tc.change(i)
			if err := v.Verify(i); !errors.Is(err, tc.want) {
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
	next.Sign(fresh)
	if rotating.Verify(info) != nil || rotating.Verify(fresh) != nil {
		t.Errorf("during a rotation both keys' versions must verify: %v, %v", rotating.Verify(info), rotating.Verify(fresh))
	}
	only, _ := signing.EncodePublic(next.Public())
	if err := os.WriteFile(trust, only, 0o644); err != nil {
		t.Fatal(err)
	}
	revoked, err := signing.LoadVerifier(trust)
	if err != nil {
		t.Fatal(err)
	}
	if err := revoked.Verify(info); !errors.Is(err, signing.ErrUnknownKey) || !strings.Contains(err.Error(), s.KeyID()) {
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

// The payload is a fixed, documented layout (docs/files.md): consumers in
// other languages rebuild it byte for byte.
func TestPayloadLayout(t *testing.T) {
	got := string(signing.Payload("pay/limits", 7, "sha256:ab", "alice", time.Unix(1_800_000_000, 123)))
	want := "lehr-version-v1\n10:pay/limits,1:7,9:sha256:ab,5:alice,19:1800000000000000123,"
	if got != want {
		t.Errorf("payload %q; want %q", got, want)
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
		s.Sign(info)
	}
}

func BenchmarkVerify(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	s := signing.NewSigner(key)
	v := signing.NewVerifier(s.Public())
	info := version()
	s.Sign(info)
	for b.Loop() {
		if err := v.Verify(info); err != nil {
			b.Fatal(err)
		}
	}
}
