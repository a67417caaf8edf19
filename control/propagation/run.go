package propagation

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// Store is the part of control's store (*store.Store) the Runner uses;
// each method's contract is that of the *store.Store method of the same
// name.
type Store interface {
	WatchRolloutInputs(ctx context.Context) <-chan store.RolloutInput
	Head(ctx context.Context, ns string) (*lehrpb.Namespace, int64, error)
	Version(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, error)
	ListZones(ctx context.Context) ([]*lehrpb.Zone, error)
	ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error)
	Propagation(ctx context.Context) (*lehrpb.PropagationRecord, error)
	PutPropagation(ctx context.Context, g store.Guard, rec *lehrpb.PropagationRecord) error
}

// Defaults of Options.
const (
	// DefaultInterval is how often the Runner reads what changed.
	DefaultInterval = time.Second
	// FullEvery is how often, while versions are in flight, every zone's
	// status is read again, not only those whose distributors reported:
	// a report that lapsed (a distributor gone) is not announced.
	FullEvery = 30 * time.Second
)

// Options configure a Runner.
type Options struct {
	Store Store // required
	// Metrics receives the propagation metrics (MetricsHelp); nil means a
	// private set.
	Metrics *metrics.Set
	Limits  Limits
	// Interval is how often new versions and reports are read; default
	// DefaultInterval. It bounds the measurement's resolution together
	// with the distributors' report interval.
	Interval time.Duration
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger
}

// Runner measures propagation while its replica leads the rollout
// strategist (Lead).
type Runner struct {
	opts     Options
	log      *slog.Logger
	met      *Metrics
	inFlight atomic.Int64
}

// NewRunner validates opts and registers the metrics; it starts nothing.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Store == nil {
		return nil, errors.New("propagation: Options.Store is required")
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Runner{opts: opts, log: opts.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.met = NewMetrics(opts.Metrics, func() float64 { return float64(r.inFlight.Load()) })
	return r, nil
}

// Lead measures until ctx ends (the replica no longer leads) or a write
// finds g no longer holds. It watches new namespace heads and
// distributors' reports (store.WatchRolloutInputs), and every Interval
// starts tracking the new versions (two reads each), reads the status of
// the zones that reported (all zones every FullEvery) while versions are
// in flight, and writes the completed measurements to the record in etcd.
//
// What it tracks lives in its memory only: versions published before
// this replica led, or in flight when it stops leading, are not measured
// (the next leader starts with the versions published after it leads).
func (r *Runner) Lead(ctx context.Context, g store.Guard) {
	defer r.inFlight.Store(0)
	st := r.opts.Store
	t := NewTracker(r.opts.Limits)
	inputs := st.WatchRolloutInputs(ctx)
	heads := map[string]bool{} // namespaces whose head changed
	dirty := map[string]bool{} // zones that reported
	zones := map[string][]*lehrpb.DistributorStatus{}
	full, lastFull := true, time.Time{}
	var rec *lehrpb.PropagationRecord
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case in, ok := <-inputs:
			switch {
			case !ok:
				return
			case in.Resync:
				full = true
			case in.Zone != "":
				dirty[in.Zone] = true
			case in.Namespace != "":
				heads[in.Namespace] = true
			}
			continue
		case <-tick.C:
		}
		var results []Result
		var retry []string // reads that failed (not a deletion): the next tick tries again
		for ns := range heads {
			delete(heads, ns)
			h, _, err := st.Head(ctx, ns)
			if err != nil && !notFound(err) {
				retry = append(retry, ns)
				continue
			}
			if err != nil || h.GetLatestVersion() == 0 || t.Tracking(ns, h.GetLatestVersion()) {
				continue // deleted, or seen
			}
			v, err := st.Version(ctx, ns, h.GetLatestVersion())
			if err != nil {
				if !notFound(err) {
					retry = append(retry, ns)
				}
				continue
			}
			results = append(results, t.Publish(v, r.opts.Now())...)
		}
		for _, ns := range retry {
			heads[ns] = true
		}
		if t.InFlight() == 0 {
			// Nothing to measure: the cache of reports goes stale, and is
			// read whole again when a version is published.
			clear(dirty)
			clear(zones)
			full = true
		} else {
			now := r.opts.Now()
			if full || now.Sub(lastFull) >= FullEvery {
				if zl, err := st.ListZones(ctx); err == nil {
					clear(zones)
					clear(dirty)
					for _, z := range zl {
						dirty[z.GetName()] = true
					}
					full, lastFull = false, now
				}
			}
			for z := range dirty {
				sts, err := st.ZoneStatus(ctx, z)
				switch {
				case notFound(err):
					delete(zones, z)
				case err != nil:
					continue // stays dirty: the next tick reads it again
				default:
					zones[z] = sts
				}
				delete(dirty, z)
			}
			results = append(results, t.Observe(zones, r.opts.Now())...)
		}
		inFlight := int64(t.InFlight())
		changed := r.inFlight.Swap(inFlight) != inFlight
		var done []*lehrpb.PropagationUpdate
		for _, res := range results {
			r.met.Record(res)
			if res.Outcome == Complete {
				done = append(done, res.Proto())
			}
		}
		if len(done) == 0 && !changed {
			continue
		}
		if rec == nil {
			var err error
			if rec, err = st.Propagation(ctx); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("propagation: reading the record; the measurements of this second are not shown", "err", err)
				}
				rec = nil
				continue
			}
		}
		// Newest first, as the record (those of one tick completed at once).
		rec.Updates = append(done, rec.GetUpdates()...)
		if len(rec.Updates) > KeepUpdates {
			rec.Updates = rec.Updates[:KeepUpdates]
		}
		rec.InFlight = int32(inFlight)
		rec.UpdateTime = timestamppb.New(r.opts.Now())
		if err := st.PutPropagation(ctx, g, rec); err != nil {
			if errors.Is(err, store.ErrNotLeader) {
				return
			}
			if ctx.Err() == nil {
				r.log.Warn("propagation: writing the record; the next completion writes it again", "err", err)
			}
		}
	}
}

func notFound(err error) bool {
	var nf *store.NotFoundError
	return errors.As(err, &nf)
}
