package producer

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// listPageSize is the page size used when a List call collects every page.
const listPageSize = 500

// CreateDomain creates a domain. Name is required; quotas left zero take the
// server defaults. The returned Domain carries create_time and created_by.
func (c *Client) CreateDomain(ctx context.Context, d *lehrpb.Domain) (*lehrpb.Domain, error) {
	var out *lehrpb.Domain
	err := c.call(ctx, "create domain "+d.GetName(), func(ctx context.Context) (err error) {
		out, err = c.rpc.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: d})
		return err
	})
	return out, err
}

// UpdateDomain replaces the fields of domain d.Name that paths name
// ("description", "quotas", "acl") with d's. Only the domain's admins may
// (lehrpb.Acl).
func (c *Client) UpdateDomain(ctx context.Context, d *lehrpb.Domain, paths ...string) (*lehrpb.Domain, error) {
	var out *lehrpb.Domain
	err := c.call(ctx, "update domain "+d.GetName(), func(ctx context.Context) (err error) {
		out, err = c.rpc.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: d, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
		return err
	})
	return out, err
}

// GetDomain returns a domain, or an error matching ErrNotFound.
func (c *Client) GetDomain(ctx context.Context, name string) (*lehrpb.Domain, error) {
	var out *lehrpb.Domain
	err := c.call(ctx, "get domain "+name, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: name})
		return err
	})
	return out, err
}

// ListDomains returns every domain, sorted by name, reading as many pages as
// it takes.
func (c *Client) ListDomains(ctx context.Context) ([]*lehrpb.Domain, error) {
	var all []*lehrpb.Domain
	token := ""
	for {
		var resp *lehrpb.ListDomainsResponse
		err := c.call(ctx, "list domains", func(ctx context.Context) (err error) {
			resp, err = c.rpc.ListDomains(ctx, &lehrpb.ListDomainsRequest{PageSize: listPageSize, PageToken: token})
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetDomains()...)
		if token = resp.GetNextPageToken(); token == "" {
			return all, nil
		}
	}
}

// CreateNamespace creates an empty namespace ("domain/name") of the given
// kind, optionally with a JSON Schema that every JSON property must satisfy.
// Publishing creates namespaces on its own; create one explicitly to set a
// schema before the first version.
func (c *Client) CreateNamespace(ctx context.Context, ns *lehrpb.Namespace) (*lehrpb.Namespace, error) {
	var out *lehrpb.Namespace
	err := c.call(ctx, "create namespace "+ns.GetName(), func(ctx context.Context) (err error) {
		out, err = c.rpc.CreateNamespace(ctx, &lehrpb.CreateNamespaceRequest{Namespace: ns})
		return err
	})
	return out, err
}

// GetNamespace returns a namespace's head: kind, latest version and checksum,
// oldest kept version, size.
func (c *Client) GetNamespace(ctx context.Context, name string) (*lehrpb.Namespace, error) {
	var out *lehrpb.Namespace
	err := c.call(ctx, "get namespace "+name, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: name})
		return err
	})
	return out, err
}

// ListNamespaces returns every namespace of a domain, sorted by name.
func (c *Client) ListNamespaces(ctx context.Context, domain string) ([]*lehrpb.Namespace, error) {
	var all []*lehrpb.Namespace
	token := ""
	for {
		var resp *lehrpb.ListNamespacesResponse
		err := c.call(ctx, fmt.Sprintf("list namespaces of %s", domain), func(ctx context.Context) (err error) {
			resp, err = c.rpc.ListNamespaces(ctx, &lehrpb.ListNamespacesRequest{Domain: domain, PageSize: listPageSize, PageToken: token})
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetNamespaces()...)
		if token = resp.GetNextPageToken(); token == "" {
			return all, nil
		}
	}
}

// DeleteOptions are the conditions of a deletion (DeleteNamespace,
// DeleteDomain). The zero value deletes whatever the resource holds now,
// unless something stands in the way.
type DeleteOptions struct {
	// Etag, if set, deletes only the resource as it was read — its
	// Namespace.etag or Domain.etag; a newer one fails with Aborted
	// (ETAG_MISMATCH) and deletes nothing.
	Etag string
	// Force deletes a namespace even while hosts subscribe to it or a
	// rollout of it is in flight, and a domain with its namespaces; without
	// it those fail with FailedPrecondition (NAMESPACE_IN_USE,
	// ROLLOUT_IN_FLIGHT, DOMAIN_NOT_EMPTY) and delete nothing.
	Force bool
	// Message says why, for the audit log.
	Message string
}

// DeleteNamespace deletes namespace ns and everything of it: its versions,
// every zone's goal, its rollouts, policies, experiments and, for a
// policy, its preview namespace; its domain's stored bytes are credited
// back. Hosts that hold it keep their copy and are told it is NOT_FOUND.
// A namespace created again under the name continues its version numbers.
// Only the domain's admins (and fleet admins) may. Retries after an
// unavailable control are safe: the deletion carries one request id.
func (c *Client) DeleteNamespace(ctx context.Context, ns string, o DeleteOptions) error {
	id := newRequestID()
	return c.call(ctx, "delete namespace "+ns, func(ctx context.Context) error {
		_, err := c.rpc.DeleteNamespace(ctx, &lehrpb.DeleteNamespaceRequest{Name: ns, Etag: o.Etag, Force: o.Force, Message: o.Message, RequestId: id})
		return err
	})
}

// DeleteDomain deletes a domain; with o.Force its namespaces too (as
// DeleteNamespace does each). Only the domain's admins (and fleet admins)
// may.
func (c *Client) DeleteDomain(ctx context.Context, name string, o DeleteOptions) error {
	id := newRequestID()
	return c.call(ctx, "delete domain "+name, func(ctx context.Context) error {
		_, err := c.rpc.DeleteDomain(ctx, &lehrpb.DeleteDomainRequest{Name: name, Etag: o.Etag, Force: o.Force, Message: o.Message, RequestId: id})
		return err
	})
}
