package strategist

import (
	"context"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Store is the part of control's store (*store.Store) the strategist uses:
// exactly the calls it makes, so that what it depends on is written down
// here and a test can put something between the strategist and etcd (to
// count calls or inject a failure) by wrapping the real store. Each
// method's contract is that of the *store.Store method of the same name.
//
// It embeds evaluation.Store because a strategist without
// Options.Evaluations runs its canary analyses on the same store.
type Store interface {
	evaluation.Store

	// What a round watches and reads.
	WatchRolloutInputs(ctx context.Context) <-chan store.RolloutInput
	DomainNames(ctx context.Context) ([]string, error)
	ReadRolloutInputs(ctx context.Context, domain string, namespaces []string) (store.RolloutInputs, error)
	ListZones(ctx context.Context) ([]*lehrpb.Zone, error)
	Head(ctx context.Context, ns string) (*lehrpb.Namespace, int64, error)
	Goals(ctx context.Context, zone, ns string) ([]*lehrpb.GoalState, int64, error)
	Version(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, error)
	ExpectedChecks(ctx context.Context, ns string, seq uint64) ([]*lehrpb.CanaryCheck, error)
	Content(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, content.Snapshot, error)

	// What a step writes: rollouts guarded by the election (store.Guard)
	// and the head they were decided on, a rollback's version by the
	// version it rolls back (Commit.ExpectedLatest) and its RequestID.
	PutRollout(ctx context.Context, g store.Guard, step store.RolloutStep) error
	PruneRollouts(ctx context.Context, g store.Guard, ns string, versions []uint64) error
	Commit(ctx context.Context, c store.Commit) (*lehrpb.VersionInfo, error)
}
