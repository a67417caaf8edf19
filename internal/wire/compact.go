package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// CapCompactUpdate is the capability under which a distributor sends
// Updates in compact form (docs/wire.md, "Compact updates"): checksums as
// raw 32-byte digests (checksum_digest, base_checksum_digest) instead of
// their 71-byte text, and an info without what the Update already carries
// or the agent does not need. A receiver built with this package accepts
// both forms; the capability only protects older receivers, which require
// the text checksums.
const CapCompactUpdate = "compact-update"

// CapSignals is the capability under which a distributor may ask an agent
// for its per-interval signals (SignalsRequest) and the agent answers
// (Signals): frame types an older peer does not know.
const CapSignals = "signals"

// CapSignedGoals is the capability under which a distributor sends with
// every Update the signed goal that names its version for the agent's
// host (Update.goal). An agent offers it when it verifies signatures: it
// then refuses updates without a goal, and a distributor that does not
// speak it.
const CapSignedGoals = "signed-goals"

// CapRedialSpread is the capability under which a distributor updates the
// redial spread its Welcome gave (Advice): a frame type an older agent
// does not know. The Welcome's own redial_spread needs no capability.
const CapRedialSpread = "redial-spread"

// Capabilities returns the optional features this package implements: what
// a distributor supports when it answers with [CommonCapabilities], and
// what an agent offers in Hello.capabilities (without CapSignedGoals when
// it does not verify). The result is a new slice.
func Capabilities() []string {
	return []string{CapCompactUpdate, CapSignals, CapSignedGoals, CapRedialSpread}
}

// HasCapability reports whether the capability list caps (normally
// Welcome.capabilities, the negotiated set) contains c.
func HasCapability(caps []string, c string) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}

// CompactUpdate returns u in compact form, for a connection on which
// [CapCompactUpdate] was negotiated: the checksums travel as raw digests
// and info keeps only author, message, create_time, parent, source,
// rollback_of (and any field this package does not know). Namespace, seq
// and checksum are the Update's own and are filled back in by the
// receiver's [ExpandUpdate]; size_bytes and property_count follow from the
// content; transport_identity is an audit detail kept by control. u must
// be valid (as [BuildUpdate] returns it) and is not modified; the result
// shares the properties with it.
func CompactUpdate(u *lehrpb.Update) (*lehrpb.Update, error) {
	sum, err := parseChecksum("checksum", UpdateChecksum(u))
	if err != nil {
		return nil, fmt.Errorf("wire: compact update %s@%d: %w", u.GetNamespace(), u.GetVersion(), err)
	}
	c := &lehrpb.Update{
		Namespace:      u.GetNamespace(),
		Kind:           u.GetKind(),
		Snapshot:       u.GetSnapshot(),
		BaseVersion:    u.GetBaseVersion(),
		Version:        u.GetVersion(),
		ChecksumDigest: sum,
		Set:            u.GetSet(),
		Delete:         u.GetDelete(),
		Goal:           u.GetGoal(), // signed as it is
	}
	if !u.GetSnapshot() {
		if c.BaseChecksumDigest, err = parseChecksum("base_checksum", UpdateBaseChecksum(u)); err != nil {
			return nil, fmt.Errorf("wire: compact update %s@%d: %w", u.GetNamespace(), u.GetVersion(), err)
		}
	}
	if info := u.GetInfo(); info != nil {
		ci := proto.Clone(info).(*lehrpb.VersionInfo)
		ci.Namespace, ci.Seq, ci.Checksum = "", 0, ""
		ci.SizeBytes, ci.PropertyCount, ci.TransportIdentity = 0, 0, ""
		if proto.Size(ci) > 0 {
			c.Info = ci
		}
	}
	return c, nil
}

// ExpandUpdate turns a valid Update in compact form back into the full
// form, in place: checksum and base_checksum get the text of their digests
// (the digest fields stay), and info's namespace, seq and checksum, when
// empty, get the Update's. An Update that carries its text checksum is in
// full form and is left as it is (but for a base checksum sent only as a
// digest, which gets its text). [Decoder] and [ReadFrame] call it on every Update they return, so
// receivers see one form whatever the sender chose. It fails only for an
// Update [ValidateUpdate] refuses.
func ExpandUpdate(u *lehrpb.Update) error {
	if err := ValidateUpdate(u); err != nil {
		return err
	}
	if u.Checksum != "" {
		// Full form (the text is required without the compact
		// capability); nothing is missing.
		if u.BaseChecksum == "" && len(u.GetBaseChecksumDigest()) != 0 {
			u.BaseChecksum = digestText(u.GetBaseChecksumDigest())
		}
		return nil
	}
	u.Checksum = digestText(u.GetChecksumDigest())
	if u.BaseChecksum == "" && len(u.GetBaseChecksumDigest()) != 0 {
		u.BaseChecksum = digestText(u.GetBaseChecksumDigest())
	}
	if info := u.GetInfo(); info != nil {
		if info.Namespace == "" {
			info.Namespace = u.GetNamespace()
		}
		if info.Seq == 0 {
			info.Seq = u.GetVersion()
		}
		if info.Checksum == "" {
			info.Checksum = u.Checksum
		}
	}
	return nil
}

// UpdateChecksum returns the text form ("sha256:" and 64 hex digits) of the
// checksum of u's result, from whichever field carries it; empty if
// neither does.
func UpdateChecksum(u *lehrpb.Update) string {
	return checksumOf(u.GetChecksum(), u.GetChecksumDigest())
}

// UpdateBaseChecksum returns the text form of a patch's base checksum, from
// whichever field carries it; empty for a snapshot.
func UpdateBaseChecksum(u *lehrpb.Update) string {
	return checksumOf(u.GetBaseChecksum(), u.GetBaseChecksumDigest())
}

func checksumOf(text string, digest []byte) string {
	if text != "" || len(digest) == 0 {
		return text
	}
	return digestText(digest)
}

func digestText(d []byte) string {
	if len(d) != sha256.Size {
		return "" // refused by validation; never a valid checksum
	}
	return ChecksumPrefix + hex.EncodeToString(d)
}

// parseChecksum returns the digest of a text checksum.
func parseChecksum(field, s string) ([]byte, error) {
	if err := validateChecksum(field, s); err != nil {
		return nil, err
	}
	return hex.DecodeString(s[len(ChecksumPrefix):])
}

// validateChecksumPair checks a checksum that may travel as text, as a raw
// digest or both: at least one must be present, each well formed, and two
// must agree. required false allows both to be absent.
func validateChecksumPair(field string, text string, digest []byte, required bool) error {
	if text == "" && len(digest) == 0 {
		if !required {
			return nil
		}
		return fmt.Errorf("field %s: missing; want %q and 64 lowercase hex digits (or %s_digest, 32 bytes)", field, ChecksumPrefix, field)
	}
	if len(digest) != 0 && len(digest) != sha256.Size {
		return fmt.Errorf("field %s_digest: %d bytes, want %d (a SHA-256 digest)", field, len(digest), sha256.Size)
	}
	if text == "" {
		return nil
	}
	if err := validateChecksum(field, text); err != nil {
		return err
	}
	if len(digest) != 0 && digestText(digest) != text {
		return fmt.Errorf("fields %s, %s_digest: name different checksums (%s, %s)", field, field, shortSum(text), shortSum(digestText(digest)))
	}
	return nil
}

// shortSum abbreviates a checksum for error messages.
func shortSum(s string) string {
	if s == "" {
		return "no checksum"
	}
	if len(s) > len(ChecksumPrefix)+12 {
		return s[:len(ChecksumPrefix)+12] + "…"
	}
	return s
}
