package service

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// initialBatch bounds the goal states in one initial WatchGoals message.
const initialBatch = 1000

// CreateZone registers a zone; its goals start at every namespace's latest
// version.
func (s *Service) CreateZone(ctx context.Context, req *lehrpb.CreateZoneRequest) (_ *lehrpb.Zone, err error) {
	defer s.track(ctx, "CreateZone", time.Now(), &err)
	if err := names.Zone(req.GetName()); err != nil {
		return nil, nameError("name", err)
	}
	z, err := s.st.CreateZone(ctx, req.GetName())
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, apierror.New(codes.AlreadyExists, apierror.ReasonAlreadyExists, "name", "zone %q already exists", req.GetName())
	}
	if err != nil {
		// ErrInvalid here: the store holds no more zones.
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.log.Info("control: created zone", "zone", z.GetName())
	return z, nil
}

// DeleteZone retires a zone (fleet admins only: acl.go): its record,
// goals, reports and last report time go, so rollouts stop reaching it —
// a zone whose distributors are gone for good otherwise stays silent and
// holds every rollout (docs/operations.md). Refused while a distributor
// of the zone reports, unless force.
func (s *Service) DeleteZone(ctx context.Context, req *lehrpb.DeleteZoneRequest) (_ *emptypb.Empty, err error) {
	defer s.track(ctx, "DeleteZone", time.Now(), &err)
	if err := names.Zone(req.GetName()); err != nil {
		return nil, nameError("name", err)
	}
	err = s.st.DeleteZone(ctx, req.GetName(), req.GetForce())
	if errors.Is(err, store.ErrZoneInUse) {
		return nil, apierror.New(codes.FailedPrecondition, apierror.ReasonZoneInUse, "name",
			"zone %q has distributors reporting (lehr zones status %s): stop them first, or delete it with force "+
				"(lehr zones delete %s --force): they lose their goals, and re-register the zone if they watch with create_zone",
			req.GetName(), req.GetName(), req.GetName())
	}
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.log.Info("control: deleted zone", "zone", req.GetName(), "force", req.GetForce())
	return &emptypb.Empty{}, nil
}

// ensureZone registers zone for a goal watch that asks to (create_zone),
// if the caller may create zones (fleet.go); a zone that exists needs no
// right to watch.
func (s *Service) ensureZone(ctx context.Context, zone string) error {
	refused := s.mayCreateZone(ctx, zone)
	if refused != nil {
		zs, err := s.st.ListZones(ctx)
		if err != nil {
			return withField(s.apiError(ctx, err), "zone")
		}
		if slices.ContainsFunc(zs, func(z *lehrpb.Zone) bool { return z.GetName() == zone }) {
			return nil
		}
		return refused
	}
	if err := s.st.EnsureZone(ctx, zone); err != nil {
		return withField(s.apiError(ctx, err), "zone")
	}
	return nil
}

// ListZones lists every registered zone.
func (s *Service) ListZones(ctx context.Context, req *lehrpb.ListZonesRequest) (_ *lehrpb.ListZonesResponse, err error) {
	defer s.track(ctx, "ListZones", time.Now(), &err)
	zs, err := s.st.ListZones(ctx)
	if err != nil {
		return nil, err
	}
	return &lehrpb.ListZonesResponse{Zones: zs}, nil
}

// GetGoals returns a zone's goal states, or one namespace's. A
// distributor gets those of the domains whose readers admit its zone, and
// PERMISSION_DENIED for one namespace of another (readers.go).
func (s *Service) GetGoals(ctx context.Context, req *lehrpb.GetGoalsRequest) (_ *lehrpb.GetGoalsResponse, err error) {
	defer s.track(ctx, "GetGoals", time.Now(), &err)
	if err := names.Zone(req.GetZone()); err != nil {
		return nil, nameError("zone", err)
	}
	if req.GetNamespace() != "" {
		if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
			return nil, nameError("namespace", err)
		}
		if err := s.mayRead(ctx, req.GetNamespace()); err != nil {
			return nil, err
		}
	}
	var f *goalFilter // one namespace's is decided above
	if req.GetNamespace() == "" {
		if f, err = s.goalFilterOf(ctx, req.GetZone()); err != nil {
			return nil, err
		}
	}
	goals, rev, err := s.st.Goals(ctx, req.GetZone(), req.GetNamespace())
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "zone")
	}
	if f != nil {
		if goals, err = f.goals(ctx, s.st, goals); err != nil {
			return nil, s.apiError(ctx, err)
		}
	}
	return &lehrpb.GetGoalsResponse{Goals: goals, Revision: rev}, nil
}

// WatchGoals streams a zone's goal states: with start_revision 0 the current
// state first, then every change. The stream ends when the client cancels,
// when the service closes (UNAVAILABLE: reconnect elsewhere and resume), or
// when the revision to resume from was compacted (OUT_OF_RANGE: restart from
// 0). A slow client delays only its own stream.
//
// A distributor sees the goals of the domains whose readers admit its
// zone; when a domain's readers change to admit it, or no longer, the
// stream sends the domain's goals, or deletes them, in a message carrying
// the revision of the last one sent (readers.go).
func (s *Service) WatchGoals(req *lehrpb.WatchGoalsRequest, stream grpc.ServerStreamingServer[lehrpb.WatchGoalsResponse]) (err error) {
	ctx := stream.Context()
	defer s.track(ctx, "WatchGoals", time.Now(), &err)
	if err := names.Zone(req.GetZone()); err != nil {
		return nameError("zone", err)
	}
	if req.GetStartRevision() < 0 {
		return invalid(apierror.ReasonInvalidArgument, "start_revision", "start_revision must be 0 (initial state first) or a revision to resume from")
	}
	if req.GetCreateZone() {
		if err := s.ensureZone(ctx, req.GetZone()); err != nil {
			return err
		}
	}
	// Stop the watch when the client goes away or the service closes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	f, err := s.goalFilterOf(ctx, req.GetZone())
	if err != nil {
		return err
	}

	from := req.GetStartRevision()
	if from == 0 {
		goals, rev, err := s.st.Goals(ctx, req.GetZone(), "")
		if err != nil {
			return withField(s.apiError(ctx, err), "zone")
		}
		if f != nil {
			if goals, err = f.goals(ctx, s.st, goals); err != nil {
				return s.apiError(ctx, err)
			}
		}
		for i := 0; ; i += initialBatch {
			end := min(i+initialBatch, len(goals))
			msg := &lehrpb.WatchGoalsResponse{Revision: rev, Initial: true, InitialComplete: end == len(goals)}
			for _, g := range goals[i:end] {
				msg.Events = append(msg.Events, &lehrpb.GoalEvent{Type: lehrpb.GoalEvent_TYPE_PUT, Goal: g})
			}
			if err := stream.Send(msg); err != nil {
				return apierror.FromError(err)
			}
			if end == len(goals) {
				break
			}
		}
		from = rev + 1
	}
	goals := s.st.WatchGoals(ctx, req.GetZone(), from)
	var domains <-chan store.DomainBatch // nil (never ready) without a filter
	if f != nil {
		domains = s.st.WatchDomains(ctx, from)
	}
	if req.GetStartRevision() > 0 {
		// A resumed watch may have nothing to send for a long time: the
		// headers tell the distributor now that it is connected again.
		if err := stream.SendHeader(metadata.Pairs("lehr-watch", "resumed")); err != nil {
			return apierror.FromError(err)
		}
	}
	last := from - 1 // the revision of the last message sent
	for {
		select {
		case b, ok := <-goals:
			if !ok {
				return s.watchEnd(stream.Context(), nil)
			}
			if b.Err != nil {
				return s.watchEnd(stream.Context(), b.Err)
			}
			if f != nil {
				var err error
				if b.Events, b.Previous, err = f.events(ctx, s.st, b); err != nil {
					return s.watchEnd(stream.Context(), err)
				}
			}
			if req.GetDeltas() {
				for i, ev := range b.Events {
					ev.Delta = s.deltas.forGoal(ctx, s.st, b.Previous[i], ev)
				}
			}
			if err := stream.Send(&lehrpb.WatchGoalsResponse{Revision: b.Revision, Events: b.Events}); err != nil {
				return apierror.FromError(err)
			}
			last = b.Revision
		case b, ok := <-domains:
			if !ok {
				return s.watchEnd(stream.Context(), nil)
			}
			if b.Err != nil {
				return s.watchEnd(stream.Context(), b.Err)
			}
			evs, err := f.changed(ctx, s.st, b)
			if err != nil {
				return s.watchEnd(stream.Context(), err)
			}
			if len(evs) == 0 {
				continue
			}
			// The goals as read now, at the revision already sent: resuming
			// after it replays the change, which sends them again.
			if err := stream.Send(&lehrpb.WatchGoalsResponse{Revision: last, Events: evs}); err != nil {
				return apierror.FromError(err)
			}
		}
	}
}

// watchEnd is the error that ends a goal watch: UNAVAILABLE when the service
// closes, the client's own cancellation, or the watch's error.
func (s *Service) watchEnd(ctx context.Context, err error) error {
	if s.closing.Err() != nil {
		return apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "",
			"control is shutting down; reconnect and resume from the last revision + 1")
	}
	if ctx.Err() != nil {
		return apierror.FromError(ctx.Err())
	}
	if err != nil {
		return err
	}
	return apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "", "the goal watch ended; resume from the last revision + 1")
}
