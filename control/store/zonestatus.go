package store

// Zone status reports.
//
// Every distributor reports periodically how many of its agents hold each
// version of each namespace (ReportZoneStatus). The latest report of each
// distributor is one key,
//
//	zonestatus/<zone>/<distributor_id>        lehrpb.DistributorStatus
//
// attached to an etcd lease whose TTL is the report's time to live. A
// distributor that stops reporting disappears when its lease expires, with
// no sweeper: etcd deletes the key. Because the state is in etcd, every
// control replica sees every report, whichever replica received it.
//
// Leases. Granting a lease per report would leave up to TTL/interval live
// leases per distributor in etcd; instead the caller keeps one lease per
// (zone, distributor) and hands it back on the next report (ReportLease,
// returned by PutZoneStatus). A report with a known lease of the same TTL
// costs two requests: a keep-alive that renews the lease, then a
// transaction that writes the report attached to it. A new lease is granted
// when there is none, when the TTL changed (the old lease is then revoked
// once the report has moved off it), or when etcd no longer knows the
// lease (it expired because reports stopped for longer than the TTL, or
// another process revoked it). The transaction is guarded by the zone
// being registered; a report for an unknown zone fails with NotFound and
// leaves nothing behind (a lease granted for it is revoked).
//
// Several control replicas may receive reports from one distributor (after
// a failover). Each keeps its own lease for it; the key is attached to the
// lease of whichever replica wrote it last, and a lease left without keys
// simply expires. Every report rewrites the key, so the key is always
// attached to the lease that was just renewed.
//
// etcd raises a TTL below its minimum (about 2 s with default election
// settings) to that minimum.
//
// Large reports. A distributor whose agents subscribe to tens of thousands
// of namespaces reports as many version counts (24 bytes and more each):
// more than one etcd request holds (1.5 MiB by default). A report whose
// encoding exceeds MaxZoneReportPartBytes is stored in parts:
//
//	zonestatus/<zone>/<distributor_id>              the report without its version counts
//	zonereports/<zone>/<id hash>/index              lehrpb.ZoneReportIndex, the parts in order
//	zonereports/<zone>/<id hash>/p/<sha256 hex>     lehrpb.ZoneReportPart, a run of version counts
//
// all on the report's lease. The counts, sorted by namespace and version,
// are cut where a namespace's hash says so (content-defined, between
// partMinBytes and partMaxBytes), and a part is named by the hash of its
// encoding: a part whose counts did not change since the last report on
// the same lease is not written again, so a fleet at rest rewrites only the
// small rest of its report. The parts a report lacks are written first,
// in transactions of their own; then one transaction, guarded by the
// index's revision and by every part it names existing, writes the report
// and the index and deletes the parts no longer named. A reader reads the
// reports and the parts at one revision, so it sees every part of the
// report it reads. A report small enough for one key deletes its
// distributor's index and parts in the transaction that writes it. Parts
// a failed report wrote before its last transaction stay until the next
// report deletes them or their lease expires.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Limits of zone status reports.
const (
	// MaxDistributorIDBytes bounds a distributor id, which is part of a key.
	MaxDistributorIDBytes = 128
	// MaxZoneReportPartBytes bounds one stored piece of a report — a
	// whole report, the rest of a report stored in parts, or a part: it
	// is one etcd put, which etcd's default request limit (1.5 MiB) must
	// hold.
	MaxZoneReportPartBytes = 1 << 20
	// MaxZoneReportBytes bounds one encoded report, all its parts
	// together: about 200,000 version counts. With parts of at least
	// partMinBytes, the transaction that commits a report stays within
	// maxOpsPerTxn.
	MaxZoneReportBytes = 6 << 20
)

// How a large report's version counts are cut into parts: after at least
// partMinBytes, where a namespace's hash is 0 modulo partCutOdds (about
// one namespace in 2,048, some 80 KiB of counts), and before
// partMaxBytes.
const (
	partMinBytes = 64 << 10
	partMaxBytes = 256 << 10
	partCutOdds  = 2048
)

// ReportLease is the etcd lease a distributor's report is attached to, as
// returned by PutZoneStatus for the caller to pass to the next call. The
// zero value means none: the next PutZoneStatus grants one.
type ReportLease struct {
	// ID is the etcd lease.
	ID clientv3.LeaseID
	// TTL is the time to live the lease was granted for, as requested.
	TTL time.Duration
}

// PutZoneStatus stores st as the latest report of distributor
// st.DistributorId in zone, valid for ttl (whole seconds, at least one),
// and returns the lease it is attached to. lease is the one the previous
// call returned for the same zone and distributor, or the zero ReportLease;
// see the comment at the top of this file.
//
// It fails with ErrInvalid for a malformed zone name, a distributor id that
// is empty or longer than MaxDistributorIDBytes, a ttl below one second, a
// report whose encoding exceeds MaxZoneReportBytes or whose fields other
// than its version counts exceed MaxZoneReportPartBytes, and with a
// *NotFoundError when the zone is not registered. A report larger than
// MaxZoneReportPartBytes is stored in parts (see the top of this file). On an error for which
// IsUnavailable is true the report may or may not have been stored; the
// next report overwrites it either way.
func (s *Store) PutZoneStatus(ctx context.Context, zone string, st *lehrpb.DistributorStatus, ttl time.Duration, lease ReportLease) (ReportLease, error) {
	id := st.GetDistributorId()
	if err := names.Zone(zone); err != nil {
		return lease, fmt.Errorf("store: put zone status: %w: %w", ErrInvalid, err)
	}
	if id == "" || len(id) > MaxDistributorIDBytes {
		return lease, fmt.Errorf("store: put zone status %s: %w", zone,
			invalidf("distributor id is %d bytes; want 1 to %d", len(id), MaxDistributorIDBytes))
	}
	secs := int64(ttl / time.Second)
	if secs < 1 || ttl%time.Second != 0 {
		return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, invalidf("ttl %v is not a whole number of seconds >= 1", ttl))
	}
	rep, err := splitZoneReport(st)
	if err != nil {
		return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, err)
	}

	var old ReportLease // a lease to revoke once the report no longer uses it
	if lease.ID != 0 && lease.TTL != ttl {
		old, lease = lease, ReportLease{}
	}
	if lease.ID != 0 {
		switch err := s.keepAlive(ctx, lease.ID); {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			lease = ReportLease{}
		case err != nil:
			return lease, fmt.Errorf("store: put zone status %s/%s: renew lease %x: %w", zone, id, lease.ID, err)
		}
	}
	// Two rounds: the lease may expire between the keep-alive (or the
	// grant) and the put when the TTL is tiny and etcd is slow.
	for attempt := 0; ; attempt++ {
		granted := false
		if lease.ID == 0 {
			resp, err := s.grant(ctx, secs)
			if err != nil {
				return lease, fmt.Errorf("store: put zone status %s/%s: grant lease: %w", zone, id, err)
			}
			lease, granted = ReportLease{ID: resp.ID, TTL: ttl}, true
		}
		var stored bool
		if len(rep.parts) == 0 {
			stored, err = s.putWholeReport(ctx, zone, id, rep.head, lease.ID)
		} else {
			stored, err = s.putReportInParts(ctx, zone, id, rep, lease.ID)
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			lease = ReportLease{}
			continue
		}
		if err != nil {
			return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, err)
		}
		if !stored {
			if granted {
				s.revoke(ctx, lease.ID)
			}
			return ReportLease{}, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, &NotFoundError{What: "zone", Name: zone})
		}
		break
	}
	if old.ID != 0 && old.ID != lease.ID {
		s.revoke(ctx, old.ID)
	}
	return lease, nil
}

// ZoneStatus returns the live reports of a zone's distributors, sorted by
// distributor id, read at one revision. A *NotFoundError if the zone is not
// registered. A stored report that does not decode is logged and skipped:
// it expires with its lease.
func (s *Store) ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error) {
	if err := names.Zone(zone); err != nil {
		return nil, fmt.Errorf("store: zone status: %w: %w", ErrInvalid, err)
	}
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.zone(zone), clientv3.WithCountOnly()),
		clientv3.OpGet(s.lay.zoneStatusPrefix(zone), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.zoneReportsZone(zone), clientv3.WithPrefix()))
	if err != nil {
		return nil, fmt.Errorf("store: zone status %s: %w", zone, err)
	}
	if rs[0].Count == 0 {
		return nil, fmt.Errorf("store: zone status: %w", &NotFoundError{What: "zone", Name: zone})
	}
	return s.assembleReports(zone, rs[1].Kvs, rs[2].Kvs), nil
}

// zoneReports returns the live reports of zone as ZoneStatus does, without
// checking that the zone is registered.
func (s *Store) zoneReports(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error) {
	rs, _, err := s.readAt(ctx,
		clientv3.OpGet(s.lay.zoneStatusPrefix(zone), clientv3.WithPrefix()),
		clientv3.OpGet(s.lay.zoneReportsZone(zone), clientv3.WithPrefix()))
	if err != nil {
		return nil, err
	}
	return s.assembleReports(zone, rs[0].Kvs, rs[1].Kvs), nil
}

// assembleReports decodes the reports of zone (heads, under
// zonestatus/<zone>/) and completes those stored in parts from parts (all
// under zonereports/<zone>/), both read at one revision. A report that does
// not decode or lacks a part is logged and skipped: it expires with its
// lease.
func (s *Store) assembleReports(zone string, heads, parts []*mvccpb.KeyValue) []*lehrpb.DistributorStatus {
	indexes := make(map[string]*mvccpb.KeyValue) // by id hash
	blobs := make(map[string][]byte)             // by "<id hash>/<part name>"
	pprefix := s.lay.zoneReportsZone(zone)
	for _, kv := range parts {
		rest := strings.TrimPrefix(string(kv.Key), pprefix)
		h, what, _ := strings.Cut(rest, "/")
		switch {
		case what == "index":
			indexes[h] = kv
		case strings.HasPrefix(what, "p/"):
			blobs[h+"/"+strings.TrimPrefix(what, "p/")] = kv.Value
		}
	}
	out := make([]*lehrpb.DistributorStatus, 0, len(heads))
	for _, kv := range heads {
		st := new(lehrpb.DistributorStatus)
		if err := decode(string(kv.Key), kv.Value, st); err != nil {
			s.log.Error("store: skipping a zone status report", "zone", zone, "err", err)
			continue
		}
		st.DistributorId = s.lay.distributorFromZoneStatus(zone, string(kv.Key))
		if err := completeReport(st, indexes, blobs); err != nil {
			s.log.Error("store: skipping a zone status report", "zone", zone, "distributor", st.DistributorId, "err", err)
			continue
		}
		out = append(out, st)
	}
	return out
}

// completeReport appends to st the version counts of its parts, if it was
// stored in parts.
func completeReport(st *lehrpb.DistributorStatus, indexes map[string]*mvccpb.KeyValue, blobs map[string][]byte) error {
	h := reportIDHash(st.DistributorId)
	ikv, ok := indexes[h]
	if !ok {
		return nil
	}
	idx := new(lehrpb.ZoneReportIndex)
	if err := decode(string(ikv.Key), ikv.Value, idx); err != nil {
		return err
	}
	if idx.GetDistributorId() != st.DistributorId {
		return fmt.Errorf("%w: the index of its parts, %s, is distributor %q's", ErrCorrupt, ikv.Key, idx.GetDistributorId())
	}
	for _, name := range idx.GetParts() {
		b, ok := blobs[h+"/"+name]
		if !ok {
			return fmt.Errorf("%w: part %s of its version counts is missing", ErrCorrupt, name)
		}
		p := new(lehrpb.ZoneReportPart)
		if err := decode(name, b, p); err != nil {
			return err
		}
		st.Versions = append(st.Versions, p.GetVersions()...)
	}
	return nil
}

// splitReport is a report encoded for storage: head alone when it fits
// one key, else head without the version counts and the counts in parts.
type splitReport struct {
	head  []byte
	parts []reportPart
}

// reportPart is one encoded lehrpb.ZoneReportPart and its name.
type reportPart struct {
	name string
	b    []byte
}

// splitZoneReport encodes st for PutZoneStatus, in parts if it exceeds
// MaxZoneReportPartBytes. It does not modify st.
func splitZoneReport(st *lehrpb.DistributorStatus) (splitReport, error) {
	whole, err := encode(st)
	if err != nil {
		return splitReport{}, err
	}
	if len(whole) <= MaxZoneReportPartBytes {
		return splitReport{head: whole}, nil
	}
	if len(whole) > MaxZoneReportBytes {
		return splitReport{}, invalidf("the report is %d bytes encoded; at most %d are stored", len(whole), MaxZoneReportBytes)
	}
	// The rest of the report: every field but the version counts, shared
	// with st, not copied.
	rest := new(lehrpb.DistributorStatus)
	versionsField := st.ProtoReflect().Descriptor().Fields().ByName("versions")
	st.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != versionsField {
			rest.ProtoReflect().Set(fd, v)
		}
		return true
	})
	head, err := encode(rest)
	if err != nil {
		return splitReport{}, err
	}
	if len(head) > MaxZoneReportPartBytes {
		return splitReport{}, invalidf("the report without its version counts is %d bytes encoded; at most %d fit in one etcd request", len(head), MaxZoneReportPartBytes)
	}
	vs := slices.Clone(st.GetVersions())
	slices.SortFunc(vs, func(a, b *lehrpb.VersionCount) int {
		return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetVersion(), b.GetVersion()))
	})
	rep := splitReport{head: head}
	var run []*lehrpb.VersionCount
	size := 0
	cut := func() error {
		b, err := encode(&lehrpb.ZoneReportPart{Versions: run})
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rep.parts = append(rep.parts, reportPart{name: hex.EncodeToString(sum[:]), b: b})
		run, size = nil, 0
		return nil
	}
	for _, v := range vs {
		n := 1 + protowire.SizeBytes(proto.Size(v)) // as a repeated field: tag, length, message
		if size > 0 && size+n > partMaxBytes {
			if err := cut(); err != nil {
				return splitReport{}, err
			}
		}
		run = append(run, v)
		size += n
		if size >= partMinBytes && fnv32(v.GetNamespace())%partCutOdds == 0 {
			if err := cut(); err != nil {
				return splitReport{}, err
			}
		}
	}
	if len(run) > 0 {
		if err := cut(); err != nil {
			return splitReport{}, err
		}
	}
	return rep, nil
}

// fnv32 is the 32-bit FNV-1a hash of s: the same in every process, so
// every replica cuts a report where the last one did.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// reportIDHash names a distributor in the keys of its report's parts: a
// distributor id is free-form and may not be followed by more of a key.
func reportIDHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// putWholeReport stores a report that fits one key on lease, deleting the
// parts of an earlier report stored in parts. false if the zone is not
// registered.
func (s *Store) putWholeReport(ctx context.Context, zone, id string, b []byte, lease clientv3.LeaseID) (bool, error) {
	resp, err := s.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.lay.zone(zone)), ">", 0)},
		[]clientv3.Op{
			clientv3.OpPut(s.lay.zoneStatus(zone, id), string(b), clientv3.WithLease(lease)),
			clientv3.OpDelete(s.lay.zoneReportDist(zone, id), clientv3.WithPrefix()),
		}, nil)
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// putReportInParts stores a report in parts on lease (see the top of this
// file). false if the zone is not registered.
func (s *Store) putReportInParts(ctx context.Context, zone, id string, rep splitReport, lease clientv3.LeaseID) (bool, error) {
	ikey := s.lay.zoneReportIndex(zone, id)
	names := make([]string, len(rep.parts))
	for i, p := range rep.parts {
		names[i] = p.name
	}
	// Another replica may store a report of the same distributor at the
	// same time (a failover): the last transaction then fails its guard,
	// and the report is stored again over the other's, every part
	// rewritten.
	const tries = 3
	rewrite := false // a guard failed: write every part again
	for range tries {
		resp, err := s.get(ctx, ikey)
		if err != nil {
			return false, err
		}
		prev := new(lehrpb.ZoneReportIndex)
		var rev int64
		if len(resp.Kvs) == 1 {
			rev = resp.Kvs[0].ModRevision
			if err := decode(ikey, resp.Kvs[0].Value, prev); err != nil {
				prev.Reset() // replaced below
			}
		}
		reuse := !rewrite && prev.GetLease() == int64(lease) && prev.GetDistributorId() == id
		have := make(map[string]bool)
		if reuse {
			for _, n := range prev.GetParts() {
				have[n] = true
			}
		}
		if err := s.putReportParts(ctx, zone, id, rep.parts, have, lease); err != nil {
			return false, err
		}

		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(s.lay.zone(zone)), ">", 0),
			clientv3.Compare(clientv3.ModRevision(ikey), "=", rev),
		}
		for _, n := range names {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.lay.zoneReportPart(zone, id, n)), ">", 0))
		}
		then := []clientv3.Op{clientv3.OpPut(s.lay.zoneStatus(zone, id), string(rep.head), clientv3.WithLease(lease))}
		if !reuse || !slices.Equal(prev.GetParts(), names) {
			b, err := encode(&lehrpb.ZoneReportIndex{DistributorId: id, Lease: int64(lease), Parts: names})
			if err != nil {
				return false, err
			}
			then = append(then, clientv3.OpPut(ikey, string(b), clientv3.WithLease(lease)))
		}
		keep := make(map[string]bool, len(names))
		for _, n := range names {
			keep[n] = true
		}
		for _, n := range prev.GetParts() {
			if !keep[n] {
				then = append(then, clientv3.OpDelete(s.lay.zoneReportPart(zone, id, n)))
				keep[n] = true // once, should the old index name a part twice
			}
		}
		tresp, err := s.txn(ctx, cmps, then, []clientv3.Op{clientv3.OpGet(s.lay.zone(zone), clientv3.WithCountOnly())})
		if err != nil {
			return false, err
		}
		if tresp.Succeeded {
			return true, nil
		}
		if tresp.Responses[0].GetResponseRange().GetCount() == 0 {
			return false, nil
		}
		rewrite = true
	}
	return false, fmt.Errorf("%w: another report of the distributor was stored at the same time, %d times", ErrConflict, tries)
}

// putReportParts writes the parts not in have on lease, in transactions of
// at most maxTxnPayload bytes.
func (s *Store) putReportParts(ctx context.Context, zone, id string, parts []reportPart, have map[string]bool, lease clientv3.LeaseID) error {
	var ops []clientv3.Op
	payload := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.txn(ctx, nil, ops, nil)
		ops, payload = nil, 0
		return err
	}
	for _, p := range parts {
		if have[p.name] {
			continue
		}
		if len(ops) > 0 && (payload+len(p.b) > maxTxnPayload || len(ops) == maxOpsPerTxn) {
			if err := flush(); err != nil {
				return err
			}
		}
		ops = append(ops, clientv3.OpPut(s.lay.zoneReportPart(zone, id, p.name), string(p.b), clientv3.WithLease(lease)))
		payload += len(p.b)
		have[p.name] = true // once, should two parts be equal
	}
	return flush()
}

// ZoneReporters returns how many distributors of zone have a live report
// (their lease has not expired).
func (s *Store) ZoneReporters(ctx context.Context, zone string) (int, error) {
	if err := names.Zone(zone); err != nil {
		return 0, fmt.Errorf("store: zone reporters: %w: %w", ErrInvalid, err)
	}
	resp, err := s.get(ctx, s.lay.zoneStatusPrefix(zone), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: zone reporters %s: %w", zone, err)
	}
	return int(resp.Count), nil
}

// grant is one LeaseGrant request.
func (s *Store) grant(ctx context.Context, secs int64) (*clientv3.LeaseGrantResponse, error) {
	return call(s, ctx, "lease_grant", func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return s.cli.Grant(ctx, secs)
	})
}

// keepAlive renews a lease once. It returns an error wrapping
// rpctypes.ErrLeaseNotFound if etcd no longer knows the lease.
func (s *Store) keepAlive(ctx context.Context, id clientv3.LeaseID) error {
	_, err := call(s, ctx, "lease_keepalive", func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return s.cli.KeepAliveOnce(ctx, id)
	})
	return err
}

// revoke revokes a lease the caller no longer needs, best effort: a lease
// that is not revoked expires on its own.
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) {
	_, err := call(s, ctx, "lease_revoke", func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
		return s.cli.Revoke(ctx, id)
	})
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.log.Debug("store: revoke an unused report lease", "lease", fmt.Sprintf("%x", id), "err", err)
	}
}
