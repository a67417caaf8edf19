// Package service implements the Control gRPC API (lehrpb.ControlServer) on
// top of control/store: it checks every request (names with internal/names,
// content with control/validate, quotas and rate limits), records who
// published what and why, and turns every failure into an *apierror.Error
// naming the request field at fault. Nothing is stored when a request is
// rejected.
//
// Imported by control (the daemon) and tests.
package service

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/proto/lehrpb"
)

// GoalPolicy decides what a new version does to zone goal states: move
// every zone's goal in the publish's own transaction (store.GoalsAllZones,
// AllZones: control without --rollouts), or none, leaving them to the
// rollout strategist, which moves them stage by stage in its guarded steps
// (store.RolloutStep; Progressive).
//
// ns is the namespace as read before the commit (nil when the publish creates
// it); source says how the version was produced.
type GoalPolicy func(ns *lehrpb.Namespace, source lehrpb.VersionSource) store.GoalPolicy

// AllZones is the default GoalPolicy: every publish sets every zone's goal.
func AllZones(*lehrpb.Namespace, lehrpb.VersionSource) store.GoalPolicy {
	return store.GoalsAllZones
}

// Progressive is the GoalPolicy under the rollout strategist: a
// namespace's first version and an operator's rollback go to every zone at
// once (nothing to protect; an emergency), every other version is left to
// the strategist, which moves goals stage by stage — except that a
// version under a global-blast policy starts its rollout, every zone at
// once, in its own commit (blast.go) instead of at the strategist's next
// round.
func Progressive(ns *lehrpb.Namespace, source lehrpb.VersionSource) store.GoalPolicy {
	if ns.GetLatestVersion() == 0 || source == lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK {
		return store.GoalsAllZones
	}
	return store.GoalsNone
}

// Options configures a Service.
type Options struct {
	// Store holds the state. Required.
	Store *store.Store
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics receives the service's metrics; default a private new set
	// (metrics are then only visible to tests through Service.Metrics).
	Metrics *metrics.Set
	// Now returns the current time, for rate limiting and for expiring the
	// cached leases of zone status reports; default time.Now.
	Now func() time.Time
	// DefaultKind is the kind of a namespace created by a publish that does
	// not state one; default lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG.
	DefaultKind lehrpb.NamespaceKind
	// GoalPolicy decides how a publish moves goal states; default AllZones.
	GoalPolicy GoalPolicy
	// DefaultRolloutPolicy is the rollout policy of a domain that set none;
	// nil means rollout.Default(). It is not validated against the zones
	// (they change); the strategist resolves it against those it finds.
	DefaultRolloutPolicy *lehrpb.RolloutPolicy
	// FleetAdmins are the identities (identity.go: a certificate user's
	// name, or "unix:<account>" for a local account on control's socket)
	// who may make fleet-wide changes — create zones, raise a domain's
	// quota above DomainDefaults — besides those who always may: the local
	// user control runs as and root on its unix socket, control replicas,
	// in-process callers, and in DevMode callers control cannot identify;
	// a distributor may register its own zone (fleet.go). Empty: nobody
	// else.
	FleetAdmins []string
	// LocalUsers maps local accounts on control's unix socket to the
	// certificate users they act as: an account mapped to "alice" is
	// "alice" for ACLs, authorship, the audit log and the fleet admins,
	// as if it held alice's user certificate. An account not mapped is
	// "unix:<account>", a user of its own (identity.go). Nil: none is.
	LocalUsers map[string]string
	// DomainDefaults are the quotas of a domain that sets none; a zero
	// field is DefaultQuotas' value.
	DomainDefaults *lehrpb.Quotas
	// DevMode is the Authorizer's: callers control cannot identify are
	// fleet admins too.
	DevMode bool
	// Replica is this control replica as GetControlStatus describes it;
	// the zero value says nothing of it.
	Replica Replica
	// Alerts says control has an alerts source (lehr control
	// --alerts-url): without one, a rollout policy with a monitoring
	// check is refused (rollout.Fleet.Alerts).
	Alerts bool
	// ConsoleURL is the base URL people reach control's console at
	// (lehr control --console-url): an evaluation's uri is it followed by
	// its console path. Empty: the path alone.
	ConsoleURL string
	// MetricsSource, if set, is control's metrics source (lehr control
	// --metrics-url), which canary checks written as queries read;
	// without one such checks are refused (rollout.Fleet.Metrics).
	MetricsSource evaluation.MetricSource
}

// Service implements lehrpb.ControlServer. Create it with New; it is safe
// for concurrent use.
type Service struct {
	lehrpb.UnimplementedControlServer

	st      *store.Store
	log     *slog.Logger
	metrics *metrics.Set
	now     func() time.Time
	kind    lehrpb.NamespaceKind
	goals   GoalPolicy
	// defPolicy is Options.DefaultRolloutPolicy.
	defPolicy *lehrpb.RolloutPolicy
	// alerts is Options.Alerts.
	alerts bool
	// consoleURL is Options.ConsoleURL without a trailing slash.
	consoleURL string
	// metricsSource is Options.MetricsSource.
	metricsSource evaluation.MetricSource
	// fleetAdmins, localUsers and devMode are Options.FleetAdmins,
	// LocalUsers and DevMode.
	fleetAdmins []string
	localUsers  map[string]string
	devMode     bool
	replica     Replica
	// defQuotas are the quotas in force where a domain sets none
	// (Options.DomainDefaults over DefaultQuotas).
	defQuotas *lehrpb.Quotas

	registry *validate.Registry
	evals    *evaluation.Service
	leases   reportLeases // of ReportZoneStatus
	reported zoneMarks    // when this replica last recorded each zone's report
	// previews is st as the policy-preview handlers see it (experiments.go).
	previews previewStore

	// closing ends when Close is called; long-lived streams end with it.
	closing context.Context
	close   context.CancelFunc

	audit auditWriter // the audit log's background writer (auditlog.go)

	deltas goalDeltas // sent with goal events (WatchGoals)
	rates  rateHints  // domains whose publish bucket is known empty (quotas.go)
}

// New returns a Service. It starts nothing.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("service: Options.Store is required")
	}
	s := &Service{
		st:      opts.Store,
		log:     opts.Logger,
		metrics: opts.Metrics,
		now:     opts.Now,
		kind:    opts.DefaultKind,
		goals:   opts.GoalPolicy,

		defPolicy:     opts.DefaultRolloutPolicy,
		alerts:        opts.Alerts,
		metricsSource: opts.MetricsSource,
		consoleURL:    strings.TrimSuffix(opts.ConsoleURL, "/"),
		fleetAdmins:   opts.FleetAdmins,
		localUsers:    maps.Clone(opts.LocalUsers),
		devMode:       opts.DevMode,
		replica:       opts.Replica,

		previews: opts.Store,
	}
	s.closing, s.close = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.metrics == nil {
		s.metrics = metrics.NewSet()
	}
	// At 0 from the start, for alerts (deploy/prometheus/lehr-alerts.yaml).
	s.metrics.GetOrCreateCounter(`lehr_control_audit_errors_total`)
	if s.now == nil {
		s.now = time.Now
	}
	if s.kind == lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED {
		s.kind = lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG
	}
	if s.goals == nil {
		s.goals = AllZones
	}
	s.defQuotas = DefaultQuotas()
	s.defQuotas = s.effectiveQuotas(opts.DomainDefaults)
	s.registry = validate.NewRegistry(validate.Options{})
	evals, err := evaluation.New(evaluation.Options{Store: s.st, Now: s.now, Logger: s.log, Source: s.metricsSource})
	if err != nil {
		return nil, err
	}
	s.evals = evals
	return s, nil
}

// Metrics returns the set the service records into.
func (s *Service) Metrics() *metrics.Set { return s.metrics }

// Close ends every open WatchGoals stream with UNAVAILABLE so that a
// graceful server stop does not wait for them. Unary calls are unaffected.
// It is idempotent.
func (s *Service) Close() error {
	s.close()
	s.audit.close()
	return nil
}

// track records the duration of one call and, if it failed, the rejection
// reason. It also guarantees that whatever error a handler returns reaches
// the client as an *apierror.Error. Use as
//
//	defer s.track(ctx, "Publish", time.Now(), &err)
func (s *Service) track(ctx context.Context, method string, start time.Time, errp *error) {
	s.metrics.GetOrCreatePrometheusHistogramExt(`lehr_control_request_duration_seconds{method="`+method+`"}`, requestBuckets).UpdateDuration(start)
	if *errp == nil {
		return
	}
	e := s.apiError(ctx, *errp)
	*errp = e
	if e.Code == codes.Canceled {
		return // the caller went away; not a rejection
	}
	reason := e.Reason
	if reason == "" {
		reason = e.Code.String()
	}
	s.metrics.GetOrCreateCounter(`lehr_control_rejections_total{reason="` + reason + `"}`).Inc()
	s.log.Debug("control: request rejected", "method", method, "code", e.Code.String(), "reason", e.Reason, "field", e.Field, "err", e.Message)
}

// RoundTripObserver returns a store.Options.OnRoundTrip function that
// records every etcd request in set as lehr_control_etcd_round_trips_total
// and lehr_control_etcd_duration_seconds, labelled by operation.
func RoundTripObserver(set *metrics.Set) func(op string, d time.Duration, err error) {
	return func(op string, d time.Duration, err error) {
		set.GetOrCreateCounter(`lehr_control_etcd_round_trips_total{op="` + op + `"}`).Inc()
		set.GetOrCreatePrometheusHistogramExt(`lehr_control_etcd_duration_seconds{op="`+op+`"}`, etcdBuckets).Update(d.Seconds())
		// Made with the op's first round trip, at 0: the error ratio an
		// alert computes has its numerator before the first error.
		errs := set.GetOrCreateCounter(`lehr_control_etcd_errors_total{op="` + op + `"}`)
		if err != nil {
			errs.Inc()
		}
	}
}

func (s *Service) countPublish(kind string) {
	s.metrics.GetOrCreateCounter(`lehr_control_publishes_total{kind="` + kind + `"}`).Inc()
}

// Ready reports whether the store answers; the daemon uses it for the gRPC
// health service.
func (s *Service) Ready(ctx context.Context) error {
	if _, err := s.st.ListZones(ctx); err != nil {
		return s.apiError(ctx, err)
	}
	return nil
}

var _ lehrpb.ControlServer = (*Service)(nil)
