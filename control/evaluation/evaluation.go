// Package evaluation is control's canary-evaluation service: it turns the
// per-interval signals that distributors report of the hosts a canary
// analysis watches (zone status, lehrpb.HostSignals) into the input of the
// canary judge (package canary), judges each evaluation at the looks of
// its bake, and keeps the result in etcd, so a control restart resumes an
// evaluation where it stood. The rollout strategist runs it: Step is
// called by the leading replica only, with its leadership guard. Checks
// written as queries read control's metrics source instead (query.go,
// control/metricsource), and feed the same judge.
//
// Imported by control/strategist (which runs it), control/rollout (whose
// decisions start evaluations and read their verdicts), control/service
// (which serves them), control (which hands both its metrics source), and
// control/console and cmd/lehr (which show them in the words of
// describe.go).
package evaluation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults and bounds of an analysis (lehrpb.CanaryAnalysis).
const (
	DefaultControlHosts = 20
	MaxControlHosts     = 100
	DefaultAlpha        = 0.01
	MaxAlpha            = 0.2
	MaxChecks           = 32
	// MaxTrials bounds the trials of an evaluation a caller starts
	// (EvaluateRequest.trials): one per zone, and control registers at
	// most 96 zones.
	MaxTrials = 100
	// MaxTrialHosts bounds the hosts a caller's trials name in all,
	// canary and control hosts together (a trial that names none takes
	// the watched hosts of its zone).
	MaxTrialHosts = 1000
	// MaxHostIDBytes bounds a host id a trial names, as zone reports
	// bound theirs.
	MaxHostIDBytes = 255
	// Looks is the number of looks spread over an evaluation's bake.
	Looks = 4
	// BeforeIntervals is how many intervals before the change are judged
	// (at most: a host may have fewer).
	BeforeIntervals = 60
)

// The values of CanaryAnalysis.on_no_verdict.
const (
	OnNoVerdictProceed = "proceed"
	OnNoVerdictFail    = "fail"
	OnNoVerdictWait    = "wait"
)

// Store is what the service keeps evaluations in and reads zone status
// from (*store.Store).
type Store interface {
	ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error)
	CreateEvaluation(ctx context.Context, ev *lehrpb.CanaryEvaluation) (*lehrpb.CanaryEvaluation, bool, error)
	PutEvaluation(ctx context.Context, g store.Guard, ev *lehrpb.CanaryEvaluation) error
	Evaluation(ctx context.Context, id string) (*lehrpb.CanaryEvaluation, error)
	Evaluations(ctx context.Context, ns string) ([]*lehrpb.CanaryEvaluation, error)
	HistoryStore // learn.go
}

// Options configure a Service.
type Options struct {
	// Store is required.
	Store Store
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Source, if set, is control's metrics source, which the checks
	// written as queries read (query.go); nil: control has none, and an
	// evaluation with such a check is refused.
	Source MetricSource
}

// Service runs canary evaluations. Its methods are safe for concurrent
// use.
type Service struct {
	st     Store
	now    func() time.Time
	log    *slog.Logger
	src    MetricSource
	cache  queryCache
	rounds atomic.Int64 // StepAll calls, for pruning histories (learn.go)
}

// New returns a service. It starts nothing.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("evaluation: Options.Store is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Service{st: opts.Store, now: opts.Now, log: opts.Logger, src: opts.Source, cache: queryCache{byEv: map[string]*queried{}}}, nil
}

// FieldError says which field of a request or analysis is wrong and why.
type FieldError = signals.FieldError

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// CheckAnalysis validates an analysis configuration under prefix (e.g.
// "policy.stages[0].analysis"): bounds, and every check as the judge
// would take it.
func CheckAnalysis(prefix string, a *lehrpb.CanaryAnalysis) error {
	if a == nil {
		return nil
	}
	if n := a.GetControlHosts(); n > MaxControlHosts {
		return fieldErr(prefix+".control_hosts", "%d; at most %d (0 means %d)", n, MaxControlHosts, DefaultControlHosts)
	}
	if al := a.GetAlpha(); math.IsNaN(al) || al < 0 || al > MaxAlpha {
		return fieldErr(prefix+".alpha", "%v; want 0 to %v (0 means %v)", al, MaxAlpha, DefaultAlpha)
	}
	switch a.GetOnNoVerdict() {
	case "", OnNoVerdictProceed, OnNoVerdictFail, OnNoVerdictWait:
	default:
		return fieldErr(prefix+".on_no_verdict", "%q; want %s, %s or %s", a.GetOnNoVerdict(), OnNoVerdictProceed, OnNoVerdictFail, OnNoVerdictWait)
	}
	if n := len(a.GetChecks()); n > MaxChecks {
		return fieldErr(prefix+".checks", "%d checks; at most %d", n, MaxChecks)
	}
	if _, err := signals.Checks(a.GetChecks()); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Field = prefix + "." + fe.Field
			return fe
		}
		return err
	}
	return checkQueries(prefix, a)
}

// Create starts ev (validated, RUNNING) unless an evaluation with its id
// exists, and returns the one stored.
func (s *Service) Create(ctx context.Context, ev *lehrpb.CanaryEvaluation) (*lehrpb.CanaryEvaluation, error) {
	if err := CheckAnalysis("config", ev.GetConfig()); err != nil {
		return nil, err
	}
	if f := QueryField(ev.GetConfig()); f != "" && s.src == nil {
		return nil, fieldErr("config."+f, "%s", NoSourceMessage)
	}
	if _, err := signals.Checks(ev.GetExpectedChecks()); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Field = "expected_" + fe.Field // "expected_checks[i]…"
		}
		return nil, err
	}
	if len(ev.GetTrials()) == 0 {
		return nil, fieldErr("trials", "at least one trial (a zone's canary hosts) is required")
	}
	for i, t := range ev.GetTrials() {
		if t.GetZone() == "" {
			return nil, fieldErr(fmt.Sprintf("trials[%d].zone", i), "required")
		}
	}
	if ev.GetChangeTime() == nil {
		return nil, fieldErr("change_time", "required: when the canary hosts held the version")
	}
	if b := ev.GetBake().AsDuration(); b <= 0 || b > 7*24*time.Hour {
		return nil, fieldErr("bake", "%v; want above 0, at most 7 days", b)
	}
	ev = proto.CloneOf(ev)
	now := timestamppb.New(s.now())
	ev.State, ev.CreateTime, ev.UpdateTime, ev.Result = lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING, now, now, nil
	got, _, err := s.st.CreateEvaluation(ctx, ev)
	return got, err
}

// Get returns evaluation id; with wait, it polls until the evaluation is
// DONE or ctx ends (then it returns the evaluation as it stands).
func (s *Service) Get(ctx context.Context, id string, wait bool) (*lehrpb.CanaryEvaluation, error) {
	for {
		ev, err := s.st.Evaluation(ctx, id)
		if err != nil || !wait || ev.GetState() == lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE {
			return ev, err
		}
		select {
		case <-ctx.Done():
			return ev, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// List returns the evaluations of ns ("" for all).
func (s *Service) List(ctx context.Context, ns string) ([]*lehrpb.CanaryEvaluation, error) {
	return s.st.Evaluations(ctx, ns)
}

// StepAll judges every RUNNING evaluation whose look is due; the leader
// calls it each round. It stops at the first lost-leadership error.
func (s *Service) StepAll(ctx context.Context, g store.Guard) error {
	if s.rounds.Add(1)%pruneEvery == 1 {
		if _, err := s.st.PruneCanaryHistories(ctx, g); err != nil {
			if errors.Is(err, store.ErrNotLeader) {
				return err
			}
			s.log.Warn("canary history: pruning the histories of deleted namespaces failed", "err", err)
		}
	}
	evs, err := s.st.Evaluations(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	running := map[string]bool{}
	defer s.forget(running)
	for _, ev := range evs {
		if ev.GetState() != lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING {
			continue
		}
		running[ev.GetId()] = true
		if _, err := s.Step(ctx, g, ev); err != nil {
			if errors.Is(err, store.ErrNotLeader) {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Step judges ev with the data the zones report now and stores the result
// when it changed: a FAIL, or the last look of the bake, makes it DONE.
// It returns the evaluation as stored.
func (s *Service) Step(ctx context.Context, g store.Guard, ev *lehrpb.CanaryEvaluation) (*lehrpb.CanaryEvaluation, error) {
	if ev.GetState() != lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_RUNNING {
		return ev, nil
	}
	data, reports, err := s.gather(ctx, ev)
	if err != nil {
		return ev, fmt.Errorf("evaluation %s: %w", ev.GetId(), err)
	}
	failed := s.query(ctx, ev, data)
	now := s.now()
	hist, err := s.st.CanaryHistory(ctx, ev.GetNamespace())
	if err != nil {
		// Judged without history, as a namespace that has none: saying so.
		s.log.Warn("canary history: unreadable; judging without it", "id", ev.GetId(), "err", err)
	}
	res := judge(ev, data, now, hist.Record)
	applyFailed(res, failed)
	s.noteSource(ev, res, failed)
	res.HostChecks = HostChecks(ev, reports)
	final := res.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || res.GetLooks() > 0 && res.GetLook() >= res.GetLooks()
	late := !final && now.After(GiveUpTime(ev))
	if late {
		res.Reason = fmt.Sprintf("gave up at %s without the bake's last look: %s", GiveUpTime(ev).UTC().Format(time.RFC3339), res.GetReason())
	}
	if !late && sameResult(ev.GetResult(), res) {
		return ev, nil
	}
	ev = proto.CloneOf(ev)
	ev.Result, ev.UpdateTime = res, timestamppb.New(now)
	if final || late {
		ev.State = lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE
	}
	if err := s.st.PutEvaluation(ctx, g, ev); err != nil {
		return ev, err
	}
	s.log.Info("canary evaluation", "id", ev.GetId(), "verdict", verdictName(res.GetVerdict()), "look", res.GetLook(), "of", res.GetLooks(), "reason", res.GetReason())
	return ev, nil
}

// GiveUpTime is when a RUNNING evaluation stops waiting for data and ends
// DONE with what it has (NONE, typically: the hosts stopped reporting, or
// nobody watches them): the end of its bake plus the bake again, at least
// 5 minutes, so no evaluation is judged forever.
func GiveUpTime(ev *lehrpb.CanaryEvaluation) time.Time {
	bake := ev.GetBake().AsDuration()
	return ev.GetChangeTime().AsTime().Add(bake + max(bake, 5*time.Minute))
}

// sameResult reports whether two results say the same thing (their time
// aside), so an unchanged judgement is not written again.
func sameResult(a, b *lehrpb.CanaryResult) bool {
	if a == nil || b == nil {
		return a == b
	}
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	a.Time, b.Time = nil, nil
	// Compared as bytes, not by proto.Equal: a series' NaN (no data) is
	// unequal to itself.
	opt := proto.MarshalOptions{Deterministic: true}
	ab, err1 := opt.Marshal(a)
	bb, err2 := opt.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

// Data is an evaluation's signals: per trial zone, the watched hosts'.
type Data map[string][]*lehrpb.HostSignals

// Reports is the distributors' per-host reports of an evaluation's
// namespace: per trial zone, by host id.
type Reports map[string]map[string]*lehrpb.NamespaceReport

func (s *Service) gather(ctx context.Context, ev *lehrpb.CanaryEvaluation) (Data, Reports, error) {
	d, r := Data{}, Reports{}
	for _, t := range ev.GetTrials() {
		if _, ok := d[t.GetZone()]; ok {
			continue
		}
		sts, err := s.st.ZoneStatus(ctx, t.GetZone())
		if err != nil {
			return nil, nil, err
		}
		var hs []*lehrpb.HostSignals
		byHost := map[string]*lehrpb.NamespaceReport{}
		for _, st := range sts {
			for _, h := range st.GetSignals() {
				if h.GetSignals().GetNamespace() == ev.GetNamespace() {
					hs = append(hs, h)
				}
			}
			for _, h := range st.GetHosts() {
				if h.GetReport().GetNamespace() == ev.GetNamespace() {
					byHost[h.GetHostId()] = h.GetReport()
				}
			}
		}
		d[t.GetZone()], r[t.GetZone()] = hs, byHost
	}
	return d, r, nil
}

// maxFailedHosts bounds CanaryHostCheck.failed_hosts.
const maxFailedHosts = 10

// HostChecks sums the host-level checks that ev's canary hosts — the
// trials' named ones, or every host whose report is about ev's version
// when a trial names none — reported of ev's version, per check, in the
// order first seen. Pure.
func HostChecks(ev *lehrpb.CanaryEvaluation, reports Reports) []*lehrpb.CanaryHostCheck {
	var out []*lehrpb.CanaryHostCheck
	byName := map[string]*lehrpb.CanaryHostCheck{}
	for _, t := range ev.GetTrials() {
		z := t.GetZone()
		hosts := t.GetCanaryHosts()
		if len(hosts) == 0 {
			hosts = slices.Sorted(maps.Keys(reports[z]))
		}
		for _, h := range hosts {
			hc := reports[z][h].GetHostChecks()
			if hc.GetVersion() != ev.GetVersion() || hc.GetVersion() == 0 {
				continue
			}
			for _, c := range hc.GetChecks() {
				sum := byName[c.GetName()]
				if sum == nil {
					sum = &lehrpb.CanaryHostCheck{Name: c.GetName()}
					byName[c.GetName()] = sum
					out = append(out, sum)
				}
				sum.Hosts++
				if c.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
					continue
				}
				if sum.Failed++; len(sum.FailedHosts) < maxFailedHosts {
					sum.FailedHosts = append(sum.FailedHosts, z+"/"+h)
				}
				if sum.Explanation == "" {
					sum.Explanation = z + "/" + h + ": " + c.GetExplanation()
				}
			}
		}
	}
	return out
}

// Judge judges ev on data at now: the input as Input builds it, at the
// look now reaches. Pure: the same evaluation and data give the same
// result.
func Judge(ev *lehrpb.CanaryEvaluation, data Data, now time.Time) *lehrpb.CanaryResult {
	return judge(ev, data, now, nil)
}

// JudgeSourced is Judge with the checks written as queries whose source
// failed: each is NONE with its reason, and so is a verdict that would
// have been PASS.
func JudgeSourced(ev *lehrpb.CanaryEvaluation, data Data, failed Failed, now time.Time) *lehrpb.CanaryResult {
	res := judge(ev, data, now, nil)
	applyFailed(res, failed)
	return res
}

// JudgeLearned is Judge with what the namespace's kept evaluations taught
// (learn.go; nil: nothing). Pure.
func JudgeLearned(ev *lehrpb.CanaryEvaluation, data Data, now time.Time, hist *lehrpb.CanaryHistory) *lehrpb.CanaryResult {
	return judge(ev, data, now, hist)
}

// judge is Judge with history (nil: none).
func judge(ev *lehrpb.CanaryEvaluation, data Data, now time.Time, hist *lehrpb.CanaryHistory) *lehrpb.CanaryResult {
	res := &lehrpb.CanaryResult{Time: timestamppb.New(now), Looks: Looks}
	in, opts, err := Input(ev, data)
	if err != nil {
		res.Verdict, res.Reason = lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, err.Error()
		return res
	}
	in.History = JudgeHistory(hist, opts.BakeIntervals)
	res.IntervalSeconds = uint32(in.Interval / time.Second)
	res.CanaryHosts, res.ControlHosts = int32(len(in.Canary)), int32(len(in.Control))
	out, err := canary.Judge(in, opts)
	if err != nil {
		res.Verdict, res.Reason = lehrpb.CanaryVerdict_CANARY_VERDICT_NONE, "the judge refused the data: "+err.Error()
		return res
	}
	res.Verdict, res.Reason = signals.Verdict(out.Verdict), out.Reason
	res.Look, res.Looks, res.AfterIntervals = int32(out.Look), int32(out.Looks), int32(out.AfterIntervals)
	for _, e := range out.LookEnds {
		res.LookEnds = append(res.LookEnds, int32(e))
	}
	// The series' frame: Input aligns index ChangeIndex on the first
	// interval that starts at or after the change.
	iv := int64(in.Interval / time.Second)
	changeStart := (ev.GetChangeTime().AsTime().Unix() + iv - 1) / iv * iv
	n := 0
	for _, c := range out.Checks {
		n = max(n, len(c.CanarySeries), len(c.ControlSeries))
	}
	step := max(1, (n+MaxSeriesPoints-1)/MaxSeriesPoints)
	pad := (step - in.ChangeIndex%step) % step
	res.SeriesStep, res.SeriesChangeIndex = int32(step), int32((in.ChangeIndex+pad)/step)
	res.SeriesStartTime = timestamppb.New(time.Unix(changeStart-int64(in.ChangeIndex+pad)*iv, 0))
	for _, c := range out.Checks {
		cr := checkResult(c)
		cr.CanarySeries, cr.ControlSeries = thin(c.CanarySeries, step, pad), thin(c.ControlSeries, step, pad)
		res.Checks = append(res.Checks, cr)
	}
	return res
}

// MaxSeriesPoints bounds a check's stored series (CanaryCheckResult.
// canary_series): a longer one is thinned to the means of consecutive
// intervals.
const MaxSeriesPoints = 480

// thin returns xs in points of step intervals, the first point covering
// pad intervals before xs[0] too: each point the mean of its intervals
// with data, NaN if none had any.
func thin(xs []float64, step, pad int) []float64 {
	if step <= 1 {
		return slices.Clone(xs)
	}
	out := make([]float64, (len(xs)+pad+step-1)/step)
	for i := range out {
		var sum, k float64
		for t := i*step - pad; t < (i+1)*step-pad && t < len(xs); t++ {
			if t >= 0 && !math.IsNaN(xs[t]) {
				sum, k = sum+xs[t], k+1
			}
		}
		out[i] = math.NaN()
		if k > 0 {
			out[i] = sum / k
		}
	}
	return out
}

// Input builds the judge's input of ev from data: canary hosts are the
// trials' named ones or, if none are named, the watched hosts in the
// candidate's cohort; control hosts the trials' named ones or, if none are
// named, the watched hosts outside the cohort (at most control_hosts per
// zone). Every zone's hosts are pooled, keyed "zone/host". Intervals are
// aligned on the first interval that starts at or after change_time (the
// change index), from at most BeforeIntervals before it to the newest any
// host reported. A canary host's intervals that do not match its side of
// the change — before it, already at the version (it moved early); after
// it, not at the version — are missing, never mixed in.
func Input(ev *lehrpb.CanaryEvaluation, data Data) (canary.Input, canary.Options, error) {
	checks, err := signals.Checks(ev.GetConfig().GetChecks())
	if err != nil {
		return canary.Input{}, canary.Options{}, err
	}
	extra, err := signals.Checks(ev.GetExpectedChecks())
	if err != nil {
		return canary.Input{}, canary.Options{}, fmt.Errorf("expected_checks: %w", err)
	}
	type host struct {
		key    string
		canary bool
		sig    *lehrpb.NamespaceSignals
	}
	var hosts []host
	iv := int64(0)
	for _, p := range populations(ev, data) {
		byHost := map[string]*lehrpb.HostSignals{}
		for _, h := range data[p.zone] {
			byHost[h.GetHostId()] = h
		}
		for _, c := range p.canary {
			if h := byHost[c]; h != nil {
				hosts = append(hosts, host{p.zone + "/" + c, true, h.GetSignals()})
			}
		}
		for _, c := range p.control {
			if h := byHost[c]; h != nil {
				hosts = append(hosts, host{p.zone + "/" + c, false, h.GetSignals()})
			}
		}
	}
	for _, h := range hosts {
		if iv == 0 {
			iv = int64(h.sig.GetIntervalSeconds())
		}
	}
	if iv <= 0 {
		return canary.Input{}, canary.Options{}, errors.New("no canary or control host has reported signals yet (the zones' distributors report them every report interval once a rollout watches the hosts)")
	}
	change := ev.GetChangeTime().AsTime().Unix()
	changeStart := (change + iv - 1) / iv * iv
	earliest, last := changeStart, changeStart
	for _, h := range hosts {
		if int64(h.sig.GetIntervalSeconds()) == iv {
			earliest = min(earliest, h.sig.GetFirst())
			last = max(last, signals.End(h.sig))
		}
	}
	first := max(changeStart-BeforeIntervals*iv, earliest)
	n := int((last - first) / iv)
	in := canary.Input{
		Interval:    time.Duration(iv) * time.Second,
		ChangeIndex: int((changeStart - first) / iv),
		Canary:      map[string]map[string][]float64{},
		Control:     map[string]map[string][]float64{},
		Checks:      checks,
		Extra:       extra,
	}
	for _, h := range hosts {
		if int64(h.sig.GetIntervalSeconds()) != iv {
			continue
		}
		series := map[string][]float64{}
		off := int((h.sig.GetFirst() - first) / iv)
		for _, sr := range h.sig.GetSeries() {
			vals := make([]float64, n)
			for i := range vals {
				vals[i] = math.NaN()
			}
			for j, v := range sr.GetValues() {
				i := off + j
				if i < 0 || i >= n {
					continue
				}
				if h.canary {
					at := h.sig.GetVersions()[j] == ev.GetVersion()
					if i < in.ChangeIndex && at || i >= in.ChangeIndex && !at {
						continue
					}
				}
				vals[i] = v
			}
			series[sr.GetName()] = vals
		}
		if h.canary {
			in.Canary[h.key] = series
		} else {
			in.Control[h.key] = series
		}
	}
	bake := int((ev.GetBake().AsDuration().Milliseconds()/1000 + iv - 1) / iv)
	opts := canary.Options{Alpha: ev.GetConfig().GetAlpha(), BakeIntervals: max(1, bake), Looks: Looks}
	return in, opts, nil
}

// population is one trial's canary and control hosts.
type population struct {
	zone            string
	canary, control []string
}

// populations returns ev's trials' populations in data: the trials'
// named hosts or, if a trial names none, the watched hosts in the
// candidate's cohort (canary) and at most control_hosts of the others
// (control). A named host may have no data.
func populations(ev *lehrpb.CanaryEvaluation, data Data) []population {
	nControl := int(ev.GetConfig().GetControlHosts())
	if nControl == 0 {
		nControl = DefaultControlHosts
	}
	var out []population
	for _, t := range ev.GetTrials() {
		z := t.GetZone()
		canaries := t.GetCanaryHosts()
		if len(canaries) == 0 {
			for _, h := range data[z] {
				if h.GetCohort() {
					canaries = append(canaries, h.GetHostId())
				}
			}
		}
		controls := t.GetControlHosts()
		if len(controls) == 0 {
			for _, h := range data[z] {
				if !h.GetCohort() && !slices.Contains(canaries, h.GetHostId()) && len(controls) < nControl {
					controls = append(controls, h.GetHostId())
				}
			}
		}
		out = append(out, population{zone: z, canary: canaries, control: controls})
	}
	return out
}

func verdictName(v lehrpb.CanaryVerdict) string {
	return strings.TrimPrefix(v.String(), "CANARY_VERDICT_")
}

func checkResult(c canary.CheckResult) *lehrpb.CanaryCheckResult {
	out := &lehrpb.CanaryCheckResult{
		Name: c.Name, Verdict: signals.Verdict(c.Verdict), Explanation: c.Explanation, Test: c.Test,
		CanaryBefore: signals.Finite(c.CanaryBefore), CanaryAfter: signals.Finite(c.CanaryAfter),
		ControlBefore: signals.Finite(c.ControlBefore), ControlAfter: signals.Finite(c.ControlAfter),
		CanaryHosts: int32(c.CanaryHosts), ControlHosts: int32(c.ControlHosts), CanaryWorse: int32(c.CanaryWorse),
		Effect: signals.Finite(c.Effect), Statistic: signals.Finite(c.Statistic), Df: signals.Finite(c.DF), P: signals.Finite(c.P), Threshold: signals.Finite(c.Threshold),
		AaSplits: int32(c.AASplits), AaDiffer: int32(c.AADiffer),
		Sample: sample(c.Sample),
	}
	if u := c.Learned; u != nil {
		out.LearnedEvaluations, out.LearnedUsed, out.LearnedTypical, out.LearnedTolerance = int32(u.Evaluations), u.Used, signals.Finite(u.Typical), u.Tolerance
		out.NoiseRatio, out.NoiseGrown, out.LearnedChangedVerdict = signals.Finite(u.NoiseRatio), u.NoiseGrown, u.ChangedVerdict
	}
	for _, l := range c.History {
		out.LookHistory = append(out.LookHistory, &lehrpb.CanaryLook{Look: int32(l.Look), AfterIntervals: int32(l.AfterIntervals),
			Verdict: signals.Verdict(l.Verdict), P: l.P, Threshold: l.Threshold})
	}
	if c.AA != nil {
		out.Aa = checkResult(*c.AA)
	}
	return out
}

// Explain says in a few lines why ev's latest result is what it is: the
// verdict and reason, then every check that did not pass.
func Explain(ev *lehrpb.CanaryEvaluation) string {
	res := ev.GetResult()
	if res == nil {
		return "no look yet"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s at look %d of %d: %s", verdictName(res.GetVerdict()), res.GetLook(), res.GetLooks(), res.GetReason())
	for _, c := range res.GetChecks() {
		if c.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
			fmt.Fprintf(&b, "; %s: %s", c.GetName(), c.GetExplanation())
		}
	}
	for _, h := range res.GetHostChecks() {
		if h.GetFailed() > 0 {
			fmt.Fprintf(&b, "; host-level %s failed on %d of the %d canary host(s) that reported it, each against its own history (%s)", h.GetName(), h.GetFailed(), h.GetHosts(), h.GetExplanation())
		}
	}
	return b.String()
}
