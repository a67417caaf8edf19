package service

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Domain ACLs (lehrpb.Acl; docs/operations.md, "Security model"). Every
// mutating call on a domain needs the caller's identity (identity.go: a
// certificate user's name, or "unix:<account>" for a local account on
// control's socket) in the list of its action — or in the admins, who may
// do everything — unless the domain has no admins (an open domain). Reads
// are open to every user.

// aclAction is what a mutating call does to a domain, and which ACL list
// allows it.
type aclAction int

const (
	actPublish aclAction = iota + 1
	actOperate
	actAdminister
)

// aclActions maps the mutating methods that act on a domain to their
// action. CreateDomain (no domain yet) is open to every user, CreateZone
// (fleet-wide) to the fleet admins (fleet.go).
var aclActions = map[string]aclAction{
	"CreateNamespace": actPublish, "Publish": actPublish, "Patch": actPublish, "Rollback": actPublish, "DeletePolicy": actPublish,
	"SetRolloutPolicy": actOperate, "DeleteRolloutPolicy": actOperate, "UpdateRollout": actOperate, "Evaluate": actOperate,
	"ForgetCanaryHistory":    actOperate,
	"CreatePolicyExperiment": actOperate, "UpdatePolicyExperiment": actOperate, "DeletePolicyExperiment": actOperate,
	"StartPreviewPolicyExperiment": actOperate, "StopPreviewPolicyExperiment": actOperate, "CommitPolicyExperiment": actOperate,
	"UpdateDomain": actAdminister, "CompactNamespace": actAdminister,
	"DeleteNamespace": actAdminister, "DeleteDomain": actAdminister,
}

// list returns the ACL list of a, and its field name.
func (a aclAction) list(acl *lehrpb.Acl) (entries []string, field string) {
	switch a {
	case actPublish:
		return acl.GetPublishers(), "acl.publishers"
	case actOperate:
		return acl.GetOperators(), "acl.operators"
	}
	return nil, ""
}

// ACLInterceptor decides the mutating calls of identified callers by
// their identity (identity.go): it refuses one that asserts another
// author (checkAsserted), and enforces domain ACLs — it reads the
// target's domain and refuses with PERMISSION_DENIED, naming the user,
// the call and the ACL list that would allow it, a caller in none of the
// lists the call needs. A domain that does not exist is left to the
// handler (NOT_FOUND).
func (s *Service) ACLInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.checkACL(ctx, path.Base(info.FullMethod), req, true); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// checkACL is ACLInterceptor's decision on a call of method with req by
// the caller of ctx; count counts a refusal in
// lehr_control_acl_denials_total.
func (s *Service) checkACL(ctx context.Context, method string, req any, count bool) error {
	if auditedMethods[method] {
		if err := s.checkAsserted(ctx, req); err != nil {
			return err
		}
	}
	act, mutating := aclActions[method]
	user, identified := s.userOf(ctx)
	m, isMsg := req.(proto.Message)
	if r, ok := req.(*lehrpb.CreateZoneRequest); ok {
		if err := s.mayCreateZone(ctx, r.GetName()); err != nil {
			return err
		}
	}
	if r, ok := req.(*lehrpb.DeleteZoneRequest); ok {
		if err := s.mayDeleteZone(ctx, r.GetName()); err != nil {
			return err
		}
	}
	if !mutating || !identified || !isMsg {
		return nil
	}
	target, _ := auditTarget(m.ProtoReflect())
	dname := domainOfTarget(target, method)
	if dname == "" {
		return nil
	}
	d, err := s.st.GetDomain(ctx, dname)
	var nf *store.NotFoundError
	switch {
	case errors.As(err, &nf) || errors.Is(err, store.ErrInvalid):
		return nil
	case err != nil:
		return s.apiError(ctx, err)
	}
	if act == actAdminister && s.fleetAdmin(ctx) {
		// A fleet admin administers every domain: sets its quotas (above
		// the defaults too), compacts its history, deletes its namespaces
		// and the domain itself.
		return nil
	}
	if err := allowed(d, user, act, method); err != nil {
		if count {
			s.metrics.GetOrCreateCounter(fmt.Sprintf(`lehr_control_acl_denials_total{domain=%q}`, dname)).Inc()
		}
		return err
	}
	return nil
}

// MayCall says, without calling it, whether the caller of ctx (its gRPC
// peer) would be let through to the Control method — "UpdateRollout" —
// with req: the decision of a's role rules (Authorizer) and of
// ACLInterceptor, the same code, nothing audited or counted. The handler
// may still refuse the call for what it finds (a rollout that ended, a
// stale etag). The operator console (control/console) asks it to offer
// actions only to callers control would let act; the call itself is
// decided again, as every call is.
func (s *Service) MayCall(ctx context.Context, a Authorizer, method string, req proto.Message) error {
	if err := a.authorize(ctx, "/lehr.v1.Control/"+method, req); err != nil {
		return err
	}
	return s.checkACL(ctx, method, req, false)
}

// allowed decides whether user may make call (of action act) on d.
func allowed(d *lehrpb.Domain, user string, act aclAction, call string) error {
	acl := d.GetAcl()
	admins := acl.GetAdmins()
	if len(admins) == 0 || slices.Contains(admins, user) {
		return nil
	}
	entries, field := act.list(acl)
	if slices.Contains(entries, user) {
		return nil
	}
	need := "acl.admins"
	if field != "" {
		need = field + " (or acl.admins)"
	}
	return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, field,
		"user %q may not call %s on domain %q: that needs %q in the domain's %s; its admins (%s) can add it with 'lehr domain update %s --%s …'",
		user, call, d.GetName(), user, need, strings.Join(admins, ", "), d.GetName(), flagOf(act))
}

// flagOf names the lehr domain update flag that edits act's list.
func flagOf(act aclAction) string {
	switch act {
	case actPublish:
		return "publishers"
	case actOperate:
		return "operators"
	}
	return "admins"
}

// Bounds of a domain's ACL lists. A user list names people or robots one
// by one (there are no groups); readers name zones, or single hosts of a
// zone. Every control and distributor reads the lists on each call or
// subscription they decide, and a domain record carries all four.
const (
	// MaxACLUsers bounds acl.publishers, acl.operators and acl.admins.
	MaxACLUsers = 256
	// MaxACLReaders bounds acl.readers.
	MaxACLReaders = 1000
)

// checkACL validates an ACL under prefix ("domain.acl"): at most
// MaxACLUsers users per list (MaxACLReaders readers), every entry of a
// user list a certificate user's name or a local account's identity
// (CheckPrincipal), none twice in a list.
func checkACL(prefix string, acl *lehrpb.Acl) error {
	for _, l := range []struct {
		field   string
		entries []string
	}{{"publishers", acl.GetPublishers()}, {"operators", acl.GetOperators()}, {"admins", acl.GetAdmins()}, {"readers", acl.GetReaders()}} {
		limit := MaxACLUsers
		if l.field == "readers" {
			limit = MaxACLReaders
		}
		if n := len(l.entries); n > limit {
			return tooMany(prefix+"."+l.field, n, limit)
		}
		seen := map[string]bool{}
		for i, e := range l.entries {
			f := fmt.Sprintf("%s.%s[%d]", prefix, l.field, i)
			if l.field == "readers" {
				if err := checkReader(e); err != nil {
					return invalid(apierror.ReasonInvalidArgument, f, "%s: %v", excerpt.Quote(e), err)
				}
			} else if err := CheckPrincipal(e); err != nil {
				return invalid(apierror.ReasonInvalidArgument, f, "%s is not a user name: want a certificate user's name, 1-64 bytes of letters, digits, '.', '_', '@' and '-' (the <name> of spiffe://lehr/user/<name>), "+
					"or unix:<account> for a local account on control's socket", excerpt.Quote(e))
			}
			if seen[e] {
				return invalid(apierror.ReasonInvalidArgument, f, "%q is listed twice", e)
			}
			seen[e] = true
		}
	}
	return nil
}

// checkReader checks an acl.readers entry: a zone, or "zone/host" with a
// host id as host certificates carry it.
func checkReader(e string) error {
	zone, host, isHost := strings.Cut(e, "/")
	if err := names.Zone(zone); err != nil {
		return fmt.Errorf("want a zone or zone/host: %w", err)
	}
	if isHost {
		if err := (tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: host}).Check(); err != nil {
			return fmt.Errorf("want a zone or zone/host: %w", err)
		}
	}
	return nil
}
