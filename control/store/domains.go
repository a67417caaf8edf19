package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Listing limits: a limit <= 0 means defaultListLimit, and no call returns
// more than maxListLimit items.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

func listLimit(limit int) int64 {
	switch {
	case limit <= 0:
		return defaultListLimit
	case limit > maxListLimit:
		return maxListLimit
	}
	return int64(limit)
}

// CreateDomain stores d, setting its create_time. ErrAlreadyExists if taken.
func (s *Store) CreateDomain(ctx context.Context, d *lehrpb.Domain) (*lehrpb.Domain, error) {
	if err := names.Domain(d.GetName()); err != nil {
		return nil, fmt.Errorf("store: create domain: %w: %w", ErrInvalid, err)
	}
	d = proto.CloneOf(d)
	d.CreateTime = timestamppb.New(s.opts.Now())
	d.Etag = ""
	b, err := encode(d)
	if err != nil {
		return nil, fmt.Errorf("store: create domain %s: %w", d.GetName(), err)
	}
	key := s.lay.domain(d.GetName())
	resp, err := s.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
	if err != nil {
		return nil, fmt.Errorf("store: create domain %s: %w", d.GetName(), err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("store: create domain %s: %w", d.GetName(), ErrAlreadyExists)
	}
	d.Etag = domainEtag(resp.Header.Revision)
	return d, nil
}

// domainEtag is the etag of a domain record of mod revision rev
// (Domain.etag): every change of the record moves it, and it never comes
// back — not even for a domain deleted and created again.
func domainEtag(rev int64) string { return fmt.Sprintf("r%d", rev) }

// GetDomain returns a domain or a *NotFoundError.
func (s *Store) GetDomain(ctx context.Context, name string) (*lehrpb.Domain, error) {
	if err := names.Domain(name); err != nil {
		return nil, fmt.Errorf("store: get domain: %w: %w", ErrInvalid, err)
	}
	key := s.lay.domain(name)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: get domain %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &NotFoundError{What: "domain", Name: name}
	}
	d := new(lehrpb.Domain)
	if err := decode(key, resp.Kvs[0].Value, d); err != nil {
		return nil, fmt.Errorf("store: get domain %s: %w", name, err)
	}
	d.Etag = domainEtag(resp.Kvs[0].ModRevision)
	return d, nil
}

// UpdateDomain applies update to domain name as stored and stores the
// result, unless another writer changed the domain meanwhile, in which
// case it reads and applies again (update runs once per round; after
// maxCommitAttempts lost rounds the error wraps ErrContention). update may
// refuse with an error, which is returned as is; it must not change the
// name or create_time. A missing domain is a *NotFoundError.
func (s *Store) UpdateDomain(ctx context.Context, name string, update func(d *lehrpb.Domain) error) (*lehrpb.Domain, error) {
	if err := names.Domain(name); err != nil {
		return nil, fmt.Errorf("store: update domain: %w: %w", ErrInvalid, err)
	}
	key := s.lay.domain(name)
	var updated *lehrpb.Domain
	err := optimistic(ctx, "update domain "+name, func(int) (bool, error) {
		resp, err := s.get(ctx, key)
		if err != nil {
			return false, fmt.Errorf("store: update domain %s: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			return false, &NotFoundError{What: "domain", Name: name}
		}
		d := new(lehrpb.Domain)
		if err := decode(key, resp.Kvs[0].Value, d); err != nil {
			return false, fmt.Errorf("store: update domain %s: %w", name, err)
		}
		if err := update(d); err != nil {
			return false, err
		}
		d.Etag = ""
		b, err := encode(d)
		if err != nil {
			return false, fmt.Errorf("store: update domain %s: %w", name, err)
		}
		tr, err := s.txn(ctx,
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)},
			[]clientv3.Op{clientv3.OpPut(key, string(b))}, nil)
		if err != nil {
			return false, fmt.Errorf("store: update domain %s: %w", name, err)
		}
		if tr.Succeeded {
			updated = d
			updated.Etag = domainEtag(tr.Header.Revision)
		}
		return tr.Succeeded, nil
	})
	if err != nil {
		return nil, err
	}
	return updated, nil
}

// ListDomains returns up to limit domains whose names sort after "after".
// A limit <= 0 means 100; at most 1000 are returned.
func (s *Store) ListDomains(ctx context.Context, after string, limit int) ([]*lehrpb.Domain, error) {
	from := s.lay.domainsPrefix()
	if after != "" {
		from = afterKey(s.lay.domain(after))
	}
	resp, err := s.get(ctx, from, clientv3.WithRange(prefixEnd(s.lay.domainsPrefix())), clientv3.WithLimit(listLimit(limit)))
	if err != nil {
		return nil, fmt.Errorf("store: list domains: %w", err)
	}
	out := make([]*lehrpb.Domain, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d := new(lehrpb.Domain)
		if err := decode(string(kv.Key), kv.Value, d); err != nil {
			return nil, fmt.Errorf("store: list domains: %w", err)
		}
		d.Etag = domainEtag(kv.ModRevision)
		out = append(out, d)
	}
	return out, nil
}

// CreateNamespace creates an empty namespace (latest_version 0) with the
// given name, kind and json_schema. The domain must exist (*NotFoundError
// with What "domain"); ErrAlreadyExists if it exists.
func (s *Store) CreateNamespace(ctx context.Context, ns *lehrpb.Namespace) (*lehrpb.Namespace, error) {
	domain, _, err := names.Namespace(ns.GetName())
	if err != nil {
		return nil, fmt.Errorf("store: create namespace: %w: %w", ErrInvalid, err)
	}
	head := &lehrpb.Namespace{
		Name:       ns.GetName(),
		Kind:       ns.GetKind(),
		JsonSchema: ns.GetJsonSchema(),
		CreateTime: timestamppb.New(s.opts.Now()),
	}
	b, err := encode(head)
	if err != nil {
		return nil, fmt.Errorf("store: create namespace %s: %w", ns.GetName(), err)
	}
	dkey, nkey := s.lay.domain(domain), s.lay.nsmeta(head.Name)
	resp, err := s.txn(ctx,
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(dkey), ">", 0),
			clientv3.Compare(clientv3.CreateRevision(nkey), "=", 0),
		},
		[]clientv3.Op{clientv3.OpPut(nkey, string(b))},
		[]clientv3.Op{clientv3.OpGet(dkey, clientv3.WithCountOnly())})
	if err != nil {
		return nil, fmt.Errorf("store: create namespace %s: %w", head.Name, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return nil, &NotFoundError{What: "domain", Name: domain}
		}
		return nil, fmt.Errorf("store: create namespace %s: %w", head.Name, ErrAlreadyExists)
	}
	return head, nil
}

// GetNamespace returns a namespace's head or a *NotFoundError.
func (s *Store) GetNamespace(ctx context.Context, name string) (*lehrpb.Namespace, error) {
	if _, _, err := names.Namespace(name); err != nil {
		return nil, fmt.Errorf("store: get namespace: %w: %w", ErrInvalid, err)
	}
	head, _, _, err := s.head(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("store: get namespace %s: %w", name, err)
	}
	if head == nil {
		return nil, &NotFoundError{What: "namespace", Name: name}
	}
	return head, nil
}

// DomainAndNamespace reads a namespace and its domain in one request: the
// domain (a *NotFoundError if there is none) and the namespace, nil if
// there is none. A publish needs both before it commits. On a single
// member (Options.SingleMember) the read skips the quorum round.
func (s *Store) DomainAndNamespace(ctx context.Context, ns string) (*lehrpb.Domain, *lehrpb.Namespace, error) {
	domain, _, err := names.Namespace(ns)
	if err != nil {
		return nil, nil, fmt.Errorf("store: get namespace: %w: %w", ErrInvalid, err)
	}
	dkey, hkey := s.lay.domain(domain), s.lay.nsmeta(ns)
	var opts []clientv3.OpOption
	if s.opts.SingleMember {
		opts = append(opts, clientv3.WithSerializable())
	}
	rs, _, err := s.readAt(ctx, clientv3.OpGet(dkey, opts...), clientv3.OpGet(hkey, opts...))
	if err != nil {
		return nil, nil, fmt.Errorf("store: get namespace %s: %w", ns, err)
	}
	if len(rs[0].Kvs) == 0 {
		return nil, nil, &NotFoundError{What: "domain", Name: domain}
	}
	d := new(lehrpb.Domain)
	if err := decode(dkey, rs[0].Kvs[0].Value, d); err != nil {
		return nil, nil, fmt.Errorf("store: get domain %s: %w", domain, err)
	}
	if len(rs[1].Kvs) == 0 {
		return d, nil, nil
	}
	h := new(lehrpb.Namespace)
	if err := decode(hkey, rs[1].Kvs[0].Value, h); err != nil {
		return nil, nil, fmt.Errorf("store: get namespace %s: %w", ns, err)
	}
	return d, h, nil
}

// Head returns ns's head (nil if it has none) and the revision it was
// read at (a RolloutStep's HeadRev).
func (s *Store) Head(ctx context.Context, ns string) (*lehrpb.Namespace, int64, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, 0, fmt.Errorf("store: head: %w: %w", ErrInvalid, err)
	}
	h, _, rev, err := s.head(ctx, ns)
	if err != nil {
		return nil, 0, fmt.Errorf("store: head of %s: %w", ns, err)
	}
	return h, rev, nil
}

// head reads a namespace head: nil if absent, else the head, its mod
// revision and the revision of the read.
func (s *Store) head(ctx context.Context, ns string) (*lehrpb.Namespace, int64, int64, error) {
	key := s.lay.nsmeta(ns)
	resp, err := s.get(ctx, key)
	if err != nil {
		return nil, 0, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, resp.Header.Revision, nil
	}
	h := new(lehrpb.Namespace)
	if err := decode(key, resp.Kvs[0].Value, h); err != nil {
		return nil, 0, 0, err
	}
	return h, resp.Kvs[0].ModRevision, resp.Header.Revision, nil
}

// ListNamespaces returns up to limit namespaces of a domain whose full names
// sort after "after". A limit <= 0 means 100; at most 1000 are returned.
func (s *Store) ListNamespaces(ctx context.Context, domain, after string, limit int) ([]*lehrpb.Namespace, error) {
	if err := names.Domain(domain); err != nil {
		return nil, fmt.Errorf("store: list namespaces: %w: %w", ErrInvalid, err)
	}
	prefix := s.lay.nsmetaDomain(domain)
	from := prefix
	if k := afterKey(s.lay.nsmeta(after)); after != "" && k > from {
		from = k
	}
	resp, err := s.get(ctx, from, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(listLimit(limit)))
	if err != nil {
		return nil, fmt.Errorf("store: list namespaces of %s: %w", domain, err)
	}
	out := make([]*lehrpb.Namespace, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n := new(lehrpb.Namespace)
		if err := decode(string(kv.Key), kv.Value, n); err != nil {
			return nil, fmt.Errorf("store: list namespaces of %s: %w", domain, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// CountNamespaces returns how many namespaces a domain holds.
func (s *Store) CountNamespaces(ctx context.Context, domain string) (int, error) {
	if err := names.Domain(domain); err != nil {
		return 0, fmt.Errorf("store: count namespaces: %w: %w", ErrInvalid, err)
	}
	resp, err := s.get(ctx, s.lay.nsmetaDomain(domain), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: count namespaces of %s: %w", domain, err)
	}
	return int(resp.Count), nil
}

// DomainUsage returns the bytes domain stores and the namespaces it
// holds, read at one revision (usage.go).
func (s *Store) DomainUsage(ctx context.Context, domain string) (storedBytes int64, namespaces int, err error) {
	if err := names.Domain(domain); err != nil {
		return 0, 0, fmt.Errorf("store: domain usage: %w: %w", ErrInvalid, err)
	}
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.usage(domain)),
		clientv3.OpGet(s.lay.nsmetaDomain(domain), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	if err != nil {
		return 0, 0, fmt.Errorf("store: usage of %s: %w", domain, err)
	}
	u, err := decodeUsage(rs[0])
	if err != nil {
		return 0, 0, fmt.Errorf("store: usage of %s: %w", domain, err)
	}
	return u.rec.GetStoredBytes(), int(rs[1].Count), nil
}

// DomainsStored returns every domain and the bytes each stores
// (DomainUsageRecord.stored_bytes; 0 for a domain that never stored
// anything), read at one revision: what "lehr store" shows.
func (s *Store) DomainsStored(ctx context.Context) ([]*lehrpb.Domain, map[string]int64, error) {
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.domainsPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.usagePrefix(), clientv3.WithPrefix()))
	if err != nil {
		return nil, nil, fmt.Errorf("store: domains stored: %w", err)
	}
	ds := make([]*lehrpb.Domain, 0, len(rs[0].Kvs))
	for _, kv := range rs[0].Kvs {
		d := new(lehrpb.Domain)
		if err := decode(string(kv.Key), kv.Value, d); err != nil {
			return nil, nil, fmt.Errorf("store: domains stored: %w", err)
		}
		ds = append(ds, d)
	}
	stored := make(map[string]int64, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		u := new(lehrpb.DomainUsageRecord)
		if err := decode(string(kv.Key), kv.Value, u); err != nil {
			return nil, nil, fmt.Errorf("store: domains stored: %w", err)
		}
		stored[strings.TrimPrefix(string(kv.Key), s.lay.usagePrefix())] = u.GetStoredBytes()
	}
	return ds, stored, nil
}
