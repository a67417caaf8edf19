package store

// Deleting namespaces and domains.
//
// Every key of a namespace ns is under a prefix of its own (layout.go) —
// data/<ns>/ (its versions and blobs), requests/<ns>/, policyhist/ns/<ns>/,
// rollouts/<ns>/, rolloutevents/<ns>/, rolloutcmds/<ns>/, evaluations/<ns>/
// and experiments/<ns>/ — or is a single key: nsmeta/<ns>, policies/ns/<ns>
// and one goal per zone, goals/<zone>/<ns>. etcd counts a delete of a
// prefix as one operation whatever it removes, so DeleteNamespace removes a
// namespace of any size — a thousand versions as well as one — in one
// transaction of 12 operations and one per registered zone (at most
// MaxZones, 96: within etcd's 128). The keys of a domain are under the same
// prefixes with <domain>/ for <ns>/, plus domains/<domain>,
// usage/<domain>, policies/domain/<domain>, policyhist/domain/<domain>/ and
// goals/<zone>/<domain>/: DeleteDomain, namespaces and all, is one
// transaction too, of 16 operations and one per zone. Either everything of
// what is deleted goes, or nothing does; no marker, no second phase, and
// nothing to resume after a crash.
//
// A policy namespace's preview namespace (names.Preview; control writes
// it) goes with it — in the same transaction when both fit
// (maxDeleteTxnOps: up to 48 zones), else in one of its own just before,
// decided on the same read. If the policy's own transaction then loses a
// race and the deletion is refused on a new read, the policy stays without
// its preview namespace: control creates it again with the next change of
// an experiment (its versions continuing, as below).
//
// Tombstones. A deleted namespace leaves tombstones/ns/<domain>/<name>
// (lehrpb.Tombstone) with the last version it had, a deleted domain
// tombstones/domain/<domain> with the last version of any namespace it
// had (replacing its namespaces' tombstones). A namespace created again
// under the name continues after that version (Commit), never at 1:
// agents and consumers compare version numbers — a host holding version 5
// of the deleted namespace would take a new namespace's version 3 for an
// older one and keep its copy (internal/update, Plan and Check), and a
// consumer ignores a version at or below the one it has. Tombstones are
// kept for good: one small record per name ever deleted.
//
// Races. A deletion reads what it decides on at one revision R and its
// transaction is guarded by that: the heads' mod revisions (a version
// committed since), the usage record's, no zone registered since R (every
// zone's goal is deleted), no rollout of the namespace written since R (the
// check saw every one in flight) and, for a domain, its record and no
// namespace created or tombstone written under it since R. A write that
// loses to the deletion finds what it guards on gone: a commit whose head
// or domain vanished, a goal or rollout step whose versions or head did
// (SetGoal, PutRollout), a zone registered with goals of a namespace that
// no longer exists (createZone guards on the tombstones). The zone reports
// a namespace's Check is given are the exception: they change every few
// seconds, so they are read as they are, zone by zone, and not guarded.

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// maxDeleteTxnOps bounds the operations of one deletion's transaction,
// within etcd's default of 128 (as a commit's, maxInlineTxnOps).
const maxDeleteTxnOps = maxInlineTxnOps

// DeletionState is what a deletion is decided on, read at one revision.
type DeletionState struct {
	// Domain is the domain to delete (DeleteDomain; nil for
	// DeleteNamespace).
	Domain *lehrpb.Domain
	// Namespaces are the heads of the namespaces to delete: the namespace
	// and its preview namespace, if it has one (DeleteNamespace); every
	// namespace of the domain, previews included (DeleteDomain).
	Namespaces []*lehrpb.Namespace
	// Rollouts are the namespace's rollouts (DeleteNamespace only).
	Rollouts []*lehrpb.Rollout
	// Reports are the live reports of every zone's distributors, by zone,
	// with only their versions and health of Namespaces (DeleteNamespace
	// with DeleteOptions.ReadReports only; read as they are now, not at
	// the revision of the rest).
	Reports map[string][]*lehrpb.DistributorStatus
}

// DeleteOptions are a deletion's checks and idempotency.
type DeleteOptions struct {
	// Check, if set, decides on what was read whether the deletion may
	// go ahead: an error refuses it — returned as is, and nothing is
	// deleted. It may be called once per round (a lost race reads again).
	Check func(DeletionState) error
	// ReadReports reads every zone's live distributor reports for Check
	// (DeleteNamespace).
	ReadReports bool
	// RequestID, if set, is recorded in the tombstone: deleting again
	// what a deletion with the same RequestID deleted returns that
	// deletion (Deletion.Repeated) instead of a *NotFoundError.
	RequestID string
}

// Deletion is what a deletion removed.
type Deletion struct {
	// Namespaces removed (a policy's preview namespace counts).
	Namespaces int
	// Versions removed, over all of them.
	Versions int
	// StoredBytes is what they stored (Namespace.stored_bytes), which
	// their domain no longer counts.
	StoredBytes int64
	// LastVersion is the tombstone's: the version a namespace created
	// again under the name continues after.
	LastVersion uint64
	// Repeated says the deletion was done before, by a call with the same
	// DeleteOptions.RequestID; the counts above are then zero.
	Repeated bool
}

// tombstoneBase returns the last version the tombstones read in rs record
// (0 without any): the base a namespace created again continues after.
func tombstoneBase(rs ...*clientv3.GetResponse) (uint64, error) {
	var base uint64
	for _, r := range rs {
		if len(r.Kvs) == 0 {
			continue
		}
		t := new(lehrpb.Tombstone)
		if err := decode(string(r.Kvs[0].Key), r.Kvs[0].Value, t); err != nil {
			return 0, err
		}
		base = max(base, t.GetLastVersion())
	}
	return base, nil
}

// decodeTombstone decodes the tombstone of a read, nil if there is none.
func decodeTombstone(r *clientv3.GetResponse) (*lehrpb.Tombstone, error) {
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	t := new(lehrpb.Tombstone)
	if err := decode(string(r.Kvs[0].Key), r.Kvs[0].Value, t); err != nil {
		return nil, err
	}
	return t, nil
}

// namespaceDeletes returns the operations that delete every key of ns but
// its tombstone: its head, its prefixes and its goal in each of zones.
func (s *Store) namespaceDeletes(ns string, zones []string) []clientv3.Op {
	ops := []clientv3.Op{
		clientv3.OpDelete(s.lay.nsmeta(ns)),
		clientv3.OpDelete(s.lay.policy(ns)),
	}
	for _, p := range []string{
		s.lay.dataOf(ns), s.lay.requestsPrefix(ns), s.lay.policyHistoryPrefix(ns),
		s.lay.rolloutsOf(ns), s.lay.rolloutEventsNS(ns), s.lay.rolloutCommandsOf(ns),
		s.lay.evaluationsNS(ns), s.lay.experimentsOf(ns),
	} {
		ops = append(ops, clientv3.OpDelete(p, clientv3.WithPrefix()))
	}
	for _, z := range zones {
		ops = append(ops, clientv3.OpDelete(s.lay.goal(z, ns)))
	}
	return ops
}

// readHeads decodes the heads of a read (a prefix or one key).
func readHeads(r *clientv3.GetResponse) ([]*lehrpb.Namespace, []int64, error) {
	var heads []*lehrpb.Namespace
	var mods []int64
	for _, kv := range r.Kvs {
		h := new(lehrpb.Namespace)
		if err := decode(string(kv.Key), kv.Value, h); err != nil {
			return nil, nil, err
		}
		heads = append(heads, h)
		mods = append(mods, kv.ModRevision)
	}
	return heads, mods, nil
}

// zoneNames returns the zones of a keys-only read of the zones prefix.
func (s *Store) zoneNames(r *clientv3.GetResponse) []string {
	zones := make([]string, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		zones = append(zones, s.lay.zoneFromKey(string(kv.Key)))
	}
	return zones
}

// reportsAbout reads the live reports of zones, a zone at a time (a
// report may be up to MaxZoneReportBytes), and keeps of each only what it
// says of the namespaces of heads: its id, agents, versions and health.
// Reports change every few seconds and are read as they are now, not at a
// deletion's revision: NAMESPACE_IN_USE is as of the read.
func (s *Store) reportsAbout(ctx context.Context, zones []string, heads []*lehrpb.Namespace) (map[string][]*lehrpb.DistributorStatus, error) {
	of := make(map[string]bool, len(heads))
	for _, h := range heads {
		of[h.GetName()] = true
	}
	out := map[string][]*lehrpb.DistributorStatus{}
	for _, z := range zones {
		reports, err := s.zoneReports(ctx, z)
		if err != nil {
			return nil, fmt.Errorf("zone status %s: %w", z, err)
		}
		for _, d := range reports {
			kept := &lehrpb.DistributorStatus{DistributorId: d.GetDistributorId(), Agents: d.GetAgents()}
			for _, v := range d.GetVersions() {
				if of[v.GetNamespace()] {
					kept.Versions = append(kept.Versions, v)
				}
			}
			for _, h := range d.GetHealth() {
				if of[h.GetNamespace()] {
					kept.Health = append(kept.Health, h)
				}
			}
			out[z] = append(out[z], kept)
		}
	}
	return out, nil
}

// countVersions counts the version records of each of nss at revision
// rev, in reads of at most maxOpsPerTxn ranges.
func (s *Store) countVersions(ctx context.Context, nss []*lehrpb.Namespace, rev int64) (int, error) {
	n := 0
	for i := 0; i < len(nss); i += maxOpsPerTxn {
		var ops []clientv3.Op
		for _, h := range nss[i:min(i+maxOpsPerTxn, len(nss))] {
			ops = append(ops, clientv3.OpGet(s.lay.versionsPrefix(h.GetName()), clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev)))
		}
		rs, _, err := s.readAt(ctx, ops...)
		if err != nil {
			return 0, err
		}
		for _, r := range rs {
			n += int(r.Count)
		}
	}
	return n, nil
}

// DeleteNamespace removes namespace ns and everything of it — its
// versions and content, its goal in every zone, its rollouts with their
// events, commands and canary evaluations, its rollout policy and that
// policy's history, its policy experiments, its request records and, for
// a policy, its preview namespace — and credits what it stored back to
// its domain, leaving a tombstone with its last version (see the top of
// this file). A missing namespace is a *NotFoundError (unless this is a
// retry of o.RequestID's deletion); o.Check may refuse.
func (s *Store) DeleteNamespace(ctx context.Context, ns string, o DeleteOptions) (Deletion, error) {
	domain, _, err := names.Namespace(ns)
	if err != nil {
		return Deletion{}, fmt.Errorf("store: delete namespace: %w: %w", ErrInvalid, err)
	}
	preview := names.Preview(ns)
	if _, _, err := names.Namespace(preview); err != nil || names.IsPreview(ns) {
		preview = "" // a name too long to have one, or a preview itself
	}
	hkey, ukey, tkey := s.lay.nsmeta(ns), s.lay.usage(domain), s.lay.nsTombstone(ns)
	var out Deletion
	err = optimistic(ctx, "delete namespace "+ns, func(int) (bool, error) {
		const iHead, iUsage, iTomb, iZones, iRollouts, iVersions = 0, 1, 2, 3, 4, 5
		ops := []clientv3.Op{
			iHead:     clientv3.OpGet(hkey),
			iUsage:    clientv3.OpGet(ukey),
			iTomb:     clientv3.OpGet(tkey),
			iZones:    clientv3.OpGet(s.lay.zonesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			iRollouts: clientv3.OpGet(s.lay.rolloutsOf(ns), clientv3.WithPrefix()),
			iVersions: clientv3.OpGet(s.lay.versionsPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		}
		iPreview := -1
		if preview != "" {
			iPreview = len(ops)
			ops = append(ops, clientv3.OpGet(s.lay.nsmeta(preview)),
				clientv3.OpGet(s.lay.versionsPrefix(preview), clientv3.WithPrefix(), clientv3.WithCountOnly()))
		}
		rs, rev, err := s.readAt(ctx, ops...)
		if err != nil {
			return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
		}
		tomb, err := decodeTombstone(rs[iTomb])
		if err != nil {
			return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
		}
		if len(rs[iHead].Kvs) == 0 {
			if o.RequestID != "" && tomb.GetRequestId() == o.RequestID {
				out = Deletion{LastVersion: tomb.GetLastVersion(), Repeated: true}
				return true, nil
			}
			return false, &NotFoundError{What: "namespace", Name: ns}
		}
		heads, mods, err := readHeads(rs[iHead])
		if err != nil {
			return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
		}
		versions := int(rs[iVersions].Count)
		if iPreview >= 0 && len(rs[iPreview].Kvs) > 0 {
			ph, pm, err := readHeads(rs[iPreview])
			if err != nil {
				return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
			}
			heads, mods = append(heads, ph...), append(mods, pm...)
			versions += int(rs[iPreview+1].Count)
		}
		st := DeletionState{Namespaces: heads}
		for _, kv := range rs[iRollouts].Kvs {
			r := new(lehrpb.Rollout)
			if err := decode(string(kv.Key), kv.Value, r); err != nil {
				return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
			}
			st.Rollouts = append(st.Rollouts, r)
		}
		if o.ReadReports {
			if st.Reports, err = s.reportsAbout(ctx, s.zoneNames(rs[iZones]), heads); err != nil {
				return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
			}
		}
		if o.Check != nil {
			if err := o.Check(st); err != nil {
				return false, err
			}
		}
		usage, err := decodeUsage(rs[iUsage])
		if err != nil {
			return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
		}
		zones := s.zoneNames(rs[iZones])
		now := timestamppb.New(s.opts.Now())

		// One transaction per group: the namespace and its preview if
		// both fit, else the preview first (see the top of this file).
		type group struct {
			heads []*lehrpb.Namespace
			mods  []int64
		}
		groups := []group{{heads, mods}}
		perNS := len(s.namespaceDeletes(ns, zones)) + 1 // and its tombstone
		if len(heads) > 1 && len(heads)*perNS+1 > maxDeleteTxnOps {
			groups = []group{{heads[1:], mods[1:]}, {heads[:1], mods[:1]}}
		}
		var freed int64
		for _, h := range heads {
			freed += h.GetStoredBytes()
		}
		for gi, g := range groups {
			cmps := []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(s.lay.zonesPrefix()), "<", rev+1).WithPrefix(),
				clientv3.Compare(clientv3.ModRevision(s.lay.rolloutsOf(ns)), "<", rev+1).WithPrefix(),
			}
			// Every group is decided on the namespace as read.
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(hkey), "=", mods[0]))
			var then []clientv3.Op
			var credit int64
			for i, h := range g.heads {
				if h.GetName() != ns {
					cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.lay.nsmeta(h.GetName())), "=", g.mods[i]))
				}
				last := h.GetLatestVersion()
				if h.GetName() == ns {
					last = max(last, tomb.GetLastVersion())
				}
				tb, err := encode(&lehrpb.Tombstone{LastVersion: last, DeleteTime: now, RequestId: o.RequestID})
				if err != nil {
					return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
				}
				then = append(then, s.namespaceDeletes(h.GetName(), zones)...)
				then = append(then, clientv3.OpPut(s.lay.nsTombstone(h.GetName()), string(tb)))
				credit += h.GetStoredBytes()
				if h.GetName() == ns {
					out.LastVersion = last
				}
			}
			done, err := s.creditUsage(ctx, domain, ukey, &usage, credit, cmps, then)
			if err != nil {
				return false, fmt.Errorf("store: delete namespace %s: %w", ns, err)
			}
			if !done {
				if gi > 0 {
					s.log.Info("store: deleted the preview namespace of a policy whose deletion lost a race; deciding again", "namespace", ns)
				}
				return false, nil // another writer came first: read and decide again
			}
		}
		out.Namespaces, out.Versions, out.StoredBytes = len(heads), versions, freed
		return true, nil
	})
	if err != nil {
		return Deletion{}, err
	}
	if !out.Repeated {
		s.space.wantReclaim() // give etcd's space back now
	}
	return out, nil
}

// creditUsage runs a deletion's transaction — cmps and then, crediting
// credit bytes back to domain's usage record, read as *u — and reports
// whether it committed. Another commit of the domain moving the usage
// record, and nothing else moving, is no reason to decide again: the
// transaction is tried again with the credit on the new record (as a
// Commit's charge is). done false means another guard failed.
func (s *Store) creditUsage(ctx context.Context, domain, ukey string, u *domainUsage, credit int64, cmps []clientv3.Cmp, then []clientv3.Op) (done bool, err error) {
	err = optimistic(ctx, "credit the usage of domain "+domain, func(int) (bool, error) {
		next := proto.CloneOf(u.rec)
		next.StoredBytes = max(0, next.GetStoredBytes()-credit)
		ub, err := encode(next)
		if err != nil {
			return false, err
		}
		ops := append(then[:len(then):len(then)], clientv3.OpPut(ukey, string(ub)))
		resp, err := s.txn(ctx, append(cmps[:len(cmps):len(cmps)], u.guard(ukey)), ops, []clientv3.Op{clientv3.OpGet(ukey)})
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			done = true
			if s.opts.OnDomainUsage != nil {
				s.opts.OnDomainUsage(domain, next.GetStoredBytes())
			}
			return true, nil
		}
		moved, err := decodeUsage((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
		if err != nil {
			return false, err
		}
		if moved.mod == u.mod {
			return true, nil // another guard failed: done stays false
		}
		*u = moved
		return false, nil
	})
	return done, err
}

// DeleteDomain removes domain and, with it, every namespace of it (as
// DeleteNamespace does), its rollout policy and its usage record, in one
// transaction, leaving a tombstone with the last version any of its
// namespaces had (see the top of this file). A missing domain is a
// *NotFoundError (unless this is a retry of o.RequestID's deletion);
// o.Check may refuse — a domain that still has namespaces, say.
func (s *Store) DeleteDomain(ctx context.Context, domain string, o DeleteOptions) (Deletion, error) {
	if err := names.Domain(domain); err != nil {
		return Deletion{}, fmt.Errorf("store: delete domain: %w: %w", ErrInvalid, err)
	}
	dkey, tkey := s.lay.domain(domain), s.lay.domainTombstone(domain)
	nsPrefix, nsTombs := s.lay.nsmetaDomain(domain), s.lay.nsTombstonesDomain(domain)
	var out Deletion
	err := optimistic(ctx, "delete domain "+domain, func(int) (bool, error) {
		rs, rev, err := s.readAt(ctx,
			clientv3.OpGet(dkey),
			clientv3.OpGet(tkey),
			clientv3.OpGet(nsPrefix, clientv3.WithPrefix()),
			clientv3.OpGet(nsTombs, clientv3.WithPrefix()),
			clientv3.OpGet(s.lay.zonesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		tomb, err := decodeTombstone(rs[1])
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		if len(rs[0].Kvs) == 0 {
			if o.RequestID != "" && tomb.GetRequestId() == o.RequestID {
				out = Deletion{LastVersion: tomb.GetLastVersion(), Repeated: true}
				return true, nil
			}
			return false, &NotFoundError{What: "domain", Name: domain}
		}
		d := new(lehrpb.Domain)
		if err := decode(dkey, rs[0].Kvs[0].Value, d); err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		d.Etag = domainEtag(rs[0].Kvs[0].ModRevision)
		heads, _, err := readHeads(rs[2])
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		if o.Check != nil {
			if err := o.Check(DeletionState{Domain: d, Namespaces: heads}); err != nil {
				return false, err
			}
		}
		last := tomb.GetLastVersion()
		var freed int64
		for _, h := range heads {
			last = max(last, h.GetLatestVersion())
			freed += h.GetStoredBytes()
		}
		for _, kv := range rs[3].Kvs {
			t := new(lehrpb.Tombstone)
			if err := decode(string(kv.Key), kv.Value, t); err != nil {
				return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
			}
			last = max(last, t.GetLastVersion())
		}
		versions, err := s.countVersions(ctx, heads, rev)
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		tb, err := encode(&lehrpb.Tombstone{LastVersion: last, DeleteTime: timestamppb.New(s.opts.Now()), RequestId: o.RequestID})
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		prefixes := []string{
			nsPrefix, nsTombs, s.lay.dataOf(domain), s.lay.requestsPrefix(domain),
			s.lay.prefix + "policies/ns/" + domain + "/", s.lay.policyHistoryPrefix(domain), s.lay.prefix + "policyhist/ns/" + domain + "/",
			s.lay.rolloutsOf(domain), s.lay.rolloutEventsNS(domain), s.lay.rolloutCommandsOf(domain),
			s.lay.evaluationsNS(domain), s.lay.experimentsOf(domain),
		}
		for _, z := range s.zoneNames(rs[4]) {
			prefixes = append(prefixes, s.lay.goalsZone(z)+domain+"/")
		}
		then := []clientv3.Op{
			clientv3.OpDelete(dkey),
			clientv3.OpDelete(s.lay.policy(domain)),
			clientv3.OpDelete(s.lay.usage(domain)),
			clientv3.OpPut(tkey, string(tb)),
		}
		for _, p := range prefixes {
			then = append(then, clientv3.OpDelete(p, clientv3.WithPrefix()))
		}
		resp, err := s.txn(ctx, []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(dkey), "=", rs[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(nsPrefix), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(nsTombs), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(s.lay.zonesPrefix()), "<", rev+1).WithPrefix(),
		}, then, nil)
		if err != nil {
			return false, fmt.Errorf("store: delete domain %s: %w", domain, err)
		}
		if !resp.Succeeded {
			return false, nil
		}
		out = Deletion{Namespaces: len(heads), Versions: versions, StoredBytes: freed, LastVersion: last}
		return true, nil
	})
	if err != nil {
		return Deletion{}, err
	}
	if !out.Repeated {
		if s.opts.OnDomainUsage != nil {
			s.opts.OnDomainUsage(domain, 0)
		}
		s.space.wantReclaim()
	}
	return out, nil
}
