package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Publish stores a full snapshot as a new version. See the proto for the
// contract. Without expected_version the last writer wins: a commit that
// loses a race is retried against the new latest version.
func (s *Service) Publish(ctx context.Context, req *lehrpb.PublishRequest) (_ *lehrpb.PublishResponse, err error) {
	defer s.track(ctx, "Publish", time.Now(), &err)
	_, _, nerr := names.Namespace(req.GetNamespace())
	if nerr != nil {
		return nil, nameError("namespace", nerr)
	}
	if err := userNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if err := s.checkRate(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	if err := checkKind("kind", req.GetKind()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	dom, found, err := s.domainAndNamespace(ctx, req.GetNamespace(), "namespace")
	if err != nil {
		return nil, err
	}
	props, snap, err := checkSnapshot("properties", req.GetProperties(), validate.ForDomain(dom.GetQuotas()))
	if err != nil {
		return nil, err
	}
	ns, create, err := s.namespaceForPublish(ctx, dom, found, req.GetNamespace(), req.GetKind())
	if err != nil {
		return nil, err
	}
	fieldOf := keyFields("properties", props)
	if err := s.runValidators(ctx, ns, props, fieldOf); err != nil {
		return nil, err
	}
	c := s.attribute(ctx, req.GetAuthor())
	info, err := s.commitLatest(ctx, store.Commit{
		Namespace: req.GetNamespace(),
		Limits:    s.domainLimits(dom),
		Create:    create,
		Kind:      ns.GetKind(),
		Content:   snap,
		Info: &lehrpb.VersionInfo{
			Author:            c.author,
			Message:           req.GetMessage(),
			Source:            lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT,
			TransportIdentity: c.transport,
		},
		RequestID:  req.GetRequestId(),
		Goals:      s.goals(existing(ns, create), lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT),
		GoalReason: "publish",
	}, req.GetExpectedVersion(), ns.GetLatestVersion())
	if err != nil {
		return nil, invalidOn(s.apiError(ctx, err), "properties")
	}
	s.countPublish("snapshot")
	s.log.Info("control: published", "namespace", info.GetNamespace(), "version", info.GetSeq(),
		"author", info.GetAuthor(), "properties", info.GetPropertyCount(), "bytes", info.GetSizeBytes())
	return &lehrpb.PublishResponse{Version: info}, nil
}

// Patch sets and deletes keys against a stated base version. A base that is
// not the latest version fails with FAILED_PRECONDITION/STALE_VERSION naming
// the latest; the patch is never merged onto a newer version.
func (s *Service) Patch(ctx context.Context, req *lehrpb.PatchRequest) (_ *lehrpb.PatchResponse, err error) {
	defer s.track(ctx, "Patch", time.Now(), &err)
	_, _, nerr := names.Namespace(req.GetNamespace())
	if nerr != nil {
		return nil, nameError("namespace", nerr)
	}
	if err := userNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if err := s.checkRate(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	base := req.GetBaseVersion()
	if base == 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "base_version",
			"base_version is required: the version the patch was written against (Get returns it)")
	}
	if len(req.GetSet()) == 0 && len(req.GetDelete()) == 0 {
		return nil, invalid(apierror.ReasonEmptyPatch, "set", "the patch sets and deletes nothing; give at least one key to set or delete")
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	for i, k := range req.GetDelete() {
		if err := names.Key(k); err != nil {
			return nil, nameError(propField("delete", i, ""), err)
		}
	}
	// Duplicates across set and delete, named by their second occurrence.
	seen := make(map[string]bool, len(req.GetSet())+len(req.GetDelete()))
	for i, p := range req.GetSet() {
		if seen[p.GetKey()] {
			return nil, invalid(apierror.ReasonDuplicateKey, propField("set", i, "key"), "key %q appears more than once in the patch", p.GetKey())
		}
		seen[p.GetKey()] = true
	}
	for i, k := range req.GetDelete() {
		if seen[k] {
			return nil, invalid(apierror.ReasonDuplicateKey, propField("delete", i, ""), "key %q appears more than once in the patch", k)
		}
		seen[k] = true
	}
	dom, ns, err := s.domainAndNamespace(ctx, req.GetNamespace(), "namespace")
	if err != nil {
		return nil, err
	}
	limits := validate.ForDomain(dom.GetQuotas())
	set, err := checkProps("set", req.GetSet(), limits)
	if err != nil {
		return nil, err
	}
	if ns == nil {
		return nil, withField(s.apiError(ctx, &store.NotFoundError{What: "namespace", Name: req.GetNamespace()}), "namespace")
	}
	latest := ns.GetLatestVersion()
	// A stale base with a request_id may be a retry of a patch that did
	// commit (its response was lost) before other versions came on top:
	// it is answered with its own version.
	if base < latest && req.GetRequestId() != "" {
		info, ok, err := s.st.Request(ctx, req.GetNamespace(), req.GetRequestId())
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		if ok {
			return &lehrpb.PatchResponse{Version: info}, nil
		}
	}
	if base != latest {
		return nil, staleError(req.GetNamespace(), "base_version", "base version", base, latest)
	}
	_, baseSnap, err := s.st.Content(ctx, req.GetNamespace(), base)
	if err != nil {
		var nf *store.NotFoundError
		if errors.As(err, &nf) && nf.What == "version" {
			return nil, staleError(req.GetNamespace(), "base_version", "base version", base, latest)
		}
		return nil, err
	}
	next, err := baseSnap.Apply(content.Patch{Set: set, Delete: req.GetDelete()})
	if err != nil {
		var ke *content.KeyError
		if errors.As(err, &ke) && errors.Is(err, content.ErrMissingKey) {
			return nil, invalid(apierror.ReasonMissingKey, propField("delete", indexOf(req.GetDelete(), ke.Key), ""),
				"cannot delete key %q: it is not in base version %d", ke.Key, base)
		}
		return nil, fmt.Errorf("apply patch to %s@%d: %w", req.GetNamespace(), base, err)
	}
	if v := validate.Snapshot(next, limits); v != nil {
		return nil, violationError("set", v)
	}
	if err := s.runValidators(ctx, ns, set, keyFields("set", set)); err != nil {
		return nil, err
	}
	c := s.attribute(ctx, req.GetAuthor())
	info, err := s.commitVersion(ctx, s.st.Commit, store.Commit{
		Namespace:      req.GetNamespace(),
		Limits:         s.domainLimits(dom),
		Kind:           ns.GetKind(),
		ExpectedLatest: base,
		Content:        next,
		Info: &lehrpb.VersionInfo{
			Author:            c.author,
			Message:           req.GetMessage(),
			Source:            lehrpb.VersionSource_VERSION_SOURCE_PATCH,
			TransportIdentity: c.transport,
		},
		RequestID:  req.GetRequestId(),
		Goals:      s.goals(ns, lehrpb.VersionSource_VERSION_SOURCE_PATCH),
		GoalReason: "patch",
	})
	if err != nil {
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			return nil, staleError(req.GetNamespace(), "base_version", "base version", base, ce.Current)
		}
		return nil, invalidOn(s.apiError(ctx, err), "set")
	}
	s.countPublish("patch")
	s.log.Info("control: patched", "namespace", info.GetNamespace(), "version", info.GetSeq(), "base", base,
		"author", info.GetAuthor(), "set", len(set), "deleted", len(req.GetDelete()))
	return &lehrpb.PatchResponse{Version: info}, nil
}

// Rollback republishes an older version's content as a new version. The
// content is not validated again: it was accepted when first published, and
// a rollback must not be blocked by a quota lowered since — nor by the
// domain's stored-bytes quota, its publish rate (it may overdraw its
// bucket by a burst) or the store's high-water mark: it is the safety path
// (store.DomainLimits).
func (s *Service) Rollback(ctx context.Context, req *lehrpb.RollbackRequest) (_ *lehrpb.RollbackResponse, err error) {
	defer s.track(ctx, "Rollback", time.Now(), &err)
	_, _, nerr := names.Namespace(req.GetNamespace())
	if nerr != nil {
		return nil, nameError("namespace", nerr)
	}
	if err := userNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	to := req.GetToVersion()
	if to == 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "to_version", "to_version is required: the version whose content to republish")
	}
	if err := checkAudit(ctx, req.GetAuthor(), req.GetMessage()); err != nil {
		return nil, err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	dom, ns, err := s.domainAndNamespace(ctx, req.GetNamespace(), "namespace")
	if err != nil {
		return nil, err
	}
	if ns == nil {
		return nil, withField(s.apiError(ctx, &store.NotFoundError{What: "namespace", Name: req.GetNamespace()}), "namespace")
	}
	_, snap, err := s.st.Content(ctx, req.GetNamespace(), to)
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "to_version")
	}
	c := s.attribute(ctx, req.GetAuthor())
	info, err := s.commitLatest(ctx, store.Commit{
		Namespace: req.GetNamespace(),
		Limits:    s.domainLimits(dom),
		Kind:      ns.GetKind(),
		Content:   snap,
		Info: &lehrpb.VersionInfo{
			Author:            c.author,
			Message:           req.GetMessage(),
			Source:            lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK,
			RollbackOf:        to,
			TransportIdentity: c.transport,
		},
		RequestID:  req.GetRequestId(),
		Goals:      s.goals(ns, lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK),
		GoalReason: fmt.Sprintf("rollback to %d", to),
	}, req.GetExpectedVersion(), ns.GetLatestVersion())
	if err != nil {
		return nil, invalidOn(s.apiError(ctx, err), "to_version")
	}
	s.countPublish("rollback")
	s.log.Info("control: rolled back", "namespace", info.GetNamespace(), "version", info.GetSeq(),
		"to", to, "author", info.GetAuthor())
	return &lehrpb.RollbackResponse{Version: info}, nil
}

// commitLatest commits c. With expected != 0 the commit is a
// compare-and-swap against it (a conflict is STALE_VERSION naming the
// current version); otherwise it goes on top of whatever version is latest
// (the store's optimistic rounds rebase it; nothing here retries).
func (s *Service) commitLatest(ctx context.Context, c store.Commit, expected, latest uint64) (*lehrpb.VersionInfo, error) {
	if expected != 0 {
		c.ExpectedLatest = expected
	} else {
		c.ExpectedLatest, c.Rebase = latest, true
	}
	info, err := s.commitVersion(ctx, s.st.Commit, c)
	var ce *store.ConflictError
	if errors.As(err, &ce) {
		return nil, staleError(c.Namespace, "expected_version", "expected version", expected, ce.Current)
	}
	return info, err
}

// namespaceForPublish returns the namespace a publish goes to and whether
// the publish must create it. A new namespace counts against the domain's
// max_namespaces quota.
func (s *Service) namespaceForPublish(ctx context.Context, dom *lehrpb.Domain, ns *lehrpb.Namespace, name string, kind lehrpb.NamespaceKind) (*lehrpb.Namespace, bool, error) {
	if ns == nil {
		if err := s.checkNamespaceQuota(ctx, dom); err != nil {
			return nil, false, err
		}
		if kind == lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
			kind = s.kind
		}
		return &lehrpb.Namespace{Name: name, Kind: kind}, true, nil
	}
	if kind != lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED && kind != ns.GetKind() {
		return nil, false, apierror.New(codes.FailedPrecondition, apierror.ReasonKindMismatch, "kind",
			"namespace %s is of kind %s, not %s; omit kind or use the namespace's kind", name, ns.GetKind(), kind)
	}
	return ns, false, nil
}

// checkNamespaceQuota fails if the domain may not hold one more namespace.
// Two concurrent creations may both pass; the quota is a guard rail, not an
// exact count.
func (s *Service) checkNamespaceQuota(ctx context.Context, dom *lehrpb.Domain) error {
	max := s.effectiveQuotas(dom.GetQuotas()).GetMaxNamespaces()
	if max <= 0 {
		return nil
	}
	n, err := s.st.CountNamespaces(ctx, dom.GetName())
	if err != nil {
		return err
	}
	if n >= int(max) {
		return apierror.New(codes.ResourceExhausted, apierror.ReasonTooManyNamespaces, "namespace",
			"domain %s already holds %d namespaces; its quota allows %d (quotas.max_namespaces): publish into an existing namespace, or ask a fleet admin to raise it ('lehr domain update %s --max-namespaces N')", dom.GetName(), n, max, dom.GetName()).
			WithLimit("%d namespaces", max)
	}
	return nil
}

// domainAndNamespace reads namespace name (nil if absent) and its domain,
// in one etcd request; a missing domain is NOT_FOUND on field.
func (s *Service) domainAndNamespace(ctx context.Context, name, field string) (*lehrpb.Domain, *lehrpb.Namespace, error) {
	d, ns, err := s.st.DomainAndNamespace(ctx, name)
	var nf *store.NotFoundError
	if errors.As(err, &nf) {
		return nil, nil, domainNotFound(nf.Name, field)
	}
	return d, ns, err
}

// domainNotFound is the error for a missing domain, on field.
func domainNotFound(name, field string) error {
	return apierror.New(codes.NotFound, apierror.ReasonNotFound, field,
		"domain %q does not exist; create it first (lehr domain create %s)", name, name)
}

// domainOf reads a domain, reporting a missing one on field.
func (s *Service) domainOf(ctx context.Context, name, field string) (*lehrpb.Domain, error) {
	d, err := s.st.GetDomain(ctx, name)
	var nf *store.NotFoundError
	if errors.As(err, &nf) {
		return nil, domainNotFound(name, field)
	}
	return d, err
}

// checkProps validates request properties on their own: key grammar, value
// and content type, duplicates. Errors name list[i] and the part at fault.
func checkProps(list string, ps []*lehrpb.Property, l validate.Limits) ([]content.Property, error) {
	props := content.FromProto(ps)
	first := make(map[string]int, len(props))
	for i, p := range props {
		if err := names.Key(p.Key); err != nil {
			return nil, nameError(propField(list, i, "key"), err)
		}
		if v := validate.Property(p, l); v != nil {
			return nil, violationError(propField(list, i, v.Field), v)
		}
		if j, dup := first[p.Key]; dup {
			return nil, invalid(apierror.ReasonDuplicateKey, propField(list, i, "key"),
				"key %q appears more than once (first at %s)", p.Key, propField(list, j, ""))
		}
		first[p.Key] = i
	}
	return props, nil
}

// checkSnapshot checks the properties of a complete version given in
// list (checkProps) and the version they make against the domain's
// limits, and returns both.
func checkSnapshot(list string, ps []*lehrpb.Property, limits validate.Limits) ([]content.Property, content.Snapshot, error) {
	props, err := checkProps(list, ps, limits)
	if err != nil {
		return nil, content.Snapshot{}, err
	}
	snap, err := content.New(props)
	if err != nil {
		return nil, content.Snapshot{}, fmt.Errorf("build snapshot: %w", err) // unreachable: checkProps rejects duplicates
	}
	if v := validate.Snapshot(snap, limits); v != nil {
		return nil, content.Snapshot{}, violationError(list, v)
	}
	return props, snap, nil
}

// checkKind rejects values outside the NamespaceKind enum.
func checkKind(field string, k lehrpb.NamespaceKind) error {
	if _, ok := lehrpb.NamespaceKind_name[int32(k)]; !ok {
		return invalid(apierror.ReasonInvalidArgument, field, "unknown namespace kind %d; want NAMESPACE_KIND_CONFIG or NAMESPACE_KIND_POLICY", k)
	}
	return nil
}

// keyFields maps a key back to its request field in list.
func keyFields(list string, props []content.Property) func(key, sub string) string {
	return func(key, sub string) string {
		for i, p := range props {
			if p.Key == key {
				return propField(list, i, sub)
			}
		}
		return list
	}
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return 0
}

// existing returns ns unless the publish creates it.
func existing(ns *lehrpb.Namespace, create bool) *lehrpb.Namespace {
	if create {
		return nil
	}
	return ns
}

// withField sets the field of a NotFound, AlreadyExists or InvalidArgument
// error (store.ErrInvalid) that names none. Use it where field names the
// resource the store call was about.
func withField(e *apierror.Error, field string) *apierror.Error {
	if e.Field == "" && (e.Code == codes.NotFound || e.Code == codes.AlreadyExists || e.Code == codes.InvalidArgument) {
		e.Field = field
	}
	return e
}

// invalidOn sets the field of an InvalidArgument error (store.ErrInvalid)
// that names none, leaving other errors alone. Use it where the store
// rejects content rather than a name, e.g. a value larger than it holds.
func invalidOn(e *apierror.Error, field string) *apierror.Error {
	if e.Field == "" && e.Code == codes.InvalidArgument {
		e.Field = field
	}
	return e
}

// CompactNamespace removes old versions of a namespace now, whatever their
// age (store.CompactHistory): what a domain's admin does to free its
// stored bytes. The ACL interceptor has let only the domain's admins
// through.
func (s *Service) CompactNamespace(ctx context.Context, req *lehrpb.CompactNamespaceRequest) (_ *lehrpb.CompactNamespaceResponse, err error) {
	defer s.track(ctx, "CompactNamespace", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetName()); err != nil {
		return nil, nameError("name", err)
	}
	if k := req.GetKeepLast(); k < 1 {
		return nil, invalid(apierror.ReasonInvalidArgument, "keep_last",
			"keep_last is %d; keep at least 1 version (the latest is never removed, nor a version some zone's goal names)", k)
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	removed, err := s.st.CompactHistory(ctx, req.GetName(), int(req.GetKeepLast()))
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	ns, err := s.st.GetNamespace(ctx, req.GetName())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.log.Info("control: compacted a namespace's history", "namespace", req.GetName(), "keep_last", req.GetKeepLast(),
		"versions_removed", removed, "stored_bytes", ns.GetStoredBytes(), "by", s.attribute(ctx, "").author)
	withEtags(ns)
	return &lehrpb.CompactNamespaceResponse{VersionsRemoved: int32(removed), Namespace: ns}, nil
}
