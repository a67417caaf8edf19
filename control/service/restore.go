package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// Concurrency of ResyncRestore: namespaces are committed again this many
// at a time (each commit is a few etcd round trips and a disk sync, which
// etcd batches across concurrent requests), and progress is logged every
// resyncProgressEvery.
const (
	resyncWorkers       = 16
	resyncProgressEvery = 10 * time.Second
)

// ResyncRestore finishes a restore (control/store, restore.go): if the
// store was restored and its namespaces not yet re-committed, it commits
// each namespace's latest version again — the same content, a new version
// above the restore's floor, source ROLLBACK — with every zone's goal, so
// every host converges to the restored content, also a host that holds a
// version of the lost store under a number the restored store had not
// reached. It commits resyncWorkers namespaces at a time, in an order of
// its own: replicas starting together share the work, each skipping a
// namespace another already committed above the floor (its head says so),
// and each commit's request id names the restore, so a namespace two
// replicas reach at once is committed once. It returns how many
// namespaces it re-committed; every one is in the audit log, and the end
// too.
func (s *Service) ResyncRestore(ctx context.Context) (int, error) {
	rec, err := s.st.Restored(ctx)
	if err != nil || rec == nil || rec.GetResyncTime() != nil {
		return 0, err
	}
	heads, err := s.st.Heads(ctx)
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(heads))
	for ns, latest := range heads {
		if latest != 0 && latest <= rec.GetVersionFloor() {
			names = append(names, ns)
		}
	}
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	msg := fmt.Sprintf("restore %s: the backup's latest version, committed again above %d (the versions of the store restored)",
		rec.GetId(), rec.GetVersionFloor())

	var done, committed atomic.Int64
	start := time.Now()
	stopProgress := make(chan struct{})
	var progress sync.WaitGroup
	progress.Go(func() {
		t := time.NewTicker(resyncProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				s.log.Info("control: restore: committing every namespace again above the version floor before serving",
					"done", done.Load(), "of", len(names), "committed", committed.Load(), "elapsed", time.Since(start).Round(time.Second))
			}
		}
	})
	defer func() { close(stopProgress); progress.Wait() }()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(resyncWorkers)
	for _, ns := range names {
		g.Go(func() error {
			defer done.Add(1)
			ok, err := s.resyncNamespace(gctx, rec, ns, heads[ns], msg)
			if ok {
				committed.Add(1)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return int(committed.Load()), err
	}
	n := int(committed.Load())
	if err := s.st.ResyncDone(ctx, rec.GetId()); err != nil {
		return n, err
	}
	s.Audit(&lehrpb.AuditRecord{Time: timestamppb.New(s.now()), Method: "RestoreStore", Author: "lehr-control", TransportIdentity: "restore",
		Detail: fmt.Sprintf("restore %s: %d namespaces committed again above version %d; hosts converge to the backup's content (backup of %s)",
			rec.GetId(), n, rec.GetVersionFloor(), rec.GetBackupTime().AsTime().UTC().Format(time.RFC3339))})
	return n, nil
}

// resyncNamespace commits ns's latest version (latest, as the restored
// store had it) again above the restore's floor, unless a version above
// the floor came first (another replica's re-commit, or a publish).
// It reports whether it committed.
func (s *Service) resyncNamespace(ctx context.Context, rec *lehrpb.RestoreRecord, ns string, latest uint64, msg string) (bool, error) {
	dom, h, err := s.st.DomainAndNamespace(ctx, ns)
	if err != nil {
		return false, fmt.Errorf("resync %s@%d after restore: %w", ns, latest, err)
	}
	if h.GetLatestVersion() > rec.GetVersionFloor() {
		return false, nil // committed since the restore
	}
	_, snap, err := s.st.Content(ctx, ns, latest)
	if err != nil {
		return false, fmt.Errorf("resync %s@%d after restore: %w", ns, latest, err)
	}
	info, err := s.commitVersion(ctx, s.st.Commit, store.Commit{
		Namespace: ns,
		Limits:    s.domainLimits(dom),
		Kind:      h.GetKind(),
		Content:   snap,
		Info: &lehrpb.VersionInfo{
			Author:            "lehr-control",
			Message:           msg,
			Source:            lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK,
			RollbackOf:        latest,
			TransportIdentity: "restore",
		},
		RequestID:      "restore-" + rec.GetId(),
		ExpectedLatest: latest,
		Goals:          store.GoalsAllZones,
		GoalReason:     fmt.Sprintf("restore %s: %d again", rec.GetId(), latest),
	})
	var conflict *store.ConflictError
	if errors.As(err, &conflict) {
		return false, nil // a version above the floor came first: it is newer than the backup's
	}
	if err != nil {
		return false, fmt.Errorf("resync %s@%d after restore: %w", ns, latest, err)
	}
	s.Audit(&lehrpb.AuditRecord{Method: "RestoreStore", Author: "lehr-control", TransportIdentity: "restore",
		Target: ns, Domain: dom.GetName(), Version: info.GetSeq(),
		Detail: fmt.Sprintf("restore %s: version %d of the backup committed again as %d, every zone's goal", rec.GetId(), latest, info.GetSeq())})
	return true, nil
}
