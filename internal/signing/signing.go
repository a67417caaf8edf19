// Package signing is Lehr's end-to-end signature of versions: control
// signs what a version is — namespace, sequence number, content checksum,
// author, creation time, the namespace's kind, the message and what a
// rollback republishes: every field a host or consumer acts on or shows —
// with an ed25519 key only it holds, and agents (and consumers, in any
// language, from the namespace file's header) check it against the public
// keys they trust, so a distributor or anything else on the way cannot
// change any of them unnoticed (docs/files.md, "Signatures";
// docs/operations.md, "Security model").
//
// Goals are signed too (goal.go): which version each host of a zone should
// hold, so a distributor cannot deliver a signed version control did not
// decide for the host.
//
// A leaf. Imported by control/store and control (signing), distributor
// (carrying goal proofs), agent, agent/upstream and agent/agentcmd
// (verifying) and testenv/devcluster.
package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// PayloadVersion names a layout of the signed bytes. Each layout starts
// with its own prefix, so a signature of one never verifies as another.
type PayloadVersion int

const (
	// PayloadV1 is LegacyPayload: namespace, seq, checksum, author and
	// creation time. Controls signed it until issue 28; versions signed
	// so stay verifiable, but their kind, message and rollback_of are not
	// covered (see Covered).
	PayloadV1 PayloadVersion = 1
	// PayloadV2 is Payload, what control signs now: PayloadV1's fields and
	// kind, message and rollback_of.
	PayloadV2 PayloadVersion = 2
)

// PayloadPrefix starts the payload control signs (PayloadV2);
// LegacyPayloadPrefix the one it signed before (PayloadV1).
const (
	PayloadPrefix       = "lehr-version-v2\n"
	LegacyPayloadPrefix = "lehr-version-v1\n"
)

// Payload returns the bytes a version's signature covers (PayloadV2):
// PayloadPrefix, then namespace, seq (decimal), checksum, author, creation
// time (Unix nanoseconds, decimal), kind (KindName), message and
// rollback_of (decimal, 0 for a version that is not a rollback), each as a
// netstring ("<length>:<bytes>,"), so no value can be read as another.
// kind is the namespace's, which VersionInfo does not carry.
func Payload(info *lehrpb.VersionInfo, kind lehrpb.NamespaceKind) []byte {
	return netstrings(PayloadPrefix, info.GetNamespace(), strconv.FormatUint(info.GetSeq(), 10), info.GetChecksum(), info.GetAuthor(),
		strconv.FormatInt(info.GetCreateTime().AsTime().UnixNano(), 10),
		KindName(kind), info.GetMessage(), strconv.FormatUint(info.GetRollbackOf(), 10))
}

// LegacyPayload returns the bytes a PayloadV1 signature covers:
// LegacyPayloadPrefix, then namespace, seq, checksum, author and creation
// time as in Payload.
func LegacyPayload(info *lehrpb.VersionInfo) []byte {
	return netstrings(LegacyPayloadPrefix, info.GetNamespace(), strconv.FormatUint(info.GetSeq(), 10), info.GetChecksum(), info.GetAuthor(),
		strconv.FormatInt(info.GetCreateTime().AsTime().UnixNano(), 10))
}

func netstrings(prefix string, fields ...string) []byte {
	b := []byte(prefix)
	for _, f := range fields {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, ',')
	}
	return b
}

// KindName is how Payload writes a kind: "config", "policy" or
// "unspecified" — the words of the namespace file header's "kind" — and
// the decimal number of any other value.
func KindName(k lehrpb.NamespaceKind) string {
	switch k {
	case lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED:
		return "unspecified"
	case lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG:
		return "config"
	case lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY:
		return "policy"
	}
	return strconv.Itoa(int(k))
}

// Covered returns the fields of info a signature of payload version pv
// covers, and the signature: namespace, seq, checksum, author and creation
// time, and for PayloadV2 the message and rollback_of. Whatever else info
// carries (parent, source, sizes, the transport identity; for PayloadV1
// the message and rollback_of) no signature vouches for: an agent that
// verifies delivers Covered(info) only. (Kind is not in VersionInfo; only
// PayloadV2 covers it.)
func Covered(info *lehrpb.VersionInfo, pv PayloadVersion) *lehrpb.VersionInfo {
	out := &lehrpb.VersionInfo{
		Namespace: info.GetNamespace(), Seq: info.GetSeq(), Checksum: info.GetChecksum(), Author: info.GetAuthor(),
		Signature: info.GetSignature(), SignatureKeyId: info.GetSignatureKeyId(),
	}
	if ts := info.GetCreateTime(); ts != nil {
		out.CreateTime = proto.CloneOf(ts)
	}
	if pv >= PayloadV2 {
		out.Message, out.RollbackOf = info.GetMessage(), info.GetRollbackOf()
	}
	return out
}

// KeyID names a public key: "ed25519:" and the first 8 bytes of its
// SHA-256 in hex.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(h[:8])
}

// Signer signs versions with one private key. Safe for concurrent use.
type Signer struct {
	key ed25519.PrivateKey
	id  string
}

// NewSigner returns a signer of key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, id: KeyID(key.Public().(ed25519.PublicKey))}
}

// LoadOrCreate reads the private key at path (PEM, PKCS #8), creating a new
// one there (mode 0600, its directory 0700 if missing) when there is no
// file. created says it did.
func LoadOrCreate(path string) (s *Signer, created bool, err error) {
	s, err = Load(path)
	if !errors.Is(err, os.ErrNotExist) {
		return s, false, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("signing: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("signing: encode key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("signing: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("signing: create key: %w", err)
	}
	if err := errors.Join(pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("signing: write key %s: %w", path, err)
	}
	return NewSigner(key), true, nil
}

// Load reads the private key at path (PEM, PKCS #8, ed25519). A file
// others may read is refused: the key is what makes a version Lehr's.
func Load(path string) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("signing: key %s has mode %v; it must be readable by its owner only (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing: %s: want a PEM \"PRIVATE KEY\" block (PKCS #8)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing: %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing: %s: a %T key; want ed25519", path, k)
	}
	return NewSigner(key), nil
}

// KeyID returns the signer's key id.
func (s *Signer) KeyID() string { return s.id }

// Public returns the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign sets info's signature (of Payload(info, kind)) and key id.
func (s *Signer) Sign(info *lehrpb.VersionInfo, kind lehrpb.NamespaceKind) {
	info.Signature = ed25519.Sign(s.key, Payload(info, kind))
	info.SignatureKeyId = s.id
}

// EncodePublic returns keys as PEM "PUBLIC KEY" blocks (PKIX), the format
// of a trusted-keys file.
func EncodePublic(keys ...ed25519.PublicKey) ([]byte, error) {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("signing: encode public key: %w", err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out, nil
}

// Errors of Verify, wrapped with the details.
var (
	ErrUnsigned     = errors.New("signing: the version is not signed")
	ErrUnknownKey   = errors.New("signing: signed by a key that is not trusted")
	ErrBadSignature = errors.New("signing: the signature does not match the version")
)

// Verifier checks versions against a set of trusted public keys (several
// during a key rotation, or one per control replica). Safe for concurrent
// use; immutable.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier trusts keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: map[string]ed25519.PublicKey{}}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	return v
}

// LoadVerifier trusts the public keys of the file at path: PEM "PUBLIC
// KEY" blocks (PKIX, ed25519), at least one.
func LoadVerifier(path string) (*Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing: trusted keys: %w", err)
	}
	var keys []ed25519.PublicKey
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("signing: %s: block %d is %q; want \"PUBLIC KEY\"", path, n, blk.Type)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("signing: %s: block %d: %w", path, n, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("signing: %s: block %d is a %T key; want ed25519", path, n, k)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("signing: %s holds no PEM \"PUBLIC KEY\" block; copy control's signing.pub there", path)
	}
	return NewVerifier(keys...), nil
}

// KeyIDs returns the trusted keys' ids, sorted.
func (v *Verifier) KeyIDs() []string {
	ids := make([]string, 0, len(v.keys))
	for id := range v.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Verify checks info's signature as a version of a namespace of kind kind
// and returns the payload version it signs: PayloadV2 (Payload), or
// PayloadV1 (LegacyPayload) for a version a control signed before
// PayloadV2 — whose kind, message and rollback_of the signature does not
// cover (Covered). It fails with ErrUnsigned, ErrUnknownKey or
// ErrBadSignature (wrapped, naming the version and key).
func (v *Verifier) Verify(info *lehrpb.VersionInfo, kind lehrpb.NamespaceKind) (PayloadVersion, error) {
	what := fmt.Sprintf("%s@%d", info.GetNamespace(), info.GetSeq())
	if len(info.GetSignature()) == 0 {
		return 0, fmt.Errorf("%s: %w", what, ErrUnsigned)
	}
	k, ok := v.keys[info.GetSignatureKeyId()]
	if !ok {
		return 0, fmt.Errorf("%s: %w: %q (trusted: %v)", what, ErrUnknownKey, info.GetSignatureKeyId(), v.KeyIDs())
	}
	switch {
	case ed25519.Verify(k, Payload(info, kind), info.GetSignature()):
		return PayloadV2, nil
	case ed25519.Verify(k, LegacyPayload(info), info.GetSignature()):
		return PayloadV1, nil
	}
	return 0, fmt.Errorf("%s (key %s): %w: its namespace, version, checksum, author, time, kind, message or rollback_of was changed after control signed it",
		what, info.GetSignatureKeyId(), ErrBadSignature)
}
