// Package store keeps Lehr's control-plane state in etcd through client/v3:
// domains, namespaces, immutable versions, zones and goal states. It works the
// same against the embedded single-member etcd and an external cluster.
//
// Only package control and its subpackages import store.
//
// SKELETON: signatures and contracts are final; bodies are being filled in.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Sentinel errors. Errors returned by Store wrap one of these where they apply.
var (
	ErrNotFound      = errors.New("store: not found")
	ErrAlreadyExists = errors.New("store: already exists")
	ErrConflict      = errors.New("store: latest version changed")
	ErrCorrupt       = errors.New("store: stored content fails its checksum")
	ErrRevisionGone  = errors.New("store: watch revision compacted")
)

// NotFoundError says what was not found. It wraps ErrNotFound.
type NotFoundError struct {
	What string // "domain", "namespace", "version", "zone"
	Name string
	// Oldest is set for a version that was compacted away: the oldest kept.
	Oldest uint64
}

func (e *NotFoundError) Error() string {
	if e.What == "version" && e.Oldest != 0 {
		return fmt.Sprintf("store: %s %s not found (oldest kept is %d)", e.What, e.Name, e.Oldest)
	}
	return fmt.Sprintf("store: %s %s not found", e.What, e.Name)
}
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ConflictError reports an ExpectedLatest that is no longer the latest
// version. It wraps ErrConflict.
type ConflictError struct {
	Namespace string
	Expected  uint64
	Current   uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("store: %s: expected latest version %d, current is %d", e.Namespace, e.Expected, e.Current)
}
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Retention is the history compaction policy. A version is removed only when
// it is older than KeepFor, is not among the KeepLast newest versions, and is
// not the goal of any zone. The latest version is never removed.
type Retention struct {
	KeepLast int           // default 100
	KeepFor  time.Duration // default 7 days
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
	// OnRoundTrip, if set, is called after every etcd request with the
	// operation ("get", "txn", "put", "delete", "watch") and its duration.
	OnRoundTrip func(op string, d time.Duration, err error)
}

// Store is the etcd-backed state of the control plane. It is safe for
// concurrent use, including by several control processes sharing one etcd.
type Store struct {
	cli  *clientv3.Client
	opts Options
}

// New returns a Store using cli, which the caller owns and closes.
func New(cli *clientv3.Client, opts Options) *Store {
	return &Store{cli: cli, opts: opts}
}

var errUnimplemented = errors.New("store: not implemented yet")

// CreateDomain stores d, setting its create_time. ErrAlreadyExists if taken.
func (s *Store) CreateDomain(ctx context.Context, d *lehrpb.Domain) (*lehrpb.Domain, error) {
	return nil, errUnimplemented
}

// GetDomain returns a domain or a *NotFoundError.
func (s *Store) GetDomain(ctx context.Context, name string) (*lehrpb.Domain, error) {
	return nil, errUnimplemented
}

// ListDomains returns up to limit domains whose names sort after "after".
func (s *Store) ListDomains(ctx context.Context, after string, limit int) ([]*lehrpb.Domain, error) {
	return nil, errUnimplemented
}

// CreateNamespace creates an empty namespace (latest_version 0) with the
// given name, kind and json_schema. The domain must exist (*NotFoundError
// with What "domain"); ErrAlreadyExists if it exists.
func (s *Store) CreateNamespace(ctx context.Context, ns *lehrpb.Namespace) (*lehrpb.Namespace, error) {
	return nil, errUnimplemented
}

// GetNamespace returns a namespace's head or a *NotFoundError.
func (s *Store) GetNamespace(ctx context.Context, name string) (*lehrpb.Namespace, error) {
	return nil, errUnimplemented
}

// ListNamespaces returns up to limit namespaces of a domain whose full names
// sort after "after".
func (s *Store) ListNamespaces(ctx context.Context, domain, after string, limit int) ([]*lehrpb.Namespace, error) {
	return nil, errUnimplemented
}

// CountNamespaces returns how many namespaces a domain holds.
func (s *Store) CountNamespaces(ctx context.Context, domain string) (int, error) {
	return 0, errUnimplemented
}

// GoalPolicy says what a commit does to zone goal states.
type GoalPolicy int

const (
	// GoalsAllZones sets every registered zone's goal for the namespace to the
	// new version in the same transaction as the commit.
	GoalsAllZones GoalPolicy = iota
	// GoalsNone leaves goal states alone (a rollout strategist moves them).
	GoalsNone
)

// Commit is one new version to store.
type Commit struct {
	Namespace string
	// Create the namespace with Kind if it does not exist (its domain must).
	Create bool
	Kind   lehrpb.NamespaceKind
	// The commit succeeds only if the namespace's latest version is still
	// ExpectedLatest (0: no version yet); otherwise *ConflictError.
	ExpectedLatest uint64
	// The complete content of the new version.
	Content content.Snapshot
	// Author, Message, Source, RollbackOf and TransportIdentity are copied;
	// the store fills namespace, seq, checksum, parent, create_time and sizes.
	Info *lehrpb.VersionInfo
	// RequestID, if set, makes the commit idempotent: when the latest version
	// was committed with the same RequestID, Commit returns it unchanged
	// (even if ExpectedLatest no longer matches) instead of a new version.
	RequestID string
	// Goals and GoalReason say how goal states follow the commit.
	Goals      GoalPolicy
	GoalReason string
}

// Commit stores a new immutable version atomically: either the version, the
// namespace head and (per c.Goals) the goal states all change, or nothing
// visible does. Large content is written in several requests first, each
// within etcd's request size limit; only the final transaction makes it
// visible.
func (s *Store) Commit(ctx context.Context, c Commit) (*lehrpb.VersionInfo, error) {
	return nil, errUnimplemented
}

// Version returns a version's metadata; seq 0 means the latest.
func (s *Store) Version(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, error) {
	return nil, errUnimplemented
}

// Content returns a version's metadata and content; seq 0 means the latest.
// The content is checked against the recorded checksum (ErrCorrupt).
func (s *Store) Content(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, content.Snapshot, error) {
	return nil, content.Snapshot{}, errUnimplemented
}

// History returns up to limit versions, newest first, with seq < before
// (before 0 means from the latest).
func (s *Store) History(ctx context.Context, ns string, before uint64, limit int) ([]*lehrpb.VersionInfo, error) {
	return nil, errUnimplemented
}

// CreateZone registers a zone and sets its goals to every namespace's latest
// version, atomically. ErrAlreadyExists if registered.
func (s *Store) CreateZone(ctx context.Context, zone string) (*lehrpb.Zone, error) {
	return nil, errUnimplemented
}

// EnsureZone is CreateZone that succeeds if the zone exists.
func (s *Store) EnsureZone(ctx context.Context, zone string) error {
	return errUnimplemented
}

// ListZones returns every registered zone.
func (s *Store) ListZones(ctx context.Context) ([]*lehrpb.Zone, error) {
	return nil, errUnimplemented
}

// Goals returns a zone's goal states (one namespace if ns != "") and the
// etcd revision they were read at.
func (s *Store) Goals(ctx context.Context, zone, ns string) ([]*lehrpb.GoalState, int64, error) {
	return nil, 0, errUnimplemented
}

// SetGoal moves one goal state. The version must exist. This is the seam the
// rollout strategist uses.
func (s *Store) SetGoal(ctx context.Context, g *lehrpb.GoalState) error {
	return errUnimplemented
}

// GoalBatch is the goal changes of one etcd revision, or a terminal error.
type GoalBatch struct {
	Revision int64
	Events   []*lehrpb.GoalEvent
	Err      error // ErrRevisionGone, or the watch failing; the channel closes after it
}

// WatchGoals streams a zone's goal changes from revision fromRev (> 0). The
// channel is closed when ctx is done or after a batch with Err set. A slow
// reader delays only itself.
func (s *Store) WatchGoals(ctx context.Context, zone string, fromRev int64) <-chan GoalBatch {
	ch := make(chan GoalBatch, 1)
	ch <- GoalBatch{Err: errUnimplemented}
	close(ch)
	return ch
}

// Compact applies the retention policy to one namespace and returns how
// many versions it removed.
func (s *Store) Compact(ctx context.Context, ns string) (int, error) {
	return 0, errUnimplemented
}

// RunCompactor compacts every namespace each interval until ctx is done.
func (s *Store) RunCompactor(ctx context.Context, interval time.Duration) error {
	<-ctx.Done()
	return nil
}
