package wire

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// Validate checks the fields protocol version 1 requires of a wire message
// and returns a [*FrameError] with code ErrMalformed naming the first bad
// field, or nil. Every frame is validated when encoded and when decoded, so
// a handler never sees, and a sender never sends, a message missing what
// the protocol requires. Only v1 rules are checked: unknown fields are
// allowed (a newer peer may send them).
//
// Property keys are checked to be present and unique, not against the key
// grammar (package names): control validated them at publish time and the
// agent validates them again before they reach a file.
func Validate(msg proto.Message) error {
	t, ok := TypeOf(msg)
	if !ok {
		return &FrameError{Code: ErrUnknownType, Reason: fmt.Sprintf("%T is not a wire message", msg)}
	}
	if !msg.ProtoReflect().IsValid() {
		return frameErr(ErrMalformed, t, "nil message")
	}
	var err error
	switch m := msg.(type) {
	case *lehrpb.Hello:
		err = validateHello(m)
	case *lehrpb.Welcome:
		err = validateWelcome(m)
	case *lehrpb.Subscribe:
		err = validateSubscribe(m)
	case *lehrpb.Unsubscribe:
		err = validateNamespaceList("namespaces", m.GetNamespaces(), true)
	case *lehrpb.Update:
		return ValidateUpdate(m)
	case *lehrpb.Ack:
		err = validateAck(m)
	case *lehrpb.Resync:
		err = validateResync(m)
	case *lehrpb.Report:
		for i, r := range m.GetNamespaces() {
			if e := validateNamespace(fmt.Sprintf("namespaces[%d].namespace", i), r.GetNamespace()); e != nil {
				err = e
				break
			}
			if e := services.Validate(fmt.Sprintf("namespaces[%d].services", i), r.GetServices(), r.GetClients()); e != nil {
				err = e
				break
			}
		}
	case *lehrpb.Unavailable:
		err = validateNamespace("namespace", m.GetNamespace())
	case *lehrpb.Advice:
		err = validateRedialSpread(m.GetRedialSpread())
	case *lehrpb.SignalsRequest:
		err = validateSignalsRequest(m)
	case *lehrpb.Signals:
		err = validateSignals(m)
	case *lehrpb.Goodbye, *lehrpb.Ping, *lehrpb.Pong:
		// Nothing is required.
	}
	if err != nil {
		return &FrameError{Code: ErrMalformed, Type: t, Reason: err.Error()}
	}
	return nil
}

// ValidateUpdate checks an Update: a valid namespace; version >= 1; a
// well-formed checksum; for a snapshot, no base and no deletes; for a patch,
// a base version below version with a well-formed base checksum; every set
// key present and each key at most once across set and delete. A checksum
// may travel as text, as a raw digest (the compact form, see
// [CapCompactUpdate]) or both, in which case they must agree.
func ValidateUpdate(u *lehrpb.Update) error {
	if err := validateUpdate(u); err != nil {
		return &FrameError{Code: ErrMalformed, Type: FrameUpdate, Reason: err.Error()}
	}
	return nil
}

func validateUpdate(u *lehrpb.Update) error {
	if u == nil {
		return fmt.Errorf("nil message")
	}
	if err := validateNamespace("namespace", u.GetNamespace()); err != nil {
		return err
	}
	if u.GetVersion() == 0 {
		return fmt.Errorf("field version: must be at least 1")
	}
	if err := validateChecksumPair("checksum", u.GetChecksum(), u.GetChecksumDigest(), true); err != nil {
		return err
	}
	if u.GetSnapshot() {
		if u.GetBaseVersion() != 0 || u.GetBaseChecksum() != "" || len(u.GetBaseChecksumDigest()) != 0 {
			return fmt.Errorf("fields base_version, base_checksum, base_checksum_digest: must be unset in a snapshot (got %d, %s, %d bytes)",
				u.GetBaseVersion(), quote(u.GetBaseChecksum()), len(u.GetBaseChecksumDigest()))
		}
		if len(u.GetDelete()) != 0 {
			return fmt.Errorf("field delete: must be empty in a snapshot (got %d keys)", len(u.GetDelete()))
		}
	} else {
		if u.GetBaseVersion() == 0 || u.GetBaseVersion() >= u.GetVersion() {
			return fmt.Errorf("field base_version: a patch needs 1 <= base_version < version (%d), got %d", u.GetVersion(), u.GetBaseVersion())
		}
		if err := validateChecksumPair("base_checksum", u.GetBaseChecksum(), u.GetBaseChecksumDigest(), true); err != nil {
			return err
		}
	}
	seen := make(map[string]struct{}, len(u.GetSet())+len(u.GetDelete()))
	for i, p := range u.GetSet() {
		if p.GetKey() == "" {
			return fmt.Errorf("field set[%d].key: empty", i)
		}
		if _, dup := seen[p.GetKey()]; dup {
			return fmt.Errorf("field set[%d].key: %s appears more than once", i, quote(p.GetKey()))
		}
		seen[p.GetKey()] = struct{}{}
	}
	for i, k := range u.GetDelete() {
		if k == "" {
			return fmt.Errorf("field delete[%d]: empty key", i)
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("field delete[%d]: %s appears more than once across set and delete", i, quote(k))
		}
		seen[k] = struct{}{}
	}
	return nil
}

func validateHello(h *lehrpb.Hello) error {
	if h.GetProtocolVersion() == 0 {
		return fmt.Errorf("field protocol_version: must be at least 1")
	}
	if h.GetMinProtocolVersion() > h.GetProtocolVersion() {
		return fmt.Errorf("field min_protocol_version: %d is above protocol_version %d", h.GetMinProtocolVersion(), h.GetProtocolVersion())
	}
	if h.GetHostId() == "" {
		return fmt.Errorf("field host_id: empty")
	}
	if len(h.GetHostId()) > 255 {
		return fmt.Errorf("field host_id: %d bytes, at most 255 allowed", len(h.GetHostId()))
	}
	if err := names.Zone(h.GetZone()); err != nil {
		return fmt.Errorf("field zone: %w", err)
	}
	for k := range h.GetLabels() {
		if k == "" {
			return fmt.Errorf("field labels: empty key")
		}
	}
	if err := validateCached("cached", h.GetCached()); err != nil {
		return err
	}
	return validateNamespaceList("subscriptions", h.GetSubscriptions(), false)
}

func validateWelcome(w *lehrpb.Welcome) error {
	if w.GetProtocolVersion() == 0 {
		return fmt.Errorf("field protocol_version: must be at least 1")
	}
	if err := names.Zone(w.GetZone()); err != nil {
		return fmt.Errorf("field zone: %w", err)
	}
	if d := w.GetReportInterval(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return fmt.Errorf("field report_interval: must be a valid non-negative duration")
		}
	}
	return validateRedialSpread(w.GetRedialSpread())
}

// MaxRedialSpread bounds Welcome.redial_spread and Advice.redial_spread:
// an agent never waits longer than this to redial after losing its
// connection.
const MaxRedialSpread = 10 * time.Minute

func validateRedialSpread(d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.AsDuration() > MaxRedialSpread {
		return fmt.Errorf("field redial_spread: must be a valid duration from 0 to %v", MaxRedialSpread)
	}
	return nil
}

func validateSubscribe(s *lehrpb.Subscribe) error {
	if len(s.GetNamespaces()) == 0 {
		return fmt.Errorf("field namespaces: empty; subscribe to at least one namespace")
	}
	return validateCached("namespaces", s.GetNamespaces())
}

func validateAck(a *lehrpb.Ack) error {
	if err := validateNamespace("namespace", a.GetNamespace()); err != nil {
		return err
	}
	if a.GetOk() {
		if a.GetVersion() == 0 {
			return fmt.Errorf("field version: must be at least 1 in a positive ack")
		}
		return validateChecksum("checksum", a.GetChecksum())
	}
	if a.GetError() == "" {
		return fmt.Errorf("field error: a negative ack (ok=false) must say why")
	}
	if a.GetChecksum() != "" {
		return validateChecksum("checksum", a.GetChecksum())
	}
	return nil
}

func validateResync(r *lehrpb.Resync) error {
	if err := validateNamespace("namespace", r.GetNamespace()); err != nil {
		return err
	}
	if r.GetHaveChecksum() != "" {
		return validateChecksum("have_checksum", r.GetHaveChecksum())
	}
	return nil
}

func validateCached(field string, cs []*lehrpb.CachedNamespace) error {
	seen := make(map[string]struct{}, len(cs))
	for i, c := range cs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := validateNamespace(f+".namespace", c.GetNamespace()); err != nil {
			return err
		}
		if _, dup := seen[c.GetNamespace()]; dup {
			return fmt.Errorf("field %s.namespace: %s listed more than once", f, quote(c.GetNamespace()))
		}
		seen[c.GetNamespace()] = struct{}{}
		if c.GetVersion() == 0 {
			if c.GetChecksum() != "" {
				return fmt.Errorf("field %s.checksum: must be empty with version 0", f)
			}
			continue
		}
		if err := validateChecksum(f+".checksum", c.GetChecksum()); err != nil {
			return err
		}
	}
	return nil
}

func validateNamespaceList(field string, nss []string, nonEmpty bool) error {
	if nonEmpty && len(nss) == 0 {
		return fmt.Errorf("field %s: empty; name at least one namespace", field)
	}
	seen := make(map[string]struct{}, len(nss))
	for i, ns := range nss {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := validateNamespace(f, ns); err != nil {
			return err
		}
		if _, dup := seen[ns]; dup {
			return fmt.Errorf("field %s: %s listed more than once", f, quote(ns))
		}
		seen[ns] = struct{}{}
	}
	return nil
}

func validateNamespace(field, ns string) error {
	if max := names.MaxLabelLen + 1 + names.MaxNameLen; len(ns) > max {
		return fmt.Errorf("field %s: namespace %s is longer than %d bytes", field, quote(ns), max)
	}
	if _, _, err := names.Namespace(ns); err != nil {
		return fmt.Errorf("field %s: %w", field, err)
	}
	return nil
}

// ChecksumPrefix starts every content checksum.
const ChecksumPrefix = "sha256:"

// ValidChecksum reports whether s has the form of a content checksum:
// "sha256:" and 64 lowercase hex digits.
func ValidChecksum(s string) bool {
	hex, ok := strings.CutPrefix(s, ChecksumPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func validateChecksum(field, s string) error {
	if !ValidChecksum(s) {
		return fmt.Errorf("field %s: want %q and 64 lowercase hex digits, got %s", field, ChecksumPrefix, quote(s))
	}
	return nil
}

// quote quotes s for an error message, shortened to at most 80 bytes.
func quote(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// MaxSignalsWanted bounds SignalsRequest.namespaces.
const MaxSignalsWanted = 64

func validateSignalsRequest(m *lehrpb.SignalsRequest) error {
	if n := len(m.GetNamespaces()); n > MaxSignalsWanted {
		return fmt.Errorf("namespaces: %d; at most %d in one request", n, MaxSignalsWanted)
	}
	for i, w := range m.GetNamespaces() {
		if err := validateNamespace(fmt.Sprintf("namespaces[%d].namespace", i), w.GetNamespace()); err != nil {
			return err
		}
	}
	return nil
}

func validateSignals(m *lehrpb.Signals) error {
	for i, ns := range m.GetNamespaces() {
		f := fmt.Sprintf("namespaces[%d]", i)
		if err := validateNamespace(f+".namespace", ns.GetNamespace()); err != nil {
			return err
		}
		if err := signals.Validate(f, ns); err != nil {
			return err
		}
	}
	return nil
}
