package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/peercred"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Identities (docs/operations.md, "Security model"). Every caller of the
// control API has one identity, read from what control verified and from
// nothing the caller says:
//
//	client certificate spiffe://lehr/user/alice     alice
//	local account bob on control's unix socket     unix:bob, or the user Options.LocalUsers maps bob to
//	client certificate of another role             its URI, e.g. spiffe://lehr/control/c1
//	anyone else                                    none: see below
//
// That one name is what the domain ACLs and the fleet admins list, what a
// version, domain, rollout policy, rollout command or policy experiment
// records as its author (and so what control signs), and who the audit
// log says made a call. A certificate's CommonName is never read: a
// certificate is who its Lehr identity URI SAN says, or nobody.
//
// A caller with no identity — plaintext TCP, TLS without a client
// certificate — may only read (Authorizer; a certificate without a Lehr
// identity may call nothing), except in dev mode, where such a caller may
// change anything and is recorded as the author it asserts ("lehr --as":
// a request's author field, else the lehr-author metadata), else
// "anonymous". An identified caller that asserts an author other than
// its identity is refused (checkAsserted), in dev mode too: an asserted
// author never stands in for a verified one.

// LocalPrefix starts the identity of a local account on control's unix
// socket, "unix:bob": local accounts and certificate users are distinct
// identities, so a domain ACL or the fleet admins name a local account
// as "unix:<account>", and a certificate user by its bare name.
const LocalPrefix = "unix:"

// anonymous is the author of a change by a caller without an identity.
const anonymous = "anonymous"

// Reserved lists the authors control records for itself: the rollout
// strategist's goal moves and rollbacks (rollout.Author — which the
// strategist also trusts to recognise a rollback of its own), control's
// own versions ("control") and callers without an identity. No caller is
// any of them: a certificate user of such a name may call nothing, a local
// account is not mapped to one, an ACL does not name one, and no caller
// asserts one, in dev mode either.
var Reserved = []string{rollout.Author, "control", anonymous}

// checkUnreserved refuses a reserved name as a caller's identity.
func checkUnreserved(name string) error {
	if slices.Contains(Reserved, name) {
		return fmt.Errorf("%q is reserved for what control records itself (%s): no caller may be it, or its changes would read as control's own; use another name",
			name, strings.Join(Reserved, ", "))
	}
	return nil
}

// callerKind is how control knows a caller.
type callerKind int

const (
	// kindInProcess: no gRPC peer, a call from inside control's process.
	kindInProcess callerKind = iota
	// kindUnidentified: plaintext TCP, or TLS without a client certificate.
	kindUnidentified
	// kindLocal: a process on control's unix socket (SO_PEERCRED).
	kindLocal
	// kindCert: a verified client certificate with a Lehr identity.
	kindCert
	// kindBadCert: a verified client certificate without a Lehr identity,
	// or with a malformed one.
	kindBadCert
)

// caller is who made a call, as its transport says.
type caller struct {
	kind callerKind
	// cert is a kindCert caller's Lehr identity.
	cert tlsconfig.Identity
	// certErr says what is wrong with a kindBadCert caller's identity
	// (nil: it carries none).
	certErr error
	// local is a kindLocal caller's peer credentials.
	local peercred.Info
	// transport is how it connected, for audit: the peer credentials
	// ("unix:uid=1000(bob),pid=42"), the client certificate's serial
	// number ("cert:serial=…"), or the peer address ("" in-process).
	transport string
	// asserted is the AuthorMetadataKey value, "" if none.
	asserted string
}

// callerOf reads who made the call of ctx from its transport, and the
// author its metadata asserts (checkAudit validates the latter).
func callerOf(ctx context.Context) caller {
	var c caller
	if vs := metadata.ValueFromIncomingContext(ctx, AuthorMetadataKey); len(vs) > 0 {
		c.asserted = vs[0]
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return c // kindInProcess
	}
	c.kind = kindUnidentified
	if p.Addr != nil {
		c.transport = p.Addr.String()
	}
	switch ai := p.AuthInfo.(type) {
	case peercred.Info:
		c.kind, c.local, c.transport = kindLocal, ai, ai.String()
	case credentials.TLSInfo:
		if len(ai.State.VerifiedChains) == 0 || len(ai.State.VerifiedChains[0]) == 0 {
			break
		}
		c.transport = "cert:serial=" + ai.State.VerifiedChains[0][0].SerialNumber.Text(16)
		id, has, err := tlsconfig.PeerRole(ai.State)
		if err == nil && has && id.Role == tlsconfig.RoleUser {
			err = checkUnreserved(id.Name)
		}
		if err != nil || !has {
			c.kind, c.certErr = kindBadCert, err
			break
		}
		c.kind, c.cert = kindCert, id
	}
	return c
}

// identity returns c's identity (the table above); ok is false for a
// caller without one.
func (s *Service) identity(c caller) (name string, ok bool) {
	switch c.kind {
	case kindCert:
		if c.cert.Role == tlsconfig.RoleUser {
			return c.cert.Name, true
		}
		return c.cert.String(), true
	case kindLocal:
		if u, mapped := s.localUsers[c.local.User]; mapped {
			return u, true
		}
		return LocalPrefix + c.local.User, true
	}
	return "", false
}

// userOf returns the name the domain ACLs know the caller of ctx by: a
// certificate user's name, or a local account's identity. ok is false
// for a caller control cannot identify (plaintext TCP, in-process) and
// for a control replica, neither of which the ACL checks. The Authorizer
// has refused every other role and identity-less certificates before
// this runs.
func (s *Service) userOf(ctx context.Context) (name string, ok bool) {
	c := callerOf(ctx)
	if c.kind == kindLocal || c.kind == kindCert && c.cert.Role == tlsconfig.RoleUser {
		return s.identity(c)
	}
	return "", false
}

// attribution is who a change is recorded as made by, and how the
// caller connected.
type attribution struct{ author, transport string }

// attribute returns who a change by the caller of ctx is attributed to:
// its identity; for a caller without one, in dev mode or in-process, the
// author the request asserted (requestAuthor), else the one its metadata
// asserted; else "anonymous".
func (s *Service) attribute(ctx context.Context, requestAuthor string) attribution {
	c := callerOf(ctx)
	if name, ok := s.identity(c); ok {
		return attribution{name, c.transport}
	}
	if c.kind == kindInProcess || c.kind == kindUnidentified && s.devMode {
		switch {
		case requestAuthor != "":
			return attribution{requestAuthor, c.transport}
		case c.asserted != "":
			return attribution{c.asserted, c.transport}
		}
	}
	return attribution{anonymous, c.transport}
}

// describe says who c is, for an error: its identity and where it comes
// from.
func (s *Service) describe(c caller) string {
	name, _ := s.identity(c)
	switch c.kind {
	case kindCert:
		return fmt.Sprintf("%q (your client certificate's identity %s)", name, c.cert)
	case kindLocal:
		if _, mapped := s.localUsers[c.local.User]; mapped {
			return fmt.Sprintf("%q (local account %s on control's socket, mapped to user %s by lehr control --local-users)", name, c.local.User, name)
		}
		return fmt.Sprintf("%q (local account %s on control's socket, uid %d)", name, c.local.User, c.local.UID)
	}
	return "a caller control cannot identify"
}

// checkAsserted refuses a mutating call by an identified caller that
// asserts an author other than its identity, in the request's author
// field or the lehr-author metadata: who made a change is what control
// verified, never what the caller says. An asserted author equal to the
// identity is accepted (it changes nothing); one from a caller without an
// identity is left to authorOf (dev mode) and the Authorizer (outside it).
func (s *Service) checkAsserted(ctx context.Context, req any) error {
	c := callerOf(ctx)
	name, ok := s.identity(c)
	if !ok {
		return nil
	}
	var fromRequest string
	if m, isMsg := req.(proto.Message); isMsg {
		fromRequest = stringField(m.ProtoReflect(), "author")
	}
	for _, a := range []struct{ field, value string }{{"author", fromRequest}, {AuthorMetadataKey, c.asserted}} {
		if a.value == "" || a.value == name {
			continue
		}
		return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, a.field,
			"you are %s: control records who it verified as the author of every change, so it refuses an asserted author (%s in the request's %s, as lehr's --as flag and LEHR_AS send). "+
				"Drop --as, or assert %q; an asserted author counts only for callers control cannot identify, in dev mode ('lehr dev', 'lehr control --dev')",
			s.describe(c), excerpt.Quote(a.value), a.field, name)
	}
	return nil
}

// CheckPrincipal reports whether name may stand in a domain ACL's user
// lists or among the fleet admins: a certificate user's name (the <name>
// of spiffe://lehr/user/<name>) or a local account's identity,
// "unix:<account>".
func CheckPrincipal(name string) error {
	if account, local := strings.CutPrefix(name, LocalPrefix); local {
		if err := checkAccount(account); err != nil {
			return fmt.Errorf("%q names a local account: %w", name, err)
		}
		return nil
	}
	if err := checkUnreserved(name); err != nil {
		return err
	}
	if err := (tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}).Check(); err != nil {
		return fmt.Errorf("%q is neither a user name (1-64 bytes of letters, digits, '.', '_', '@' and '-': the <name> of spiffe://lehr/user/<name>) nor a local account (unix:<account>)", name)
	}
	return nil
}

// checkAccount checks a local account name as Lehr names it: the
// characters of a user name (local accounts with others cannot be named;
// an account without a name is "uid-<n>").
func checkAccount(account string) error {
	if err := (tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: account}).Check(); err != nil {
		return fmt.Errorf("want a local account name of 1-64 bytes of letters, digits, '.', '_', '@' and '-' (uid-<n> for a uid without a name)")
	}
	return nil
}

// CheckLocalUsers validates a map of local accounts to the certificate
// users they act as (Options.LocalUsers).
func CheckLocalUsers(m map[string]string) error {
	for account, user := range m {
		if err := checkAccount(account); err != nil {
			return fmt.Errorf("local account %q: %w", account, err)
		}
		if err := checkUnreserved(user); err != nil {
			return fmt.Errorf("local account %s maps to %w", account, err)
		}
		if err := (tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: user}).Check(); err != nil {
			return fmt.Errorf("local account %s maps to %q, which is not a user name (1-64 bytes of letters, digits, '.', '_', '@' and '-': the <name> of spiffe://lehr/user/<name>)", account, user)
		}
	}
	return nil
}
