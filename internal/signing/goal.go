package signing

// Signed goals: control also signs each goal state it writes — which
// version each host of a zone should hold of a namespace — so that a
// distributor can deliver only what control decided for that host: not a
// candidate to a host outside its cohort, not a version to a zone whose
// goal does not name it, not a signed version that no goal names any
// more (a canary that failed).

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// GoalPayloadPrefix starts every signed goal payload; a new layout
// changes it.
const GoalPayloadPrefix = "lehr-goal-v1\n"

// GoalPayload returns the bytes a goal's signature covers:
// GoalPayloadPrefix, then as netstrings the zone, namespace, version,
// checksum and update time (Unix nanoseconds) of g, and of its candidate
// (zeros and empty strings when there is none) the version, checksum,
// per_million, salt, the number of named hosts and each host in order.
func GoalPayload(g *lehrpb.GoalState) []byte {
	c := g.GetCandidate()
	fields := []string{
		g.GetZone(), g.GetNamespace(), strconv.FormatUint(g.GetVersion(), 10), g.GetChecksum(),
		strconv.FormatInt(g.GetUpdateTime().AsTime().UnixNano(), 10),
		strconv.FormatUint(c.GetVersion(), 10), c.GetChecksum(), strconv.FormatUint(uint64(c.GetPerMillion()), 10), c.GetSalt(),
		strconv.Itoa(len(c.GetHosts())),
	}
	fields = append(fields, c.GetHosts()...)
	b := []byte(GoalPayloadPrefix)
	for _, f := range fields {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, ',')
	}
	return b
}

// SignGoal sets g's signature and key id.
func (s *Signer) SignGoal(g *lehrpb.GoalState) {
	g.Signature = ed25519.Sign(s.key, GoalPayload(g))
	g.SignatureKeyId = s.id
}

// GoalProof returns what of g a distributor sends with an update (wire
// Update.goal): the fields the signature covers and the signature.
func GoalProof(g *lehrpb.GoalState) *lehrpb.GoalState {
	p := &lehrpb.GoalState{
		Zone: g.GetZone(), Namespace: g.GetNamespace(), Version: g.GetVersion(), Checksum: g.GetChecksum(),
		UpdateTime: g.GetUpdateTime(), Signature: g.GetSignature(), SignatureKeyId: g.GetSignatureKeyId(),
	}
	if c := g.GetCandidate(); c != nil {
		p.Candidate = &lehrpb.CandidateGoal{Version: c.GetVersion(), Checksum: c.GetChecksum(), Hosts: c.GetHosts(),
			PerMillion: c.GetPerMillion(), Salt: c.GetSalt()}
	}
	return proto.CloneOf(p)
}

// ErrNotSanctioned: a signed goal does not name the version for the host.
var ErrNotSanctioned = errors.New("signing: no signed goal names this version for this host")

// VerifyGoal checks g's signature (ErrUnsigned, ErrUnknownKey,
// ErrBadSignature), then that g names version ref (its number and
// checksum) of namespace ns for host in zone: as the zone's version, or as
// the candidate of a cohort host is in (ErrNotSanctioned otherwise).
func (v *Verifier) VerifyGoal(g *lehrpb.GoalState, zone, host, ns string, ref content.Ref) error {
	what := fmt.Sprintf("goal of %s in %s", g.GetNamespace(), g.GetZone())
	if g == nil || len(g.GetSignature()) == 0 {
		return fmt.Errorf("%s@%d for %s in %s: %w: no signed goal came with it", ns, ref.Seq, host, zone, ErrUnsigned)
	}
	k, ok := v.keys[g.GetSignatureKeyId()]
	if !ok {
		return fmt.Errorf("%s: %w: %q (trusted: %v)", what, ErrUnknownKey, g.GetSignatureKeyId(), v.KeyIDs())
	}
	if !ed25519.Verify(k, GoalPayload(g), g.GetSignature()) {
		return fmt.Errorf("%s (key %s): %w: its zone, namespace, versions or cohort were changed after control signed it", what, g.GetSignatureKeyId(), ErrBadSignature)
	}
	if g.GetZone() != zone || g.GetNamespace() != ns {
		return fmt.Errorf("%s@%d for %s in %s: %w: the goal that came with it is the %s", ns, ref.Seq, host, zone, ErrNotSanctioned, what)
	}
	if ref == (content.Ref{Seq: g.GetVersion(), Checksum: g.GetChecksum()}) {
		return nil
	}
	c := g.GetCandidate()
	in := cohort.Cohort{Hosts: c.GetHosts(), PerMillion: c.GetPerMillion(), Salt: c.GetSalt()}.Has(host)
	if c != nil && ref == (content.Ref{Seq: c.GetVersion(), Checksum: c.GetChecksum()}) && in {
		return nil
	}
	detail := fmt.Sprintf("it names version %d", g.GetVersion())
	if c != nil {
		detail += fmt.Sprintf(", and %d for its candidate cohort", c.GetVersion())
		if !in {
			detail += ", which this host is not in"
		}
	}
	return fmt.Errorf("%s@%d for %s in %s: %w (%s)", ns, ref.Seq, host, zone, ErrNotSanctioned, detail)
}
