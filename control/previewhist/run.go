package previewhist

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/proto/lehrpb"
)

// MetricsHelp is the HELP text of the metric families a Runner registers
// (docs/operations.md, "Policy experiments' history"). Read only.
var MetricsHelp = metricshttp.Help{
	samplesMetric: "Samples of policy experiments' counts stored in their histories (on the strategist's leader; the others count none).",
}

const samplesMetric = "lehr_control_experiment_samples_total"

// Store is the part of control's store (*store.Store) the Runner uses;
// each method's contract is that of the *store.Store method of the same
// name.
type Store interface {
	AllExperiments(ctx context.Context) ([]store.NamedExperiment, error)
	ListZones(ctx context.Context) ([]*lehrpb.Zone, error)
	ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error)
	ExperimentHistory(ctx context.Context, ns, id string) (store.StoredHistory, error)
	PutExperimentHistory(ctx context.Context, g store.Guard, ns, id string, rec *lehrpb.PolicyExperimentHistoryRecord, old store.StoredHistory) (store.StoredHistory, error)
	PruneExperimentHistories(ctx context.Context, g store.Guard) (int, error)
}

// Defaults and bounds.
const (
	// DefaultInterval is how often the Runner samples.
	DefaultInterval = time.Minute
	// MaxSamples and MaxBytes bound an experiment's record: at most a
	// day of samples at DefaultInterval, and 48 KiB encoded; beyond
	// either, the oldest samples go. A sample takes 23 to 45 bytes, by
	// the size of its counts: a day of samples of a few thousand
	// decisions each takes about 39 KB; of billions, the byte bound keeps
	// about 1,100 of them (TestAppend). A policy
	// has at most 5 experiments (service.MaxExperimentsPerPolicy), so its
	// histories hold at most 240 KiB.
	MaxSamples = 1440
	MaxBytes   = 48 << 10
)

// Options configure a Runner.
type Options struct {
	Store Store // required
	// Interval is how often the counts are sampled; zero means
	// DefaultInterval (a minute). Tests use a short one.
	Interval time.Duration
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil: slog.Default()
	// Metrics receives the Runner's metrics (MetricsHelp); nil means a
	// private set.
	Metrics *metrics.Set
}

// Runner samples the counts of the active experiments while its replica
// leads the rollout strategist (Lead).
type Runner struct {
	opts    Options
	log     *slog.Logger
	samples *metrics.Counter
}

// NewRunner validates opts; it starts nothing.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Store == nil {
		return nil, errors.New("previewhist: Options.Store is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	r := &Runner{opts: opts, log: opts.Logger, samples: opts.Metrics.GetOrCreateCounter(samplesMetric)}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r, nil
}

// Lead samples every Interval until ctx ends (the replica no longer
// leads) or a write finds g no longer holds. Each pass deletes the
// histories of experiments that are gone (store.PruneExperimentHistories),
// reads every experiment and, if any is ACTIVE, every zone's reports,
// and appends each active experiment's sample to its record in etcd
// (trimmed to MaxSamples and MaxBytes). What the Sampler remembers lives
// in memory: the first pass of a new leader is every experiment's
// baseline, so an interval a leadership change falls in is not sampled.
func (r *Runner) Lead(ctx context.Context, g store.Guard) {
	st := r.opts.Store
	s := NewSampler()
	hist := map[Ref]store.StoredHistory{} // as last read or written
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := st.PruneExperimentHistories(ctx, g); err != nil {
			if errors.Is(err, store.ErrNotLeader) {
				return
			}
			if ctx.Err() == nil {
				r.log.Warn("previewhist: deleting the histories of experiments that are gone; the next pass tries again", "err", err)
			}
		}
		all, err := st.AllExperiments(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("previewhist: reading the experiments; this interval is not sampled", "err", err)
			}
			continue
		}
		var exps []Experiment
		for _, e := range all {
			if e.GetPreviewMetadata().GetState() == lehrpb.PolicyPreviewMetadata_ACTIVE {
				exps = append(exps, Experiment{Namespace: e.Namespace, ID: e.ID, Revision: e.CreateRevision, Etag: e.GetEtag()})
			}
		}
		zones := map[string][]*lehrpb.DistributorStatus{}
		if len(exps) > 0 {
			zl, err := st.ListZones(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("previewhist: reading the zones; this interval is not sampled", "err", err)
				}
				continue
			}
			var failed error
			for _, z := range zl {
				sts, err := st.ZoneStatus(ctx, z.GetName())
				var nf *store.NotFoundError
				switch {
				case errors.As(err, &nf):
				case err != nil:
					failed = err
				default:
					zones[z.GetName()] = sts
				}
			}
			if failed != nil {
				// A zone missing would read as every one of its series
				// gone; the next pass has a whole picture.
				if ctx.Err() == nil {
					r.log.Warn("previewhist: reading the zones' reports; this interval is not sampled", "err", failed)
				}
				continue
			}
		}
		samples := s.Sample(exps, zones, r.opts.Now())
		for ref := range hist {
			if _, ok := samples[ref]; !ok {
				delete(hist, ref) // read again when it is sampled again
			}
		}
		for ref, smp := range samples {
			old, ok := hist[ref]
			if !ok {
				if old, err = st.ExperimentHistory(ctx, ref.Namespace, ref.ID); err != nil {
					if ctx.Err() == nil {
						r.log.Warn("previewhist: reading a history; its sample is lost", "experiment", ref.Namespace+"/"+ref.ID, "err", err)
					}
					continue
				}
			}
			rec := Append(old.Record, ref.Revision, smp)
			h, err := st.PutExperimentHistory(ctx, g, ref.Namespace, ref.ID, rec, old)
			switch {
			case errors.Is(err, store.ErrNotLeader):
				return
			case err != nil:
				delete(hist, ref)
				if ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
					r.log.Warn("previewhist: writing a history; its sample is lost", "experiment", ref.Namespace+"/"+ref.ID, "err", err)
				}
			default:
				hist[ref] = h
				r.samples.Inc()
			}
		}
	}
}

// Append returns old's samples with smp after them, as the history of
// the experiment created at revision rev (a record of another revision
// is an earlier experiment's: its samples are dropped), trimmed from the
// oldest to MaxSamples and MaxBytes encoded. The record names a sample's
// experiment etag only where it changes (Expand restores every one);
// smp names its own. old and smp are not changed.
func Append(old *lehrpb.PolicyExperimentHistoryRecord, rev int64, smp *lehrpb.PolicyExperimentSample) *lehrpb.PolicyExperimentHistoryRecord {
	rec := &lehrpb.PolicyExperimentHistoryRecord{ExperimentRevision: rev}
	if old.GetExperimentRevision() == rev {
		rec.Samples = append(rec.Samples, old.GetSamples()...)
	}
	// etags[i] is the etag in effect at sample i.
	etags := make([]string, 0, len(rec.Samples)+1)
	cur := ""
	for _, s := range rec.Samples {
		if e := s.GetExperimentEtag(); e != "" {
			cur = e
		}
		etags = append(etags, cur)
	}
	smp = proto.CloneOf(smp)
	etags = append(etags, smp.GetExperimentEtag())
	if len(rec.Samples) > 0 && smp.GetExperimentEtag() == cur {
		smp.ExperimentEtag = ""
	}
	rec.Samples = append(rec.Samples, smp)
	// trim drops the n oldest samples, naming the new first one's etag.
	trim := func(n int) {
		rec.Samples, etags = rec.Samples[n:], etags[n:]
		if first := rec.Samples[0]; first.GetExperimentEtag() != etags[0] {
			first = proto.CloneOf(first)
			first.ExperimentEtag = etags[0]
			rec.Samples[0] = first
		}
	}
	if n := len(rec.Samples) - MaxSamples; n > 0 {
		trim(n)
	}
	for size := proto.Size(rec); size > MaxBytes && len(rec.Samples) > 1; size = proto.Size(rec) {
		// Drop as many of the oldest as the excess takes at their size,
		// at least one.
		drop, over := 0, size-MaxBytes
		for drop < len(rec.Samples)-1 && over > 0 {
			over -= proto.Size(rec.Samples[drop]) + 2
			drop++
		}
		trim(max(1, drop))
	}
	return rec
}

// Expand returns the samples of a stored record each naming its
// experiment etag (the record names it only where it changes). The
// samples are copies.
func Expand(rec *lehrpb.PolicyExperimentHistoryRecord) []*lehrpb.PolicyExperimentSample {
	out := make([]*lehrpb.PolicyExperimentSample, 0, len(rec.GetSamples()))
	cur := ""
	for _, s := range rec.GetSamples() {
		s = proto.CloneOf(s)
		if e := s.GetExperimentEtag(); e != "" {
			cur = e
		}
		s.ExperimentEtag = cur
		out = append(out, s)
	}
	return out
}
