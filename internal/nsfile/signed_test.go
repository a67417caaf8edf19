package nsfile

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
)

// Every header field a reader acts on or shows is covered by control's
// signature (docs/files.md, "Signatures"; issue 28, item 5): a file whose
// namespace, version, kind, checksum (content), author, message,
// create_time or rollback_of differ from what control signed fails
// signing.Verifier.Verify(file.Info(), file.Kind), and the header has no
// other field but the ones derived from the body (count, body_size) and
// the signature itself. A field added to the header must be signed, or
// listed here with why it need not be.
func TestEveryHeaderFieldIsSigned(t *testing.T) {
	signed := map[string]func(f *File){
		"namespace": func(f *File) { f.Namespace = "payments/other" },
		"version":   func(f *File) { f.Version++ },
		"kind":      func(f *File) { f.Kind = lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY },
		"checksum": func(f *File) {
			f.Content = mustSnap(t, content.Property{Key: "banner", Value: []byte("pwned")})
			f.Checksum = ""
		},
		"author":      func(f *File) { f.Author = "mallory" },
		"message":     func(f *File) { f.Message = "approved by security" },
		"create_time": func(f *File) { f.CreateTime = f.CreateTime.Add(time.Hour) },
		"rollback_of": func(f *File) { f.RollbackOf = 3 },
	}
	derived := map[string]string{
		"count":            "checked against the body",
		"body_size":        "checked against the body",
		"signature":        "the signature",
		"signature_key_id": "names the key",
	}
	ht := reflect.TypeFor[header]()
	for i := range ht.NumField() {
		name, _, _ := strings.Cut(ht.Field(i).Tag.Get("json"), ",")
		if _, ok := signed[name]; !ok && derived[name] == "" {
			t.Errorf("header field %q is neither signed (internal/signing.Payload) nor derived from the body", name)
		}
	}

	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v := signing.NewVerifier(pub)
	base := sample(t)
	base.RollbackOf = 2
	info := &lehrpb.VersionInfo{Namespace: base.Namespace, Seq: base.Version, Checksum: base.Content.Checksum(), Author: base.Author,
		Message: base.Message, CreateTime: timestamppb.New(base.CreateTime), RollbackOf: base.RollbackOf}
	signing.NewSigner(key).Sign(info, base.Kind)
	base.Signature, base.SignatureKeyID = info.GetSignature(), info.GetSignatureKeyId()

	read := func(f File) File {
		t.Helper()
		got, err := Decode(strings.NewReader(string(encodeBytes(t, f))))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	f := read(base)
	if pv, err := v.Verify(f.Info(), f.Kind); err != nil || pv != signing.PayloadV2 {
		t.Fatalf("the file as signed: payload %d, %v; want %d", pv, err, signing.PayloadV2)
	}
	for name, change := range signed {
		f := base
		change(&f)
		got := read(f)
		if _, err := v.Verify(got.Info(), got.Kind); !errors.Is(err, signing.ErrBadSignature) {
			t.Errorf("a file whose %s differs from what was signed: %v; want ErrBadSignature", name, err)
		}
	}
}
