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
