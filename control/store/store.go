// Package store keeps Lehr's control-plane state in etcd through client/v3:
// domains, namespaces, immutable versions, zones, goal states and the
// distributors' zone status reports. It works the same against the embedded
// single-member etcd and an external cluster.
//
// Imported by control/..., cmd/lehr (for the audit retention's and the
// store timeout's defaults) and bench (the high-water mark's reserve).
//
// Every method takes a context and makes a bounded number of etcd requests;
// there is no cache, so several control processes sharing one etcd see the
// same state. Writes are optimistic transactions guarded by mod revisions,
// retried by one loop (txn.go; see versions.go for the commit algorithm,
// compact.go for history compaction and zonestatus.go for leased status
// reports). Errors wrap the sentinels in errors.go; IsUnavailable tells
// a retryable etcd outage from everything else.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/signing"
)

// Retention is the history compaction policy. A version is removed only when
// it is older than KeepFor, is not among the KeepLast newest versions, and is
// not the goal of any zone. The latest version is never removed.
type Retention struct {
	KeepLast int           // default 100
	KeepFor  time.Duration // default 7 days
	// Requests is how long the version a request_id committed is
	// remembered for retries of that request; default 24 hours.
	Requests time.Duration
	// Audit is how long audit records are kept; default 90 days.
	Audit time.Duration
	// AuditRecords is the most audit records kept: beyond it the history
	// compactor removes the oldest, whatever their age, so the log's size
	// is bounded however busy the fleet is; default
	// DefaultAuditRecords.
	AuditRecords int
}

// Options configures a Store. The zero value is valid.
type Options struct {
	// Prefix of every key, default "/lehr/".
	Prefix string
	// Retention is the compaction policy; zero fields take defaults.
	Retention Retention
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds each etcd request the store makes — every
	// read, transaction, write, lease and status call; not a watch, nor
	// compaction or defragmentation, which take as long as they take. A
	// request etcd has not answered by then fails with a *NoAnswerError
	// (IsUnavailable): a cluster that lost quorum, or a member control
	// cannot reach, fails a call within seconds instead of holding it
	// until its caller gives up. Zero means DefaultRequestTimeout (10 s)
	// on a cluster and no bound on a SingleMember, which cannot lose a
	// quorum and whose requests wait out its own defragmentation (a read
	// under a 256 MiB store being filled and defragmented took over 10 s
	// on the loaded CI machine, bench isolation); negative, no bound.
	RequestTimeout time.Duration
	// OnRoundTrip, if set, is called after every etcd request with the
	// operation ("get", "txn", "put", "delete", "watch", "lease_grant",
	// "lease_keepalive", "lease_revoke", "lease_ttl", "status",
	// "member_list", "alarm_list", "alarm_disarm", "compact",
	// "defragment") and its duration.
	OnRoundTrip func(op string, d time.Duration, err error)
	// ContentCacheBytes bounds the memory of versions' content (each at
	// most 256 KiB) kept for Content (contentcache.go); 0 means
	// DefaultContentCacheBytes (32 MiB), a negative value keeps none.
	ContentCacheBytes int64
	// Signer, if set, signs every version Commit creates and every goal
	// state written (internal/signing); nil leaves both unsigned.
	Signer *signing.Signer
	// SingleMember says etcd is one member (control's embedded etcd): a
	// read needs no quorum round to see every acknowledged write, since
	// the member applies a write before acknowledging it, so the reads of
	// a publish before its commit skip it (serializable reads). Never set
	// it for a cluster: a lagging member would answer from the past.
	SingleMember bool
	// Maintenance, if set, is the client of etcd's maintenance calls
	// (status, alarms, defragmentation); default the store's own. The
	// embedded member's in-process client cannot defragment (etcd's
	// v3client has no health notifier for it): control passes one
	// dialled to the member's socket.
	Maintenance *clientv3.Client
	// Space configures the watch over etcd's space (space.go): its quota,
	// the reserve kept for the safety path, and how often it is read.
	Space SpaceOptions
	// OnDomainUsage, if set, is called with a domain's stored bytes each
	// time a commit or a recount changes them (usage.go).
	OnDomainUsage func(domain string, storedBytes int64)
	// OnSpaceEvent, if set, is called for each write refused above the
	// high-water mark ("refused"), each compaction of etcd's revisions
	// ("compact") and defragmentation ("defragment") run to reclaim
	// space, and each NOSPACE alarm disarmed ("disarm").
	OnSpaceEvent func(event string)
}

// Store is the etcd-backed state of the control plane. It is safe for
// concurrent use, including by several control processes sharing one etcd.
type Store struct {
	cli  *clientv3.Client
	opts Options
	lay  layout
	log  *slog.Logger

	requests leaseBucket // see requests.go
	audit    leaseBucket // see audit.go
	contents *contentCache
	space    *space           // see space.go
	maint    *clientv3.Client // Options.Maintenance or cli
}

// Defaults of Options.
const (
	DefaultPrefix   = "/lehr/"
	DefaultKeepLast = 100
	DefaultKeepFor  = 7 * 24 * time.Hour
	// DefaultRequestTimeout is the default Options.RequestTimeout: above
	// etcd's own 7-second bound on a proposal (5 s plus two election
	// timeouts), so a slow but working etcd answers (or fails) by itself
	// first: at 5 s, a publish under a 256 MiB store being filled and
	// defragmented, on a loaded 2-core machine, failed UNAVAILABLE (bench
	// isolation). A member without a leader answers at once anyway.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultRequestRetention is the default Retention.Requests.
	DefaultRequestRetention = 24 * time.Hour
	// DefaultAuditRetention is the default Retention.Audit.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// DefaultAuditRecords is the default Retention.AuditRecords: a
	// typical record is a few hundred bytes (each text field is cut to
	// 1 KiB, so none exceeds 7 KiB), about 300 MiB of the store for a
	// million — 2.5 weeks of UCDP's 400,000 deploys a week with a record
	// each.
	DefaultAuditRecords = 1_000_000
)

// New returns a Store using cli, which the caller owns and closes. New makes
// no request; the first method call does.
func New(cli *clientv3.Client, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.Retention.KeepLast <= 0 {
		opts.Retention.KeepLast = DefaultKeepLast
	}
	if opts.Retention.Requests <= 0 {
		opts.Retention.Requests = DefaultRequestRetention
	}
	if opts.Retention.Audit <= 0 {
		opts.Retention.Audit = DefaultAuditRetention
	}
	if opts.Retention.AuditRecords <= 0 {
		opts.Retention.AuditRecords = DefaultAuditRecords
	}
	if opts.Retention.KeepFor <= 0 {
		opts.Retention.KeepFor = DefaultKeepFor
	}
	if opts.RequestTimeout == 0 && !opts.SingleMember {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{cli: cli, opts: opts, lay: layout{prefix: opts.Prefix}, log: opts.Logger, space: newSpace(opts.Space), maint: cmp.Or(opts.Maintenance, cli)}
	switch {
	case opts.ContentCacheBytes == 0:
		s.contents = newContentCache(DefaultContentCacheBytes)
	case opts.ContentCacheBytes > 0:
		s.contents = newContentCache(opts.ContentCacheBytes)
	}
	return s
}

// leaderOnly marks ctx so that an etcd member cut off from its leader
// fails a request at once (and the client tries another member) instead of
// blocking until the caller's deadline. call does so for every bounded
// request; watches and compaction, which Options.RequestTimeout does not
// bound, use it directly.
func leaderOnly(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// call makes one etcd request, op (an OnRoundTrip name), under ctx: leader
// required (leaderOnly), bounded by Options.RequestTimeout, observed. A
// request etcd did not answer within the bound while ctx still waited
// fails with a *NoAnswerError; ctx's own end stays ctx's error.
func call[T any](s *Store, ctx context.Context, op string, req func(context.Context) (T, error)) (T, error) {
	rctx, cancel := leaderOnly(ctx), context.CancelFunc(func() {})
	if s.opts.RequestTimeout > 0 {
		rctx, cancel = context.WithTimeout(rctx, s.opts.RequestTimeout)
	}
	defer cancel()
	start := time.Now()
	resp, err := req(rctx)
	s.observe(op, start, err)
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		err = &NoAnswerError{Timeout: s.opts.RequestTimeout, Err: err}
	}
	return resp, err
}

func (s *Store) observe(op string, start time.Time, err error) {
	if s.opts.OnRoundTrip != nil {
		s.opts.OnRoundTrip(op, time.Since(start), err)
	}
}

// get is one etcd range request.
func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return call(s, ctx, "get", func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, key, opts...)
	})
}

// txn is one etcd transaction: if every cmp holds, then; else els.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	return call(s, ctx, "txn", func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	})
}

// SingleMember reports Options.SingleMember: etcd is control's embedded
// member, not a cluster.
func (s *Store) SingleMember() bool { return s.opts.SingleMember }

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.lay.prefix }

// readAt reads several keys or ranges at one revision, in one request. The
// ops must be gets; the responses come back in order.
func (s *Store) readAt(ctx context.Context, ops ...clientv3.Op) ([]*clientv3.GetResponse, int64, error) {
	resp, err := s.txn(ctx, nil, ops, nil)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*clientv3.GetResponse, len(resp.Responses))
	for i, r := range resp.Responses {
		out[i] = (*clientv3.GetResponse)(r.GetResponseRange())
	}
	return out, resp.Header.Revision, nil
}

// encode encodes a record. It fails only for invalid input, such as a
// string field that is not valid UTF-8, so its error wraps ErrInvalid.
func encode(m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %s: %w", ErrInvalid, m.ProtoReflect().Descriptor().Name(), err)
	}
	return b, nil
}

// decode decodes a stored record; a record that does not decode is corrupt.
func decode(key string, b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: decode %s: %w", ErrCorrupt, key, err)
	}
	return nil
}
