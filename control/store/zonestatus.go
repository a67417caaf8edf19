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

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Limits of zone status reports.
const (
	// MaxDistributorIDBytes bounds a distributor id, which is part of a key.
	MaxDistributorIDBytes = 128
	// MaxZoneReportBytes bounds one encoded report: it is one etcd put,
	// which etcd's default request limit (1.5 MiB) must hold.
	MaxZoneReportBytes = 1 << 20
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
// is empty or longer than MaxDistributorIDBytes, a ttl below one second or
// a report whose encoding exceeds MaxZoneReportBytes, and with a
// *NotFoundError when the zone is not registered. On an error for which
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
	b, err := encode(st)
	if err != nil {
		return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, err)
	}
	if len(b) > MaxZoneReportBytes {
		return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id,
			invalidf("the report is %d bytes encoded; at most %d fit in one etcd request", len(b), MaxZoneReportBytes))
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
	key := s.lay.zoneStatus(zone, id)
	zkey := s.lay.zone(zone)
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
		resp, err := s.txn(ctx,
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(zkey), ">", 0)},
			[]clientv3.Op{clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))}, nil)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			lease = ReportLease{}
			continue
		}
		if err != nil {
			return lease, fmt.Errorf("store: put zone status %s/%s: %w", zone, id, err)
		}
		if !resp.Succeeded {
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
		clientv3.OpGet(s.lay.zoneStatusPrefix(zone), clientv3.WithPrefix()))
	if err != nil {
		return nil, fmt.Errorf("store: zone status %s: %w", zone, err)
	}
	if rs[0].Count == 0 {
		return nil, fmt.Errorf("store: zone status: %w", &NotFoundError{What: "zone", Name: zone})
	}
	out := make([]*lehrpb.DistributorStatus, 0, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		st := new(lehrpb.DistributorStatus)
		if err := decode(string(kv.Key), kv.Value, st); err != nil {
			s.log.Error("store: skipping a zone status report", "zone", zone, "err", err)
			continue
		}
		st.DistributorId = s.lay.distributorFromZoneStatus(zone, string(kv.Key))
		out = append(out, st)
	}
	return out, nil
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
