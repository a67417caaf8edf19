// Package update is what an Update does to a host's copy of a namespace,
// decided in one place for every side of the wire:
//
//   - Build (distributor): the Update that brings a holder of one version
//     to another — a patch computed with content.Diff, or a snapshot when
//     the holder's version is unknown or a patch would not be smaller.
//   - Plan (distributor): what to send an agent that announced the
//     version it holds (a content.Ref), given the goal.
//   - Check (agent): whether an Update applies to what the agent holds, and
//     if not, why — stale, a gap, or a base mismatch.
//   - Apply (agent): the content an accepted Update produces, verified
//     against the Update's checksum.
//
// The real agent (through its cache) and the simulated agent of tests and
// benchmarks (agent/agenttest) call the same Check and Apply, so a fake can
// never accept what the agent refuses. docs/wire.md ("Message flow") is the
// specification.
//
// Imported by distributor/fanout, agent/upstream, agent/cache and
// agent/agenttest (the simulated agents); it builds on internal/content
// and internal/wire.
package update

import (
	"errors"
	"fmt"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// Reasons an Update is not applied. Check's errors wrap exactly one of the
// first three; Apply's one of the last two. Every one but ErrStale calls
// for a Resync (see ResyncReason).
var (
	// ErrStale: the holder has this version already (same checksum) or a
	// newer one. It acknowledges what it holds.
	ErrStale = errors.New("update: stale: this version or a newer one is held")
	// ErrGap: a patch whose base is newer than what is held: an earlier
	// update is still on its way.
	ErrGap = errors.New("update: gap: the patch's base has not arrived")
	// ErrBaseMismatch: a patch whose base is not what is held (an older
	// base, or the same version with another checksum).
	ErrBaseMismatch = errors.New("update: patch base mismatch")
	// ErrPatchConflict: a patch does not apply to the base (it deletes a
	// key the base lacks), so the base is not what its checksum claims.
	ErrPatchConflict = errors.New("update: patch does not apply")
	// ErrChecksumMismatch: the content after applying does not have the
	// update's checksum.
	ErrChecksumMismatch = errors.New("update: checksum mismatch")
)

// Build makes the Update that brings a holder of from to the version to.
// With from nil (the holder's version is unknown, or it holds nothing) it
// is a snapshot. Otherwise it is a patch computed with content.Diff —
// unless the patch would not be smaller than the snapshot, in which case
// the snapshot is sent instead. from.Seq must be below to.Seq: a patch
// never goes backwards. An empty Checksum of either version means "compute
// it" (callers that hold the checksum pass it, to avoid rehashing a large
// namespace for every agent). The Update is in full form (see
// wire.CompactUpdate) and valid.
func Build(from, to *content.Version) (*lehrpb.Update, error) {
	if to == nil || to.Seq == 0 {
		return nil, errors.New("update: build: target version is 0")
	}
	ns := to.Namespace
	u := &lehrpb.Update{
		Namespace: ns,
		Kind:      to.Kind,
		Version:   to.Seq,
		Checksum:  checksum(to),
		Info:      to.Info,
	}
	if from != nil {
		if from.Seq == 0 || from.Seq >= to.Seq {
			return nil, fmt.Errorf("update: build %s: base version %d is not in 1..%d", ns, from.Seq, to.Seq-1)
		}
		p := content.Diff(from.Content, to.Content)
		if p.Size()+int64(len(p.Set)) < to.Content.Size()+int64(to.Content.Len()) {
			u.BaseVersion = from.Seq
			u.BaseChecksum = checksum(from)
			u.Set = content.ToProto(p.Set)
			u.Delete = p.Delete
			return u, validated(ns, u)
		}
	}
	u.Snapshot = true
	u.Set = content.ToProto(to.Content.Props())
	return u, validated(ns, u)
}

func checksum(v *content.Version) string {
	if v.Checksum != "" {
		return v.Checksum
	}
	return v.Content.Checksum()
}

func validated(ns string, u *lehrpb.Update) error {
	if err := wire.ValidateUpdate(u); err != nil {
		return fmt.Errorf("update: build %s: %w", ns, err)
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

// Plan decides what to send an agent that announced it holds have of a
// namespace whose goal is goal (the zero Ref: no goal). baseKnown says
// whether the distributor holds the content of have.Seq and its checksum
// equals have.Checksum. The rules (docs/wire.md, "Message flow"):
//
//   - the goal itself (same version and checksum): nothing;
//   - same version, other checksum: the agent's copy is not control's (a
//     corrupt cache, or a store restored from a backup), snapshot — a
//     repair, which Check accepts;
//   - older version, known with that checksum: patch;
//   - older version otherwise (unknown, evicted, nothing cached, or a
//     checksum that does not match): snapshot;
//   - newer version than the goal (this distributor lags another one):
//     nothing; the agent keeps its newer version and this distributor sends
//     the next goal once it has one.
func Plan(have, goal content.Ref, baseKnown bool) Action {
	switch {
	case goal.Seq == 0:
		return SendNothing
	case have == goal:
		return SendNothing
	case have.Seq == goal.Seq:
		return SendSnapshot
	case have.Seq > goal.Seq:
		return SendNothing
	case have.Seq > 0 && baseKnown:
		return SendPatch
	default:
		return SendSnapshot
	}
}

// Check decides whether a holder of held of u's namespace — the zero Ref
// when it holds nothing — applies u. It returns nil to apply, or an error
// wrapping:
//
//   - ErrStale for a version below the held one, or the held version with
//     the held checksum (already applied);
//   - ErrGap for a patch whose base is newer than the held version;
//   - ErrBaseMismatch for a patch whose base is not exactly held (version
//     and checksum), and for a patch to the held version with another
//     checksum (only a snapshot can repair a version).
//
// A snapshot of the held version with another checksum is a repair and is
// applied: the holder's copy is not the one control published.
func Check(held content.Ref, u *lehrpb.Update) error {
	ns, v := u.GetNamespace(), u.GetVersion()
	sum := wire.UpdateChecksum(u)
	base := content.Ref{Seq: u.GetBaseVersion(), Checksum: wire.UpdateBaseChecksum(u)}
	switch {
	case v < held.Seq:
		return fmt.Errorf("%s@%d: %w: holds %d", ns, v, ErrStale, held.Seq)
	case v == held.Seq && sum == held.Checksum:
		return fmt.Errorf("%s@%d: %w: holds it (%s)", ns, v, ErrStale, shortSum(sum))
	case u.GetSnapshot():
		return nil
	case v == held.Seq:
		return fmt.Errorf("patch %s@%d: %w: holds %d with checksum %s, the update says %s; only a snapshot repairs a version",
			ns, v, ErrBaseMismatch, held.Seq, shortSum(held.Checksum), shortSum(sum))
	case base.Seq > held.Seq:
		return fmt.Errorf("patch %s@%d: %w: needs base %d, holds %d", ns, v, ErrGap, base.Seq, held.Seq)
	case base != held:
		return fmt.Errorf("patch %s@%d: %w: needs base %v, holds %v", ns, v, ErrBaseMismatch, base, held)
	}
	return nil
}

// Apply returns the content u produces from base, the content held when
// Check accepted u (ignored for a snapshot). It is pure: base and u are not
// modified, and the result shares values with both. u must be valid (the
// wire decoder validates every Update it returns; see wire.ValidateUpdate)
// and may be in full or compact form. The result's checksum must be u's,
// or the error wraps ErrChecksumMismatch; a patch that deletes a key base
// lacks wraps ErrPatchConflict. On any error the holder keeps what it had.
func Apply(base content.Snapshot, u *lehrpb.Update) (content.Snapshot, error) {
	ns, v := u.GetNamespace(), u.GetVersion()
	kind := "patch"
	var out content.Snapshot
	var err error
	if u.GetSnapshot() {
		kind = "snapshot"
		out, err = content.New(content.FromProto(u.GetSet()))
	} else {
		out, err = base.Apply(content.Patch{Set: content.FromProto(u.GetSet()), Delete: u.GetDelete()})
		if errors.Is(err, content.ErrMissingKey) {
			return content.Snapshot{}, fmt.Errorf("apply patch %s@%d: %w: %w", ns, v, ErrPatchConflict, err)
		}
	}
	if err != nil { // a duplicate key: refused by validation before
		return content.Snapshot{}, fmt.Errorf("apply %s %s@%d: %w", kind, ns, v, err)
	}
	if got, want := out.Checksum(), wire.UpdateChecksum(u); got != want {
		return content.Snapshot{}, fmt.Errorf("apply %s %s@%d: %w: result is %s, update says %s",
			kind, ns, v, ErrChecksumMismatch, shortSum(got), shortSum(want))
	}
	return out, nil
}

// ResyncReason is the reason of the Resync a holder sends after err from
// Check or Apply; UNSPECIFIED for nil, ErrStale and anything else.
func ResyncReason(err error) lehrpb.ResyncReason {
	switch {
	case errors.Is(err, ErrBaseMismatch), errors.Is(err, ErrGap):
		return lehrpb.ResyncReason_RESYNC_REASON_BASE_MISMATCH
	case errors.Is(err, ErrPatchConflict):
		return lehrpb.ResyncReason_RESYNC_REASON_PATCH_CONFLICT
	case errors.Is(err, ErrChecksumMismatch):
		return lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH
	}
	return lehrpb.ResyncReason_RESYNC_REASON_UNSPECIFIED
}

// shortSum abbreviates a checksum for error messages.
func shortSum(s string) string {
	if s == "" {
		return "no checksum"
	}
	if len(s) > len(wire.ChecksumPrefix)+12 {
		return s[:len(wire.ChecksumPrefix)+12] + "…"
	}
	return s
}
