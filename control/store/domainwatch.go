package store

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

// What a distributor's goal watch needs to keep to the domains whose
// readers admit its zone (control/service/readers.go): every domain's
// readers, the changes of domains since a revision, and one domain's goals
// in a zone.

// DomainReaders returns every domain's acl.readers by domain name (an
// empty list admits every host), read at one revision, and that revision.
func (s *Store) DomainReaders(ctx context.Context) (map[string][]string, int64, error) {
	rs, rev, err := s.readAt(ctx, clientv3.OpGet(s.lay.domainsPrefix(), clientv3.WithPrefix()))
	if err != nil {
		return nil, 0, fmt.Errorf("store: domain readers: %w", err)
	}
	out := make(map[string][]string, len(rs[0].Kvs))
	for _, kv := range rs[0].Kvs {
		d := new(lehrpb.Domain)
		if err := decode(string(kv.Key), kv.Value, d); err != nil {
			return nil, 0, fmt.Errorf("store: domain readers: %w", err)
		}
		out[s.lay.domainFromKey(string(kv.Key))] = d.GetAcl().GetReaders()
	}
	return out, rev, nil
}

// DomainGoals returns the goal states of zone for the namespaces of
// domain, and the revision they were read at. An unregistered zone is a
// *NotFoundError.
func (s *Store) DomainGoals(ctx context.Context, zone, domain string) ([]*lehrpb.GoalState, int64, error) {
	if err := names.Zone(zone); err != nil {
		return nil, 0, fmt.Errorf("store: domain goals: %w: %w", ErrInvalid, err)
	}
	if err := names.Domain(domain); err != nil {
		return nil, 0, fmt.Errorf("store: domain goals: %w: %w", ErrInvalid, err)
	}
	rs, rev, err := s.readAt(ctx, clientv3.OpGet(s.lay.zone(zone), clientv3.WithCountOnly()),
		clientv3.OpGet(s.lay.goalsZone(zone)+domain+"/", clientv3.WithPrefix()))
	if err != nil {
		return nil, 0, fmt.Errorf("store: goals of %s in %s: %w", domain, zone, err)
	}
	if rs[0].Count == 0 {
		return nil, 0, &NotFoundError{What: "zone", Name: zone}
	}
	out := make([]*lehrpb.GoalState, 0, len(rs[1].Kvs))
	for _, kv := range rs[1].Kvs {
		g := new(lehrpb.GoalState)
		if err := decode(string(kv.Key), kv.Value, g); err != nil {
			return nil, 0, fmt.Errorf("store: goals of %s in %s: %w", domain, zone, err)
		}
		out = append(out, g)
	}
	return out, rev, nil
}

// DomainChange is one change of a domain's record. Before is nil for a
// domain created, After nil for one deleted.
type DomainChange struct {
	Name          string
	Before, After *lehrpb.Domain
}

// DomainBatch is the domain changes of one etcd revision.
type DomainBatch struct {
	Revision int64
	Changes  []DomainChange
	Err      error // ErrRevisionGone, or the watch failing; the channel closes after it
}

// WatchDomains streams the changes of every domain's record from revision
// fromRev (> 0), each with the record before and after it. The contract is
// WatchGoals' — the caller cancels ctx to stop it, batches arrive in
// revision order, a compacted fromRev is one batch with an Err wrapping
// ErrRevisionGone, any other failure a batch with its Err — without
// progress batches.
func (s *Store) WatchDomains(ctx context.Context, fromRev int64) <-chan DomainBatch {
	ch := make(chan DomainBatch)
	if fromRev <= 0 {
		failed := make(chan DomainBatch, 1)
		failed <- DomainBatch{Err: fmt.Errorf("store: watch domains: %w", invalidf("revision %d: want > 0", fromRev))}
		close(failed)
		return failed
	}
	go func() {
		defer close(ch)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		wch := s.cli.Watch(leaderOnly(wctx), s.lay.domainsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(fromRev), clientv3.WithPrevKV())
		send := func(b DomainBatch) bool {
			select {
			case ch <- b:
				return true
			case <-ctx.Done():
				return false
			}
		}
		fail := func(err error) {
			s.observe("watch", start, err)
			send(DomainBatch{Err: err})
		}
		for resp := range wch {
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				fail(fmt.Errorf("store: watch domains from %d (etcd compacted up to %d): %w", fromRev, resp.CompactRevision, ErrRevisionGone))
				return
			}
			if err := resp.Err(); err != nil {
				fail(fmt.Errorf("store: watch domains: %w", err))
				return
			}
			var b DomainBatch
			for _, ev := range resp.Events {
				if b.Revision != 0 && ev.Kv.ModRevision != b.Revision {
					if !send(b) {
						return
					}
					b = DomainBatch{}
				}
				b.Revision = ev.Kv.ModRevision
				key := string(ev.Kv.Key)
				c := DomainChange{Name: s.lay.domainFromKey(key)}
				if ev.PrevKv != nil {
					c.Before = new(lehrpb.Domain)
					if err := decode(key, ev.PrevKv.Value, c.Before); err != nil {
						fail(fmt.Errorf("store: watch domains: %w", err))
						return
					}
				}
				if ev.Type == clientv3.EventTypePut {
					c.After = new(lehrpb.Domain)
					if err := decode(key, ev.Kv.Value, c.After); err != nil {
						fail(fmt.Errorf("store: watch domains: %w", err))
						return
					}
				}
				b.Changes = append(b.Changes, c)
			}
			if len(b.Changes) > 0 && !send(b) {
				return
			}
		}
		if ctx.Err() != nil {
			s.observe("watch", start, nil)
			return
		}
		fail(fmt.Errorf("store: watch domains: watch closed by the etcd client"))
	}()
	return ch
}
