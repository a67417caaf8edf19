package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// maxDescriptionBytes bounds a domain's description.
const maxDescriptionBytes = 1024

// CreateDomain registers a tenant with its quotas and ACL. created_by is
// the caller's certificate identity under mutual TLS, otherwise the author
// in the request's gRPC metadata (AuthorMetadataKey), otherwise
// "anonymous".
//
// The ACL is stored and returned but NOT enforced yet: anyone who can reach
// the API may publish to any domain until authentication lands.
func (s *Service) CreateDomain(ctx context.Context, req *lehrpb.CreateDomainRequest) (_ *lehrpb.Domain, err error) {
	defer s.track(ctx, "CreateDomain", time.Now(), &err)
	d := req.GetDomain()
	if d == nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "domain", "domain is required")
	}
	if err := names.Domain(d.GetName()); err != nil {
		return nil, nameError("domain.name", err)
	}
	if n := len(d.GetDescription()); n > maxDescriptionBytes {
		return nil, invalid(apierror.ReasonInvalidArgument, "domain.description",
			"description is %d bytes; at most %d allowed", n, maxDescriptionBytes).WithLimit("%d bytes", maxDescriptionBytes)
	}
	if err := checkQuotas(d.GetQuotas()); err != nil {
		return nil, err
	}
	if err := s.checkQuotaRaise(ctx, "domain.quotas", d.GetQuotas()); err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, "", ""); err != nil {
		return nil, err
	}
	if err := checkACL("domain.acl", d.GetAcl()); err != nil {
		return nil, err
	}
	in := proto.Clone(d).(*lehrpb.Domain)
	in.CreateTime, in.Usage, in.EffectiveQuotas, in.Etag = nil, nil, nil, ""
	in.CreatedBy = s.attribute(ctx, "").author
	// A user who creates a domain without admins administers it: a domain
	// made over mutual TLS is never open by accident.
	if user, ok := s.userOf(ctx); ok && len(in.GetAcl().GetAdmins()) == 0 {
		if in.Acl == nil {
			in.Acl = &lehrpb.Acl{}
		}
		in.Acl.Admins = []string{user}
	}
	if err := s.admitContent(in); err != nil {
		return nil, err
	}
	out, err := s.st.CreateDomain(ctx, in)
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, apierror.New(codes.AlreadyExists, apierror.ReasonAlreadyExists, "domain.name", "domain %q already exists", in.GetName())
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("control: created domain", "domain", out.GetName(), "by", out.GetCreatedBy())
	out.EffectiveQuotas = s.effectiveQuotas(out.GetQuotas())
	return out, nil
}

// checkQuotas rejects negative quotas; zero means the server default and
// values above the hard caps are clamped to them when applied.
func checkQuotas(q *lehrpb.Quotas) error {
	if q == nil {
		return nil
	}
	neg := func(field string, bad bool) error {
		if bad {
			return invalid(apierror.ReasonInvalidArgument, "domain.quotas."+field, "%s must not be negative (0 means the server default)", field)
		}
		return nil
	}
	if r := q.GetPublishesPerSecond(); math.IsNaN(r) || math.IsInf(r, 0) {
		return invalid(apierror.ReasonInvalidArgument, "domain.quotas.publishes_per_second",
			"publishes_per_second is %v; want a finite number >= 0 (0 means the server default)", r)
	}
	for _, c := range []error{
		neg("max_namespace_bytes", q.GetMaxNamespaceBytes() < 0),
		neg("max_properties", q.GetMaxProperties() < 0),
		neg("max_value_bytes", q.GetMaxValueBytes() < 0),
		neg("publishes_per_second", q.GetPublishesPerSecond() < 0),
		neg("publish_burst", q.GetPublishBurst() < 0),
		neg("outbound_bytes_per_second", q.GetOutboundBytesPerSecond() < 0),
		neg("max_subscriptions", q.GetMaxSubscriptions() < 0),
		neg("max_namespaces", q.GetMaxNamespaces() < 0),
		neg("max_stored_bytes", q.GetMaxStoredBytes() < 0),
		neg("publish_bytes_per_second", q.GetPublishBytesPerSecond() < 0),
	} {
		if c != nil {
			return c
		}
	}
	return nil
}

// UpdateDomain replaces the fields of a domain its update mask names. The
// ACL interceptor has let only the domain's admins through.
func (s *Service) UpdateDomain(ctx context.Context, req *lehrpb.UpdateDomainRequest) (_ *lehrpb.Domain, err error) {
	defer s.track(ctx, "UpdateDomain", time.Now(), &err)
	d := req.GetDomain()
	if err := names.Domain(d.GetName()); err != nil {
		return nil, nameError("domain.name", err)
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "update_mask", "update_mask is required: name the fields to replace, of description, quotas and acl")
	}
	if len(paths) > 3 { // description, quotas and acl, each once
		return nil, tooMany("update_mask.paths", len(paths), 3)
	}
	for i, p := range paths {
		switch p {
		case "description":
			if n := len(d.GetDescription()); n > maxDescriptionBytes {
				return nil, invalid(apierror.ReasonInvalidArgument, "domain.description",
					"description is %d bytes; at most %d allowed", n, maxDescriptionBytes).WithLimit("%d bytes", maxDescriptionBytes)
			}
		case "quotas":
			if err := checkQuotas(d.GetQuotas()); err != nil {
				return nil, err
			}
			if err := s.checkQuotaRaise(ctx, "domain.quotas", d.GetQuotas()); err != nil {
				return nil, err
			}
		case "acl":
			if err := checkACL("domain.acl", d.GetAcl()); err != nil {
				return nil, err
			}
		default:
			return nil, invalid(apierror.ReasonInvalidArgument, fmt.Sprintf("update_mask.paths[%d]", i), "%q cannot be updated; want description, quotas or acl", p)
		}
	}
	if err := checkAudit(ctx, "", ""); err != nil {
		return nil, err
	}
	out, err := s.st.UpdateDomain(ctx, d.GetName(), func(cur *lehrpb.Domain) error {
		for _, p := range paths {
			switch p {
			case "description":
				cur.Description = d.GetDescription()
			case "quotas":
				cur.Quotas = proto.CloneOf(d.GetQuotas())
			case "acl":
				cur.Acl = proto.CloneOf(d.GetAcl())
			}
		}
		return nil
	})
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "domain.name")
	}
	s.log.Info("control: updated domain", "domain", out.GetName(), "fields", paths, "by", s.attribute(ctx, "").author)
	return s.withUsage(ctx, out)
}

// GetDomain returns a domain.
func (s *Service) GetDomain(ctx context.Context, req *lehrpb.GetDomainRequest) (_ *lehrpb.Domain, err error) {
	defer s.track(ctx, "GetDomain", time.Now(), &err)
	if err := names.Domain(req.GetName()); err != nil {
		return nil, nameError("name", err)
	}
	d, err := s.st.GetDomain(ctx, req.GetName())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	return s.withUsage(ctx, d)
}

// ListDomains lists domains by name, paged.
func (s *Service) ListDomains(ctx context.Context, req *lehrpb.ListDomainsRequest) (_ *lehrpb.ListDomainsResponse, err error) {
	defer s.track(ctx, "ListDomains", time.Now(), &err)
	size, err := pageSize(req.GetPageSize(), defaultListPage)
	if err != nil {
		return nil, err
	}
	after, err := listToken("d", req.GetPageToken())
	if err != nil {
		return nil, err
	}
	ds, err := s.st.ListDomains(ctx, after, size+1)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		d.EffectiveQuotas = s.effectiveQuotas(d.GetQuotas())
	}
	resp := &lehrpb.ListDomainsResponse{Domains: ds}
	if len(ds) > size {
		resp.Domains = ds[:size]
		resp.NextPageToken = encodeToken("d", ds[size-1].GetName())
	}
	return resp, nil
}

// CreateNamespace creates an empty namespace, typically to give it a JSON
// Schema before the first publish. The schema must build.
func (s *Service) CreateNamespace(ctx context.Context, req *lehrpb.CreateNamespaceRequest) (_ *lehrpb.Namespace, err error) {
	defer s.track(ctx, "CreateNamespace", time.Now(), &err)
	ns := req.GetNamespace()
	if ns == nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "namespace", "namespace is required")
	}
	dname, _, nerr := names.Namespace(ns.GetName())
	if nerr != nil {
		return nil, nameError("namespace.name", nerr)
	}
	if err := userNamespace("namespace.name", ns.GetName()); err != nil {
		return nil, err
	}
	if err := checkKind("namespace.kind", ns.GetKind()); err != nil {
		return nil, err
	}
	in := &lehrpb.Namespace{Name: ns.GetName(), Kind: ns.GetKind(), JsonSchema: ns.GetJsonSchema()}
	if in.Kind == lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
		in.Kind = s.kind
	}
	if _, v := s.registry.For(in); v != nil {
		return nil, violationError("namespace.json_schema", v)
	}
	dom, err := s.domainOf(ctx, dname, "namespace.name")
	if err != nil {
		return nil, err
	}
	if err := s.checkNamespaceQuota(ctx, dom); err != nil {
		return nil, withField(s.apiError(ctx, err), "namespace.name")
	}
	if err := s.admitContent(in); err != nil {
		return nil, err
	}
	out, err := s.st.CreateNamespace(ctx, in)
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, apierror.New(codes.AlreadyExists, apierror.ReasonAlreadyExists, "namespace.name", "namespace %q already exists", in.GetName())
	}
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "namespace.name")
	}
	s.log.Info("control: created namespace", "namespace", out.GetName(), "kind", out.GetKind().String(),
		"schema", out.GetJsonSchema() != "")
	withEtags(out)
	return out, nil
}

// GetNamespace returns a namespace's head.
func (s *Service) GetNamespace(ctx context.Context, req *lehrpb.GetNamespaceRequest) (_ *lehrpb.Namespace, err error) {
	defer s.track(ctx, "GetNamespace", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetName()); err != nil {
		return nil, nameError("name", err)
	}
	ns, err := s.st.GetNamespace(ctx, req.GetName())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	withEtags(ns)
	return ns, nil
}

// ListNamespaces lists a domain's namespaces by name, paged.
func (s *Service) ListNamespaces(ctx context.Context, req *lehrpb.ListNamespacesRequest) (_ *lehrpb.ListNamespacesResponse, err error) {
	defer s.track(ctx, "ListNamespaces", time.Now(), &err)
	if err := names.Domain(req.GetDomain()); err != nil {
		return nil, nameError("domain", err)
	}
	size, err := pageSize(req.GetPageSize(), defaultListPage)
	if err != nil {
		return nil, err
	}
	after, err := listToken("n", req.GetPageToken())
	if err != nil {
		return nil, err
	}
	if _, err := s.domainOf(ctx, req.GetDomain(), "domain"); err != nil {
		return nil, err
	}
	nss, err := s.st.ListNamespaces(ctx, req.GetDomain(), after, size+1)
	if err != nil {
		return nil, err
	}
	withEtags(nss...)
	resp := &lehrpb.ListNamespacesResponse{Namespaces: nss}
	if len(nss) > size {
		resp.Namespaces = nss[:size]
		resp.NextPageToken = encodeToken("n", nss[size-1].GetName())
	}
	return resp, nil
}

// listToken decodes a list page token ("" is the first page).
func listToken(kind, tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	after, err := decodeToken(kind, tok)
	if err != nil || after == "" {
		return "", invalid(apierror.ReasonInvalidArgument, "page_token", "page_token is not one this API returned for this list")
	}
	return after, nil
}
