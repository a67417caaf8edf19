package wire

import (
	"errors"
	"fmt"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// ApplyUpdate returns the content an Update produces from base, which the
// agent holds at baseVersion with checksum baseChecksum. It is pure: base
// and u are not modified, and the result shares values with both.
//
//   - A snapshot replaces base, whatever it is.
//   - A patch applies only if baseVersion and baseChecksum are exactly the
//     patch's base; otherwise the error wraps [ErrBaseMismatch]. A patch that
//     deletes a key base lacks wraps [ErrPatchConflict].
//   - In both cases the result's checksum must equal u.checksum, or the
//     error wraps [ErrChecksumMismatch]. This also catches a base whose
//     content does not match the checksum it was stored with.
//
// u may be in full or compact form ([CompactUpdate]). An invalid Update
// gives a [*FrameError] (ErrMalformed). Any error means
// the agent keeps what it had; [ResyncReasonFor] says which Resync to send.
func ApplyUpdate(base content.Snapshot, baseVersion uint64, baseChecksum string, u *lehrpb.Update) (content.Snapshot, error) {
	if err := ValidateUpdate(u); err != nil {
		return content.Snapshot{}, err
	}
	ns, v := u.GetNamespace(), u.GetVersion()
	var out content.Snapshot
	if u.GetSnapshot() {
		s, err := content.New(content.FromProto(u.GetSet()))
		if err != nil { // unreachable after ValidateUpdate, kept for safety
			return content.Snapshot{}, &FrameError{Code: ErrMalformed, Type: FrameUpdate, Reason: "snapshot " + ns, Err: err}
		}
		out = s
	} else {
		if baseVersion != u.GetBaseVersion() || baseChecksum != UpdateBaseChecksum(u) {
			return content.Snapshot{}, fmt.Errorf("apply patch %s@%d: %w: have version %d (%s), patch needs %d (%s)",
				ns, v, ErrBaseMismatch, baseVersion, shortSum(baseChecksum), u.GetBaseVersion(), shortSum(UpdateBaseChecksum(u)))
		}
		s, err := base.Apply(content.Patch{Set: content.FromProto(u.GetSet()), Delete: u.GetDelete()})
		if err != nil {
			if errors.Is(err, content.ErrMissingKey) {
				return content.Snapshot{}, fmt.Errorf("apply patch %s@%d: %w: %w", ns, v, ErrPatchConflict, err)
			}
			return content.Snapshot{}, &FrameError{Code: ErrMalformed, Type: FrameUpdate, Reason: "patch " + ns, Err: err}
		}
		out = s
	}
	if got := out.Checksum(); got != UpdateChecksum(u) {
		kind := "patch"
		if u.GetSnapshot() {
			kind = "snapshot"
		}
		return content.Snapshot{}, fmt.Errorf("apply %s %s@%d: %w: result is %s, update says %s",
			kind, ns, v, ErrChecksumMismatch, shortSum(got), shortSum(UpdateChecksum(u)))
	}
	return out, nil
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

// ResyncReasonFor maps an [ApplyUpdate] error to the reason of the Resync
// the agent sends. A malformed update is a protocol violation instead
// (close the connection); for it, and for nil, it returns UNSPECIFIED.
func ResyncReasonFor(err error) lehrpb.ResyncReason {
	switch {
	case errors.Is(err, ErrBaseMismatch):
		return lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH
	case errors.Is(err, ErrPatchConflict):
		return lehrpb.ResyncReason_RESYNC_REASON_PATCH_CONFLICT
	case errors.Is(err, ErrChecksumMismatch):
		return lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH
	}
	return lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED
}

// Version is one version of a namespace as the distributor holds it.
type Version struct {
	// Seq is the version's sequence number, at least 1.
	Seq uint64
	// Checksum of Content. Empty means "compute it"; when set it must be
	// Content.Checksum() (the distributor caches it to avoid rehashing a
	// large namespace for every agent).
	Checksum string
	// Content is the version's properties.
	Content content.Snapshot
	// Info describes the version; optional, sent as is.
	Info *lehrpb.VersionInfo
}

func (v Version) checksum() string {
	if v.Checksum != "" {
		return v.Checksum
	}
	return v.Content.Checksum()
}

// BuildUpdate makes the Update that brings an agent holding from to the
// version to. With from nil (the agent's version is unknown to the
// distributor, or it holds nothing) it is a snapshot. Otherwise it is a
// patch computed with content.Diff — unless the patch would not be smaller
// than the snapshot, in which case the snapshot is sent instead. from.Seq
// must be below to.Seq: versions never go backwards.
func BuildUpdate(ns string, kind lehrpb.NamespaceKind, from *Version, to Version) (*lehrpb.Update, error) {
	if to.Seq == 0 {
		return nil, fmt.Errorf("wire: build update %s: target version is 0", ns)
	}
	u := &lehrpb.Update{
		Namespace: ns,
		Kind:      kind,
		Version:   to.Seq,
		Checksum:  to.checksum(),
		Info:      to.Info,
	}
	if from != nil {
		if from.Seq == 0 || from.Seq >= to.Seq {
			return nil, fmt.Errorf("wire: build update %s: base version %d is not in 1..%d", ns, from.Seq, to.Seq-1)
		}
		p := content.Diff(from.Content, to.Content)
		if p.Size()+int64(len(p.Set)) < to.Content.Size()+int64(to.Content.Len()) {
			u.BaseVersion = from.Seq
			u.BaseChecksum = from.checksum()
			u.Set = content.ToProto(p.Set)
			u.Delete = p.Delete
			return u, validated(ns, u)
		}
	}
	u.Snapshot = true
	u.Set = content.ToProto(to.Content.Props())
	return u, validated(ns, u)
}

func validated(ns string, u *lehrpb.Update) error {
	if err := ValidateUpdate(u); err != nil {
		return fmt.Errorf("wire: build update %s: %w", ns, err)
	}
	return nil
}

// Action is what a distributor sends an agent for one namespace.
type Action uint8

const (
	// SendNothing: the agent is at the goal (or ahead of it).
	SendNothing Action = iota
	// SendPatch: a patch from the agent's version to the goal.
	SendPatch
	// SendSnapshot: the full goal version.
	SendSnapshot
)

func (a Action) String() string {
	switch a {
	case SendNothing:
		return "nothing"
	case SendPatch:
		return "patch"
	case SendSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("action %d", uint8(a))
}

// Plan decides what to send an agent that announced (haveVersion,
// haveChecksum) for a namespace whose goal is (goalVersion, goalChecksum).
// baseKnown says whether the distributor holds the content of haveVersion
// and its checksum equals haveChecksum. The rules (docs/wire.md, "Message
// flow"):
//
//   - same version and checksum as the goal: nothing;
//   - same version, other checksum: the agent's copy is corrupt, snapshot;
//   - older version, known with that checksum: patch;
//   - older version otherwise (unknown, evicted, nothing cached, or a
//     checksum that does not match): snapshot;
//   - newer version than the goal (this distributor lags another one):
//     nothing; the agent keeps its newer version and this distributor sends
//     the next goal once it has one.
func Plan(haveVersion uint64, haveChecksum string, goalVersion uint64, goalChecksum string, baseKnown bool) Action {
	switch {
	case goalVersion == 0:
		return SendNothing
	case haveVersion == goalVersion && haveChecksum == goalChecksum:
		return SendNothing
	case haveVersion == goalVersion:
		return SendSnapshot
	case haveVersion > goalVersion:
		return SendNothing
	case haveVersion > 0 && baseKnown:
		return SendPatch
	default:
		return SendSnapshot
	}
}
