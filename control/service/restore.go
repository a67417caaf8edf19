package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// ResyncRestore finishes a restore (control/store, restore.go): if the
// store was restored and its namespaces not yet re-committed, it commits
// each namespace's latest version again — the same content, a new version
// above the restore's floor, source ROLLBACK — with every zone's goal, so
// every host converges to the restored content, also a host that holds a
// version of the lost store under a number the restored store had not
// reached. Each commit's request id names the restore, so replicas
// starting together commit each namespace once. It returns how many
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
	for ns := range heads {
		names = append(names, ns)
	}
	slices.Sort(names)
	msg := fmt.Sprintf("restore %s: the backup's latest version, committed again above %d (the versions of the store restored)",
		rec.GetId(), rec.GetVersionFloor())
	var n int
	for _, ns := range names {
		latest := heads[ns]
		if latest == 0 || latest > rec.GetVersionFloor() {
			continue // nothing to send, or committed since the restore
		}
		dom, h, err := s.st.DomainAndNamespace(ctx, ns)
		if err != nil {
			return n, err
		}
		_, snap, err := s.st.Content(ctx, ns, latest)
		if err != nil {
			return n, fmt.Errorf("resync %s@%d after restore: %w", ns, latest, err)
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
			continue // a version above the floor came first: it is newer than the backup's
		}
		if err != nil {
			return n, fmt.Errorf("resync %s@%d after restore: %w", ns, latest, err)
		}
		n++
		s.Audit(&lehrpb.AuditRecord{Method: "RestoreStore", Author: "lehr-control", TransportIdentity: "restore",
			Target: ns, Domain: dom.GetName(), Version: info.GetSeq(),
			Detail: fmt.Sprintf("restore %s: version %d of the backup committed again as %d, every zone's goal", rec.GetId(), latest, info.GetSeq())})
	}
	if err := s.st.ResyncDone(ctx, rec.GetId()); err != nil {
		return n, err
	}
	s.Audit(&lehrpb.AuditRecord{Time: timestamppb.New(s.now()), Method: "RestoreStore", Author: "lehr-control", TransportIdentity: "restore",
		Detail: fmt.Sprintf("restore %s: %d namespaces committed again above version %d; hosts converge to the backup's content (backup of %s)",
			rec.GetId(), n, rec.GetVersionFloor(), rec.GetBackupTime().AsTime().UTC().Format(time.RFC3339))})
	return n, nil
}
