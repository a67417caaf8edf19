package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
)

// verify checks the invariants after a run and fills rep:
//
//   - history: every namespace's versions are 1..latest, each made by one
//     op of the ledger, no op twice; every acknowledged op is the version
//     it was acknowledged as (checksum included, and a publish's checksum
//     is that of its content); no refused op is in history;
//   - files: every agent's file of every namespace is the goal and
//     verifies; no temporary file is left;
//   - consumers: on every agent, every namespace's views came in strictly
//     increasing versions, each whole (its content has its checksum) and
//     each control's (checksum and op of that version in history).
//
// It also computes the per-op convergence figures.
func verify(ctx context.Context, rep *Report, cl *Cluster, ops []*Op, obs []Observation, namespaces []string, goals map[string]goal) error {
	hist := map[string]map[uint64]*lehrpb.VersionInfo{}
	madeBy := map[string][]string{} // op id → "ns@seq" of versions it made
	for _, ns := range namespaces {
		hist[ns] = map[uint64]*lehrpb.VersionInfo{}
		for v, err := range cl.Producer().History(ctx, ns) {
			if err != nil {
				return fmt.Errorf("history of %s: %w", ns, err)
			}
			hist[ns][v.GetSeq()] = v
			madeBy[v.GetMessage()] = append(madeBy[v.GetMessage()], fmt.Sprintf("%s@%d", ns, v.GetSeq()))
		}
		for seq := uint64(1); seq <= goals[ns].seq; seq++ {
			if hist[ns][seq] == nil {
				rep.violate("history of %s lacks version %d (latest %d)", ns, seq, goals[ns].seq)
			}
		}
		if n := uint64(len(hist[ns])); n != goals[ns].seq {
			rep.violate("history of %s has %d versions, latest is %d", ns, n, goals[ns].seq)
		}
	}

	byID := map[string]*Op{}
	var acked []*Op
	for _, op := range ops {
		rep.Ops++
		rep.Retried += min(op.Attempts, 1)
		if op.Publish {
			rep.Publishes++
		}
		byID[op.ID] = op
		switch {
		case op.Acked != nil:
			rep.Acked++
			acked = append(acked, op)
			v := hist[op.Namespace][op.Acked.GetSeq()]
			if v == nil || v.GetMessage() != op.ID {
				rep.Lost++
			}
			switch {
			case v == nil:
				rep.violate("op %s acknowledged as %s@%d, which is not in history", op.ID, op.Namespace, op.Acked.GetSeq())
			case v.GetMessage() != op.ID:
				rep.violate("op %s acknowledged as %s@%d, which op %q made", op.ID, op.Namespace, op.Acked.GetSeq(), v.GetMessage())
			case v.GetChecksum() != op.Acked.GetChecksum():
				rep.violate("op %s acknowledged %s@%d with checksum %s; history has %s", op.ID, op.Namespace, v.GetSeq(), op.Acked.GetChecksum(), v.GetChecksum())
			}
			if op.Publish && op.Acked.GetChecksum() != op.Sum {
				rep.violate("op %s published content with checksum %s; acknowledged %s", op.ID, op.Sum, op.Acked.GetChecksum())
			}
			if n := len(madeBy[op.ID]); n != 1 {
				rep.violate("op %s is in history %d times (%v), want exactly once", op.ID, n, madeBy[op.ID])
			}
			if len(madeBy[op.ID]) > 1 {
				rep.Duplicated++
			}
		case op.Refused != nil:
			rep.Refused++
			if at := madeBy[op.ID]; len(at) > 0 {
				rep.Duplicated++
				rep.violate("op %s was refused (%v) but is in history at %v", op.ID, op.Refused, at)
			}
		default:
			rep.violate("op %s was never answered", op.ID)
		}
	}
	for id, at := range madeBy {
		if byID[id] == nil {
			rep.violate("history holds versions %v made by %q, which no op of the ledger wrote", at, id)
		}
	}

	// Files.
	for _, a := range cl.Agents {
		for _, ns := range namespaces {
			path, err := nsfile.Path(a.FilesDir(), ns)
			if err != nil {
				return err
			}
			f, err := nsfile.Read(path)
			switch {
			case err != nil:
				rep.violate("agent %s: file of %s: %v", a.HostID, ns, err)
			case f.Version != goals[ns].seq || f.Checksum != goals[ns].sum:
				rep.violate("agent %s: file of %s is version %d (%s), goal %d (%s)", a.HostID, ns, f.Version, f.Checksum, goals[ns].seq, goals[ns].sum)
			}
		}
		err := filepath.WalkDir(a.FilesDir(), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && nsfile.IsTemp(d.Name()) {
				rep.violate("agent %s: temporary file %s left behind", a.HostID, path)
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}

	// Consumers.
	last := map[[2]string]Observation{}
	for _, ob := range obs {
		k := [2]string{ob.Agent, ob.NS}
		if prev, ok := last[k]; ok && ob.Version <= prev.Version {
			rep.violate("the consumer on %s saw %s go from version %d to %d", ob.Agent, ob.NS, prev.Version, ob.Version)
		}
		last[k] = ob
		if !ob.ContentSumOK {
			rep.Torn++
			rep.violate("the consumer on %s got %s@%d whose content has checksum %s, not the %s it claims (torn view)", ob.Agent, ob.NS, ob.Version, ob.ContentSumSeen, ob.Checksum)
		}
		v := hist[ob.NS][ob.Version]
		switch {
		case v == nil:
			rep.violate("the consumer on %s got %s@%d, which is not in history", ob.Agent, ob.NS, ob.Version)
		case v.GetChecksum() != ob.Checksum || v.GetMessage() != ob.Op:
			rep.violate("the consumer on %s got %s@%d with checksum %s by op %q; control's is %s by %q", ob.Agent, ob.NS, ob.Version, ob.Checksum, ob.Op, v.GetChecksum(), v.GetMessage())
		}
	}

	// Per-op convergence: from the ack to every consumer seeing that
	// version or a newer one.
	firstSeen := map[[2]string][]Observation{}
	for _, ob := range obs {
		k := [2]string{ob.Agent, ob.NS}
		firstSeen[k] = append(firstSeen[k], ob)
	}
	var ds []time.Duration
	for _, op := range acked {
		var worst time.Duration
		for _, a := range cl.Agents {
			seen := firstSeen[[2]string{a.HostID, op.Namespace}]
			var at time.Time
			for _, ob := range seen { // in order of arrival, versions increasing
				if ob.Version >= op.Acked.GetSeq() {
					at = ob.At
					break
				}
			}
			if at.IsZero() {
				continue // reported above as not converged
			}
			worst = max(worst, at.Sub(op.AckedAt))
		}
		ds = append(ds, worst)
	}
	rep.UpdateP50, rep.UpdateMax = durations(ds)
	return nil
}
