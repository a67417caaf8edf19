package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Readers for distributors (docs/operations.md, "Security model"). A
// domain's acl.readers name the zones ("zone") and hosts ("zone/host")
// that may receive its namespaces; none means every host. Distributors
// enforce them host by host (distributor/fanout). Control enforces them
// zone by zone, for callers with a distributor certificate: it serves a
// domain's content and goals only to distributors of a zone the readers
// admit — a zone entry, or a zone/host entry of that zone:
//
//   - FetchVersion, FetchDelta, and GetGoals of one namespace, of a domain
//     that does not admit the zone, are refused with PERMISSION_DENIED
//     naming the distributor, the domain and its readers;
//   - GetGoals of the whole zone and WatchGoals leave the domain's goals
//     out, as if it had none in the zone. When the readers change to admit
//     the zone a goal watch sends the domain's goals, and when they change
//     to exclude it, deletes them — a watch resumed across the change as
//     well (goalFilter).
//
// Every other caller reads every domain: reads are open to users (as Get
// is), and to callers control cannot identify.

// admitsZone reports whether readers admit a host of zone.
func admitsZone(readers []string, zone string) bool {
	if len(readers) == 0 {
		return true
	}
	for _, r := range readers {
		if r == zone || strings.HasPrefix(r, zone+"/") {
			return true
		}
	}
	return false
}

// distributorOf returns the identity of a caller with a verified
// distributor certificate.
func distributorOf(ctx context.Context) (tlsconfig.Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsconfig.Identity{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tlsconfig.Identity{}, false
	}
	id, ok, err := tlsconfig.PeerRole(ti.State)
	if err != nil || !ok || id.Role != tlsconfig.RoleDistributor {
		return tlsconfig.Identity{}, false
	}
	return id, true
}

// mayRead returns nil if the caller may read the content or goal of
// namespace ns (a valid name), else the PERMISSION_DENIED to answer. A
// domain that does not exist is left to the handler (NOT_FOUND).
func (s *Service) mayRead(ctx context.Context, ns string) error {
	id, ok := distributorOf(ctx)
	if !ok {
		return nil
	}
	dname, _, _ := names.Namespace(ns)
	d, err := s.st.GetDomain(ctx, dname)
	var nf *store.NotFoundError
	switch {
	case errors.As(err, &nf):
		return nil
	case err != nil:
		return withField(s.apiError(ctx, err), "namespace")
	case admitsZone(d.GetAcl().GetReaders(), id.Zone):
		return nil
	}
	s.metrics.GetOrCreateCounter(fmt.Sprintf(`lehr_control_reader_denials_total{domain=%q}`, dname)).Inc()
	return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "namespace",
		"%s may not read %s: domain %q's acl.readers (%s) admit no host of zone %q, and control serves a domain's content and goals only to "+
			"distributors of the zones its readers name; a domain admin can add the zone with 'lehr domain update %s --readers …'",
		id, ns, dname, strings.Join(d.GetAcl().GetReaders(), ", "), id.Zone, dname)
}

// goalFilter keeps a distributor's view of its zone's goals to the
// domains whose readers admit the zone.
type goalFilter struct {
	zone string
	// admit is, by domain, whether the client was last told the domain's
	// goals (true) or none (false).
	admit map[string]bool
	// covered is, by domain, the revision of the goals sent when the
	// readers came to admit the zone: goal events up to it are not sent
	// again (they would take a goal back).
	covered map[string]int64
}

// goalFilterOf returns the goal filter of the caller of ctx for zone, or
// nil for a caller that is not a distributor: it sees every goal.
func (s *Service) goalFilterOf(ctx context.Context, zone string) (*goalFilter, error) {
	if _, ok := distributorOf(ctx); !ok {
		return nil, nil
	}
	readers, _, err := s.st.DomainReaders(ctx)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	f := &goalFilter{zone: zone, admit: make(map[string]bool, len(readers)), covered: map[string]int64{}}
	for d, rs := range readers {
		f.admit[d] = admitsZone(rs, zone)
	}
	return f, nil
}

// admits reports whether the client may see the goals of domain; a domain
// created since the filter was made is read.
func (f *goalFilter) admits(ctx context.Context, st *store.Store, domain string) (bool, error) {
	if a, ok := f.admit[domain]; ok {
		return a, nil
	}
	d, err := st.GetDomain(ctx, domain)
	var nf *store.NotFoundError
	switch {
	case errors.As(err, &nf):
		return false, nil
	case err != nil:
		return false, err
	}
	f.admit[domain] = admitsZone(d.GetAcl().GetReaders(), f.zone)
	return f.admit[domain], nil
}

// goals returns the goals of gs the client may see.
func (f *goalFilter) goals(ctx context.Context, st *store.Store, gs []*lehrpb.GoalState) ([]*lehrpb.GoalState, error) {
	out := gs[:0:0]
	for _, g := range gs {
		d, _, _ := strings.Cut(g.GetNamespace(), "/")
		ok, err := f.admits(ctx, st, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// events returns the events of a goal watch batch the client may see, and
// the goals they replaced. Deletions always go: they reveal nothing.
func (f *goalFilter) events(ctx context.Context, st *store.Store, b store.GoalBatch) ([]*lehrpb.GoalEvent, []*lehrpb.GoalState, error) {
	var evs []*lehrpb.GoalEvent
	var prev []*lehrpb.GoalState
	for i, ev := range b.Events {
		d, _, _ := strings.Cut(ev.GetGoal().GetNamespace(), "/")
		if ev.GetType() != lehrpb.GoalEvent_TYPE_DELETE {
			if b.Revision <= f.covered[d] {
				continue
			}
			ok, err := f.admits(ctx, st, d)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				continue
			}
		}
		evs = append(evs, ev)
		prev = append(prev, b.Previous[i])
	}
	return evs, prev, nil
}

// changed applies a batch of domain changes and returns the goal events
// they make: a domain whose readers came to admit the zone sends its
// goals, one whose readers no longer admit it deletes them. A change is
// judged by the record before and after it, so a watch resumed from
// before the change makes the same events.
func (f *goalFilter) changed(ctx context.Context, st *store.Store, b store.DomainBatch) ([]*lehrpb.GoalEvent, error) {
	var out []*lehrpb.GoalEvent
	for _, c := range b.Changes {
		after := c.After != nil && admitsZone(c.After.GetAcl().GetReaders(), f.zone)
		before, known := f.admit[c.Name]
		if c.Before != nil {
			before, known = admitsZone(c.Before.GetAcl().GetReaders(), f.zone), true
		}
		f.admit[c.Name] = after
		if !known || before == after {
			continue // a new domain has no goals yet
		}
		gs, rev, err := st.DomainGoals(ctx, f.zone, c.Name)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if after {
				out = append(out, &lehrpb.GoalEvent{Type: lehrpb.GoalEvent_TYPE_PUT, Goal: g})
			} else {
				out = append(out, &lehrpb.GoalEvent{Type: lehrpb.GoalEvent_TYPE_DELETE,
					Goal: &lehrpb.GoalState{Zone: f.zone, Namespace: g.GetNamespace()}})
			}
		}
		if after {
			f.covered[c.Name] = rev
		} else {
			delete(f.covered, c.Name)
		}
	}
	return out, nil
}
