package service

// Deleting namespaces and domains (AIP-135; docs/operations.md, "Deleting
// namespaces and domains"). The store removes what is deleted in one
// transaction, decided on one read (control/store, delete.go); the rules
// of what may be deleted are the pure functions below, which the store
// calls on that read:
//
//   - the etag, if one is given, must be the resource's current one
//     (ABORTED, ETAG_MISMATCH): "v{latest_version}" for a namespace — a
//     version published since it was read changes it — and the record's
//     revision for a domain;
//   - without force, a namespace that hosts hold or subscribe to, as the
//     zones' distributors last reported, is refused (FAILED_PRECONDITION,
//     NAMESPACE_IN_USE), as is one with a rollout running or paused
//     (ROLLOUT_IN_FLIGHT), and a domain that has namespaces
//     (DOMAIN_NOT_EMPTY). Each refusal names what stands in the way and
//     the command that deletes anyway.
//
// Who may: the domain's admins, and fleet admins (acl.go). What was
// deleted — force, namespaces, versions, bytes — goes in the audit record.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// namespaceEtag is a namespace's etag (Namespace.etag): "v{latest}", a
// policy's live etag too. Version numbers never repeat under one name, even
// across a deletion (store.Tombstone), so neither does the etag — except
// "v0", of a namespace created without a version.
func namespaceEtag(latest uint64) string { return preview.LiveEtag(latest) }

// withEtags sets the etag of each namespace (read from the store: the
// caller's to change).
func withEtags(nss ...*lehrpb.Namespace) {
	for _, n := range nss {
		n.Etag = namespaceEtag(n.GetLatestVersion())
	}
}

// DeleteNamespace removes a namespace and everything of it
// (store.DeleteNamespace) once checkNamespaceDeletion allows it. The ACL
// interceptor has let only the domain's admins and the fleet admins
// through.
func (s *Service) DeleteNamespace(ctx context.Context, req *lehrpb.DeleteNamespaceRequest) (_ *emptypb.Empty, err error) {
	defer s.track(ctx, "DeleteNamespace", time.Now(), &err)
	ns := req.GetName()
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, nameError("name", err)
	}
	if names.IsPreview(ns) {
		policy := strings.TrimSuffix(ns, names.PreviewSuffix)
		return nil, invalid(apierror.ReasonInvalidName, "name",
			"namespace %q is the preview namespace of policy %q, which control writes: it is deleted with the policy ('lehr delete %s'), never on its own", ns, policy, policy)
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	etag, force := req.GetEtag(), req.GetForce()
	del, err := s.st.DeleteNamespace(ctx, ns, store.DeleteOptions{
		RequestID:   req.GetRequestId(),
		ReadReports: !force,
		Check: func(st store.DeletionState) error {
			return checkNamespaceDeletion(ns, etag, force, st)
		},
	})
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.deleted(ctx, "namespace", ns, force, del)
	return &emptypb.Empty{}, nil
}

// DeleteDomain removes a domain and, with force, its namespaces
// (store.DeleteDomain) once checkDomainDeletion allows it. The ACL
// interceptor has let only the domain's admins and the fleet admins
// through.
func (s *Service) DeleteDomain(ctx context.Context, req *lehrpb.DeleteDomainRequest) (_ *emptypb.Empty, err error) {
	defer s.track(ctx, "DeleteDomain", time.Now(), &err)
	domain := req.GetName()
	if err := names.Domain(domain); err != nil {
		return nil, nameError("name", err)
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	etag, force := req.GetEtag(), req.GetForce()
	del, err := s.st.DeleteDomain(ctx, domain, store.DeleteOptions{
		RequestID: req.GetRequestId(),
		Check: func(st store.DeletionState) error {
			return checkDomainDeletion(domain, etag, force, st)
		},
	})
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.deleted(ctx, "domain", domain, force, del)
	return &emptypb.Empty{}, nil
}

// deleted logs and notes in the audit record what a deletion removed.
func (s *Service) deleted(ctx context.Context, what, name string, force bool, del store.Deletion) {
	if del.Repeated {
		noteAudit(ctx, "force=%t; a retry: the %s was deleted by an earlier call with this request_id", force, what)
		return
	}
	noteAudit(ctx, "force=%t; deleted %d namespace(s), %d version(s), %s stored; a namespace created again under the name starts at version %d",
		force, del.Namespaces, del.Versions, humanize.IBytes(uint64(max(0, del.StoredBytes))), del.LastVersion+1)
	s.log.Info("control: deleted "+what, what, name, "force", force, "namespaces", del.Namespaces,
		"versions", del.Versions, "stored_bytes", del.StoredBytes, "by", s.attribute(ctx, "").author)
}

// zoneHosts is how many hosts of one zone hold or subscribe to a
// namespace, as its distributors last reported.
type zoneHosts struct {
	zone  string
	hosts int
}

// subscribers returns, zone by zone (sorted), the hosts the live reports
// show holding or subscribing to ns: for each distributor the larger of
// its agents holding a version of ns and its agents reporting on ns (one
// that subscribed and holds nothing yet), summed over the zone's
// distributors. Zones without any are left out.
func subscribers(reports map[string][]*lehrpb.DistributorStatus, ns string) []zoneHosts {
	var out []zoneHosts
	for zone, ds := range reports {
		n := 0
		for _, d := range ds {
			holding, reporting := 0, 0
			for _, v := range d.GetVersions() {
				if v.GetNamespace() == ns {
					holding += int(v.GetAgents())
				}
			}
			for _, h := range d.GetHealth() {
				if h.GetNamespace() == ns {
					reporting += int(h.GetAgents())
				}
			}
			n += max(holding, reporting)
		}
		if n > 0 {
			out = append(out, zoneHosts{zone, n})
		}
	}
	slices.SortFunc(out, func(a, b zoneHosts) int { return strings.Compare(a.zone, b.zone) })
	return out
}

// checkNamespaceDeletion decides whether namespace ns, read as st, may be
// deleted under etag and force (see the top of this file).
func checkNamespaceDeletion(ns, etag string, force bool, st store.DeletionState) error {
	var head *lehrpb.Namespace
	for _, h := range st.Namespaces {
		if h.GetName() == ns {
			head = h
		}
	}
	if cur := namespaceEtag(head.GetLatestVersion()); etag != "" && etag != cur {
		return apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "etag",
			"etag %s is not namespace %s's etag %q: a version was published since it was read ('lehr history %s'); nothing was deleted. "+
				"Check the namespace and delete it with --etag %s, or without --etag to delete it whatever its latest version",
			excerpt.Quote(etag), ns, cur, ns, cur)
	}
	if force {
		return nil
	}
	if zs := subscribers(st.Reports, ns); len(zs) > 0 {
		var parts []string
		for _, z := range zs {
			parts = append(parts, fmt.Sprintf("zone %s: %d %s", z.zone, z.hosts, plural(z.hosts, "host", "hosts")))
		}
		return apierror.New(codes.FailedPrecondition, apierror.ReasonNamespaceInUse, "name",
			"namespace %s is in use: hosts hold or subscribe to it (%s), as their distributors last reported ('lehr zones status %s'). "+
				"Deleted, it stays on those hosts at the version they hold and their consumers are told it is NOT_FOUND. "+
				"Remove the subscriptions first (stop or reconfigure the services that subscribe to it), or delete it anyway with force ('lehr delete %s --force')",
			ns, strings.Join(parts, ", "), zs[0].zone, ns)
	}
	for _, r := range st.Rollouts {
		if rollout.Active(r) {
			state := strings.ToLower(strings.TrimPrefix(r.GetState().String(), "ROLLOUT_STATE_"))
			return apierror.New(codes.FailedPrecondition, apierror.ReasonRolloutInFlight, "name",
				"namespace %s has a rollout in flight: %s is %s ('lehr rollout status %s'). "+
					"Let it end or abort it ('lehr rollout abort %s'), or delete the namespace with force ('lehr delete %s --force'): the rollout ends with it",
				ns, r.GetId(), state, ns, ns, ns)
		}
	}
	return nil
}

// checkDomainDeletion decides whether domain, read as st, may be deleted
// under etag and force (see the top of this file).
func checkDomainDeletion(domain, etag string, force bool, st store.DeletionState) error {
	if cur := st.Domain.GetEtag(); etag != "" && etag != cur {
		return apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "etag",
			"etag %s is not domain %s's etag %q: the domain changed since it was read ('lehr domain get %s'); nothing was deleted. "+
				"Check it and delete it with --etag %s, or without --etag",
			excerpt.Quote(etag), domain, cur, domain, cur)
	}
	if force {
		return nil
	}
	// A policy's preview namespace goes with the policy: it does not count.
	var nss []string
	for _, h := range st.Namespaces {
		if !names.IsPreview(h.GetName()) {
			nss = append(nss, h.GetName())
		}
	}
	if len(nss) == 0 {
		return nil
	}
	shown := nss[:min(len(nss), 5)]
	list := strings.Join(shown, ", ")
	if len(nss) > len(shown) {
		list += fmt.Sprintf(", and %d more", len(nss)-len(shown))
	}
	del := "'lehr delete " + strings.Join(nss, "', 'lehr delete ") + "'"
	if len(nss) > 3 {
		del = fmt.Sprintf("'lehr delete %s/NAME' for each", domain)
	}
	them := plural(len(nss), "it", "them")
	return apierror.New(codes.FailedPrecondition, apierror.ReasonDomainNotEmpty, "name",
		"domain %s has %d %s (%s). Delete %s first (%s), "+
			"or delete the domain with %s, whatever subscribes to %s ('lehr domain delete %s --force')",
		domain, len(nss), plural(len(nss), "namespace", "namespaces"), list, them, del, them, them, domain)
}

// plural returns one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
