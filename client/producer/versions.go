package producer

import (
	"context"
	"fmt"
	"iter"
	"math"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Property is one key of a namespace: a path-like Key, the Value bytes and an
// optional ContentType ("application/json" values must parse as JSON,
// "text/*" values must be UTF-8).
type Property = content.Property

// Patch sets and deletes keys against a base version. A key may appear once
// across Set and Delete; every deleted key must exist in the base.
type Patch = content.Patch

// Change is one key that differs between two versions: Old is nil for an
// added key, New is nil for a removed one, both are set for a modified one.
type Change = content.Change

// Version is the content of one version of a namespace.
type Version struct {
	// Info is the version's metadata: seq, checksum, author, message, time,
	// parent, source.
	Info *lehrpb.VersionInfo
	// Kind is the namespace's kind.
	Kind lehrpb.NamespaceKind
	// Properties sorted by key.
	Properties []Property
	// Partial is set when only some keys were requested (Keys option); the
	// checksum then covers more than Properties.
	Partial bool
}

// Lookup returns the property with the given key.
func (v *Version) Lookup(key string) (Property, bool) {
	for _, p := range v.Properties {
		if p.Key == key {
			return p, true
		}
	}
	return Property{}, false
}

// Verify recomputes the checksum of Properties and compares it with
// Info.Checksum. It fails for a partial read.
func (v *Version) Verify() error {
	if v.Partial {
		return apierror.New(codes.FailedPrecondition, "", "keys", "cannot verify the checksum of a partial read; read every key")
	}
	s, err := content.New(v.Properties)
	if err != nil {
		return apierror.Wrap(err, codes.DataLoss, "", "properties")
	}
	if got, want := s.Checksum(), v.Info.GetChecksum(); got != want {
		return apierror.New(codes.DataLoss, "", "checksum", "%s@%d: content checksum %s, recorded %s",
			v.Info.GetNamespace(), v.Info.GetSeq(), got, want)
	}
	return nil
}

// Diff is what changed between two versions.
type Diff struct {
	From, To *lehrpb.VersionInfo
	// Changes sorted by key.
	Changes []Change
}

// PublishOption modifies one write: Publish, Patch or Rollback.
type PublishOption func(*writeOptions)

type writeOptions struct {
	message   string
	kind      lehrpb.NamespaceKind
	expected  uint64
	requestID string
}

// WithMessage records why the change is made; it shows in history.
func WithMessage(m string) PublishOption { return func(o *writeOptions) { o.message = m } }

// WithKind sets the kind of a namespace that Publish creates; for an
// existing namespace it must match. Publish only.
func WithKind(k lehrpb.NamespaceKind) PublishOption { return func(o *writeOptions) { o.kind = k } }

// WithExpectedVersion makes a Publish or Rollback succeed only if the
// namespace's latest version is still v; otherwise the error matches
// ErrConflict and carries CurrentVersion. (Patch states its base instead.)
func WithExpectedVersion(v uint64) PublishOption { return func(o *writeOptions) { o.expected = v } }

// WithRequestID sets the idempotency token of the write instead of a fresh
// random one. Two calls with the same token against a namespace whose latest
// version carries it return that version instead of creating another; use it
// to make a write idempotent across processes (e.g. a CI job that may run
// twice). Tokens are opaque, at most 128 bytes.
func WithRequestID(id string) PublishOption { return func(o *writeOptions) { o.requestID = id } }

func writeOpts(opts []PublishOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	if o.requestID == "" {
		o.requestID = newRequestID()
	}
	return o
}

// Publish replaces every property of ns with props, creating the namespace
// (inside an existing domain) on first publish. Every zone's goal moves to
// the new version.
func (c *Client) Publish(ctx context.Context, ns string, props []Property, opts ...PublishOption) (*lehrpb.VersionInfo, error) {
	o := writeOpts(opts)
	req := &lehrpb.PublishRequest{
		Namespace:       ns,
		Kind:            o.kind,
		Properties:      content.ToProto(props),
		Message:         o.message,
		Author:          c.opts.Author,
		ExpectedVersion: o.expected,
		RequestId:       o.requestID,
	}
	var resp *lehrpb.PublishResponse
	err := c.call(ctx, "publish "+ns, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Publish(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetVersion(), nil
}

// Patch applies p to version base of ns and stores the result as a new
// version. If base is no longer the latest version the error matches
// ErrConflict and its CurrentVersion names the latest: re-read, rebase and
// retry. Patch accepts WithMessage and WithRequestID.
func (c *Client) Patch(ctx context.Context, ns string, base uint64, p Patch, opts ...PublishOption) (*lehrpb.VersionInfo, error) {
	o := writeOpts(opts)
	if o.kind != lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
		return nil, fmt.Errorf("producer: patch %s: %w", ns, invalidArg("kind", "WithKind applies to Publish only; a patch keeps the namespace's kind"))
	}
	if o.expected != 0 {
		return nil, fmt.Errorf("producer: patch %s: %w", ns, invalidArg("expected_version", "WithExpectedVersion does not apply to Patch; the base version argument is the expected version"))
	}
	req := &lehrpb.PatchRequest{
		Namespace:   ns,
		BaseVersion: base,
		Set:         content.ToProto(p.Set),
		Delete:      p.Delete,
		Message:     o.message,
		Author:      c.opts.Author,
		RequestId:   o.requestID,
	}
	var resp *lehrpb.PatchResponse
	err := c.call(ctx, fmt.Sprintf("patch %s@%d", ns, base), func(ctx context.Context) (err error) {
		resp, err = c.rpc.Patch(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetVersion(), nil
}

// Rollback publishes the content of version to as a new version of ns.
// Rollback accepts WithMessage, WithExpectedVersion and WithRequestID.
func (c *Client) Rollback(ctx context.Context, ns string, to uint64, opts ...PublishOption) (*lehrpb.VersionInfo, error) {
	o := writeOpts(opts)
	if o.kind != lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
		return nil, fmt.Errorf("producer: rollback %s: %w", ns, invalidArg("kind", "WithKind applies to Publish only; a rollback keeps the namespace's kind"))
	}
	req := &lehrpb.RollbackRequest{
		Namespace:       ns,
		ToVersion:       to,
		Message:         o.message,
		Author:          c.opts.Author,
		ExpectedVersion: o.expected,
		RequestId:       o.requestID,
	}
	var resp *lehrpb.RollbackResponse
	err := c.call(ctx, fmt.Sprintf("rollback %s to %d", ns, to), func(ctx context.Context) (err error) {
		resp, err = c.rpc.Rollback(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetVersion(), nil
}

// GetOption modifies a Get.
type GetOption func(*lehrpb.GetRequest)

// AtVersion reads version seq instead of the latest.
func AtVersion(seq uint64) GetOption { return func(r *lehrpb.GetRequest) { r.Version = seq } }

// Keys reads only the given keys; each must exist.
func Keys(keys ...string) GetOption {
	return func(r *lehrpb.GetRequest) { r.Keys = append(r.Keys, keys...) }
}

// Get reads the latest version of ns, or the one chosen by AtVersion.
func (c *Client) Get(ctx context.Context, ns string, opts ...GetOption) (*Version, error) {
	req := &lehrpb.GetRequest{Namespace: ns}
	for _, f := range opts {
		f(req)
	}
	what := "get " + ns
	if req.Version != 0 {
		what = fmt.Sprintf("get %s@%d", ns, req.Version)
	}
	var resp *lehrpb.GetResponse
	err := c.call(ctx, what, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Get(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Version{
		Info:       resp.GetVersion(),
		Kind:       resp.GetKind(),
		Properties: content.FromProto(resp.GetProperties()),
		Partial:    len(req.Keys) > 0,
	}, nil
}

// HistoryPage returns one page of ns's versions, newest first, and the token
// of the next page ("" after the last). pageSize 0 means the server default
// (20); at most 1000.
func (c *Client) HistoryPage(ctx context.Context, ns string, pageSize int, pageToken string) ([]*lehrpb.VersionInfo, string, error) {
	var resp *lehrpb.HistoryResponse
	err := c.call(ctx, "history of "+ns, func(ctx context.Context) (err error) {
		resp, err = c.rpc.History(ctx, &lehrpb.HistoryRequest{Namespace: ns, PageSize: int32(pageSize), PageToken: pageToken})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetVersions(), resp.GetNextPageToken(), nil
}

// History iterates over ns's versions, newest first, fetching pages as the
// loop advances. On failure it yields (nil, err) and stops; breaking out of
// the loop stops fetching.
//
//	for v, err := range c.History(ctx, "payments/limits") {
//		if err != nil { return err }
//		fmt.Println(v.GetSeq(), v.GetMessage())
//	}
func (c *Client) History(ctx context.Context, ns string) iter.Seq2[*lehrpb.VersionInfo, error] {
	return func(yield func(*lehrpb.VersionInfo, error) bool) {
		token := ""
		for {
			page, next, err := c.HistoryPage(ctx, ns, 100, token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, v := range page {
				if !yield(v, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			token = next
		}
	}
}

// Diff compares versions a and b of ns.
func (c *Client) Diff(ctx context.Context, ns string, a, b uint64) (*Diff, error) {
	var resp *lehrpb.DiffResponse
	err := c.call(ctx, fmt.Sprintf("diff %s %d..%d", ns, a, b), func(ctx context.Context) (err error) {
		resp, err = c.rpc.Diff(ctx, &lehrpb.DiffRequest{Namespace: ns, From: a, To: b})
		return err
	})
	if err != nil {
		return nil, err
	}
	d := &Diff{From: resp.GetFrom(), To: resp.GetTo()}
	for _, ch := range resp.GetChanges() {
		out := Change{Key: ch.GetKey()}
		if ch.GetOld() != nil {
			out.Old = &content.FromProto([]*lehrpb.Property{ch.GetOld()})[0]
		}
		if ch.GetNew() != nil {
			out.New = &content.FromProto([]*lehrpb.Property{ch.GetNew()})[0]
		}
		d.Changes = append(d.Changes, out)
	}
	return d, nil
}

// CompactNamespace removes every version of ns but the keepLast newest
// (at least 1), whatever their age — never the latest version nor one some
// zone's goal names — to free its domain's stored bytes; message says why,
// for the audit log. It returns how many versions were removed and the
// namespace after (its oldest kept version and stored bytes). Only the
// domain's admins may.
func (c *Client) CompactNamespace(ctx context.Context, ns string, keepLast int, message string) (removed int, after *lehrpb.Namespace, err error) {
	if keepLast < 1 || keepLast > math.MaxInt32 {
		return 0, nil, fmt.Errorf("producer: compact %s: %w", ns, invalidArg("keep_last", "keep 1 to %d versions, not %d", math.MaxInt32, keepLast))
	}
	var resp *lehrpb.CompactNamespaceResponse
	err = c.call(ctx, "compact "+ns, func(ctx context.Context) (err error) {
		resp, err = c.rpc.CompactNamespace(ctx, &lehrpb.CompactNamespaceRequest{Name: ns, KeepLast: int32(keepLast), Message: message})
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return int(resp.GetVersionsRemoved()), resp.GetNamespace(), nil
}
