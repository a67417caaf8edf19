// Package distributor is Lehr's zonal fan-out daemon: it watches its zone's
// goal states from control (distributor/goalwatch), keeps the versions its
// agents need in a bounded memory cache (distributor/versions), serves agents
// over QUIC with mutual TLS and pushes each goal to every agent subscribed to
// its namespace as a patch or a snapshot (distributor/fanout), and reports
// zone convergence — agents per namespace per version — to control every
// report interval.
//
// Static stability: when control is unreachable a distributor keeps serving
// the goals and versions it already holds, to connected agents and to new
// ones, and resumes its goal watch where it stopped once control is back.
// It follows one control store: answers of a control replica serving
// another (started on an etcd of its own) are refused (storepin.go).
//
// The command `lehr distributor` (package distributor/distributorcmd) wires
// flags to Options; tests and the bench harness use New directly.
//
// Imported by distributor/distributorcmd, testenv/devcluster, bench and
// tests.
package distributor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/distributor/goalwatch"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/cohort"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/controladdr"
	"lehr.dev/lehr/internal/lifecycle"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of Options.
const (
	DefaultListen         = "127.0.0.1:7410"
	DefaultCacheBytes     = 256 << 20
	DefaultReportInterval = 10 * time.Second
	DefaultDomainRefresh  = 30 * time.Second
	// MaxReportTTL is the longest a report may stay valid at control
	// (control/service.MaxReportTTLSeconds): a distributor asks for three
	// report intervals, at most this.
	MaxReportTTL = 120 * time.Second
	// MaxReportInterval bounds ReportInterval, so that a report still
	// outlives the next one by a whole interval at MaxReportTTL.
	MaxReportInterval = MaxReportTTL / 2
	// maxControlMessage bounds gRPC messages from control (a whole version
	// of a large namespace).
	maxControlMessage = 128 << 20
)

// Options configures a Distributor.
type Options struct {
	// Zone served. Required; must satisfy names.Zone.
	Zone string
	// ID names this instance to control and agents. With a client
	// certificate for control (ControlTLS) that carries a distributor
	// identity, spiffe://lehr/distributor/<zone>/<id>, the default is that
	// id, and any other ID or zone is refused: control files a report only
	// under its sender's certificate. Without one, default
	// "<hostname>-<pid>".
	ID string
	// ControlAddr is control's gRPC address: "host:port", or a
	// comma-separated list of them, one per control replica (each name
	// resolved to all its addresses). The goal watch and every fetch go to
	// a replica that is up; when it goes down they move to another within
	// the goal watch's retry. Required.
	ControlAddr string
	// ControlTLS secures the connection to control (a client certificate
	// for mutual TLS). nil means plaintext, allowed only when ControlAddr
	// is a loopback address.
	ControlTLS *tls.Config
	// Listen is the UDP address agents dial; default DefaultListen. Port 0
	// picks a free port (see Addr).
	Listen string
	// TLS is the QUIC server configuration. Required: QUIC always runs TLS
	// 1.3. With ClientCAs and ClientAuth set (internal/tlsconfig.Server),
	// agents must present host certificates and their Hello's host id must
	// match the certificate.
	TLS *tls.Config
	// MetricsListen is the TCP address serving /metrics; "" (the default)
	// serves none. Metrics are always available from Metrics().
	MetricsListen string
	// Pprof serves the runtime profiles of net/http/pprof under
	// /debug/pprof/ on MetricsListen (e.g. a CPU profile of 5 s:
	// /debug/pprof/profile?seconds=5); false (the default) serves none.
	// For diagnosis on a trusted network: the listener has no
	// authentication.
	Pprof bool
	// CacheBytes bounds the in-memory version content; default
	// DefaultCacheBytes. Goal versions are pinned and never evicted (see
	// package versions).
	CacheBytes int64
	// ReportInterval is how often convergence is reported to control and
	// how often agents are asked to report; default DefaultReportInterval,
	// at most MaxReportInterval. Each report stays valid at control for
	// three intervals, at most MaxReportTTL.
	ReportInterval time.Duration
	// RedialRate is fanout.Options.RedialRate: the agents per second this
	// distributor admits after a restart, which sizes the redial spread
	// its agents are told; zero means fanout.DefaultRedialRate, negative
	// no spread.
	RedialRate float64
	// KeepaliveRate is fanout.Options.KeepaliveRate: the keepalives per
	// second this distributor budgets for its idle agents, which sizes the
	// keepalive interval they are told; zero means
	// fanout.DefaultKeepaliveRate, negative no advice.
	KeepaliveRate float64
	// GSO is fanout.Options.GSO: UDP segmentation offload for the agents'
	// connections, off by default (memory per agent).
	GSO bool
	// DomainRefresh is how often the policies of the domains the zone's
	// goals name (acl.readers, quotas.outbound_bytes_per_second) are read
	// again from control; default DefaultDomainRefresh. A domain is read
	// before its first namespace is served.
	DomainRefresh time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Version is the build the distributor announces to agents (Welcome)
	// and to control (ReportZoneStatus); default this binary's
	// (buildinfo.Get().String()).
	Version string
}

// Stats is a distributor's state at one moment. The byte counters are the
// update frames written to agents.
type Stats struct {
	fanout.Stats
	// Goals is the number of namespaces with a goal in the zone; Wanted
	// those some connected agent subscribes to; Serving those whose goal
	// version is in memory and pushed to agents: the wanted ones, once
	// loaded (a distributor holds only what its agents use).
	Goals, Wanted, Serving int
	// ControlConnected says whether the goal watch is currently streaming.
	ControlConnected bool
	// ControlReconnects counts goal watch reconnections.
	ControlReconnects uint64
	// Reports and ReportErrors count ReportZoneStatus calls.
	Reports, ReportErrors uint64
	// Cache describes the version cache.
	Cache versions.Stats
}

// Distributor is one zonal distributor. Create it with New, start it with
// Run.
type Distributor struct {
	opts  Options
	log   *slog.Logger
	set   *metrics.Set
	conn  *grpc.ClientConn
	ctl   lehrpb.ControlClient
	cache *versions.Cache
	watch *goalwatch.Watcher
	pin   *storePin // the control store followed

	reconnects   *metrics.Counter
	reports      *metrics.Counter
	reportErrors *metrics.Counter
	// zoneDistributors is the zone's distributors as control last counted
	// them (0 before its first answer): the share of per-zone quotas.
	zoneDistributors atomic.Int64

	ready     chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
	runCalled bool
	closed    bool // Close was called

	mu          sync.Mutex
	srv         *fanout.Server
	metricsAddr net.Addr
	serving     int

	// domains are the policies of the domains served (domains.go).
	domainMu sync.Mutex
	domains  map[string]fanout.DomainPolicy
	// wanted are domains an agent subscribes to without a goal here, to
	// look up (lookupDomains); buffered, never blocks the fan-out.
	wanted chan string

	// syncq holds namespaces whose goal changed and must be (re)synced,
	// fairly between domains (syncqueue.go); retry the ones whose sync
	// failed, each due again after its own backoff; synced says the goals
	// served may have changed since serving was counted.
	syncq   *syncQueue
	retryMu sync.Mutex
	retry   map[string]syncRetryState
	synced  atomic.Bool
}

// New validates opts and prepares a distributor. It opens no socket and
// starts no goroutine (the gRPC client to control connects lazily).
func New(opts Options) (*Distributor, error) {
	if err := names.Zone(opts.Zone); err != nil {
		return nil, fmt.Errorf("distributor: Options.Zone: %w", err)
	}
	if opts.ControlAddr == "" {
		return nil, errors.New("distributor: Options.ControlAddr is required")
	}
	if opts.TLS == nil {
		return nil, errors.New("distributor: Options.TLS is required: agents connect over QUIC, which always runs TLS 1.3")
	}
	ctlAddrs, err := controladdr.Parse(opts.ControlAddr)
	if err != nil {
		return nil, fmt.Errorf("distributor: Options.ControlAddr: %w", err)
	}
	if opts.ControlTLS == nil && !ctlAddrs.Local() {
		return nil, fmt.Errorf("distributor: Options.ControlTLS is nil but control address %s is not loopback: plaintext is only allowed on loopback", opts.ControlAddr)
	}
	if err := certIdentity(&opts); err != nil {
		return nil, err
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "distributor"
		}
		opts.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	if opts.DomainRefresh <= 0 {
		opts.DomainRefresh = DefaultDomainRefresh
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = DefaultReportInterval
	}
	if opts.ReportInterval > MaxReportInterval {
		return nil, fmt.Errorf("distributor: Options.ReportInterval %v: at most %v (control keeps a report at most %v, and each must outlive the next)",
			opts.ReportInterval, MaxReportInterval, MaxReportTTL)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = buildinfo.Get().String()
	}
	log := opts.Logger.With("zone", opts.Zone, "distributor", opts.ID)

	set := metrics.NewSet()
	for use, cfg := range map[string]*tls.Config{"server": opts.TLS, "control_client": opts.ControlTLS} {
		if err := metricshttp.RegisterCertificateExpiry(set, use, cfg); err != nil {
			return nil, fmt.Errorf("distributor: %w", err)
		}
	}
	pin := newStorePin(log, set) // storepin.go
	creds := insecure.NewCredentials()
	if opts.ControlTLS != nil {
		creds = credentials.NewTLS(opts.ControlTLS)
	}
	target, dialOpts := ctlAddrs.Dial()
	conn, err := grpc.NewClient(target, append(dialOpts,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxControlMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// gRPC's own reconnect backoff grows to 2 minutes by default: a
		// distributor whose control came back after a while reconnected
		// 6-20 s later (issue 29). Capped at 3 s, it is back within a few
		// seconds; the goal watch paces its own retries on top.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		pin.unary(), pin.stream(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("distributor: control client for %s: %w", opts.ControlAddr, err)
	}
	d := &Distributor{
		opts:   opts,
		log:    log,
		set:    set,
		pin:    pin,
		conn:   conn,
		ctl:    lehrpb.NewControlClient(conn),
		ready:  make(chan struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		syncq:  newSyncQueue(syncWorkers / 2),
		retry:  map[string]syncRetryState{},
		wanted: make(chan string, 64),
	}
	d.cache = versions.New(versions.Options{Client: d.ctl, MaxBytes: opts.CacheBytes, Logger: log, Metrics: d.set})
	d.watch, err = goalwatch.New(goalwatch.Options{
		Zone:        opts.Zone,
		Client:      d.ctl,
		Logger:      log,
		OnChange:    d.markDirty,
		OnReconnect: func() { d.reconnects.Inc() },
		OnMessage:   d.offerDeltas,
		CreateZone:  true,
		Deltas:      true,
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("distributor: %w", err)
	}
	d.reconnects = d.set.NewCounter("lehr_distributor_control_reconnects_total")
	d.reports = d.set.NewCounter("lehr_distributor_reports_total")
	d.reportErrors = d.set.NewCounter("lehr_distributor_report_errors_total")
	d.set.NewGauge("lehr_distributor_control_connected", func() float64 {
		if d.watch.Connected() {
			return 1
		}
		return 0
	})
	d.set.NewGauge("lehr_distributor_goals", func() float64 { return float64(len(d.watch.Goals())) })
	d.set.NewGauge("lehr_distributor_namespaces_wanted", func() float64 {
		d.mu.Lock()
		srv := d.srv
		d.mu.Unlock()
		if srv == nil {
			return 0
		}
		return float64(srv.WantedNamespaces())
	})
	d.set.NewGauge("lehr_distributor_zone_distributors", func() float64 { return float64(d.zoneDistributors.Load()) })
	d.set.NewGauge("lehr_distributor_cache_bytes", func() float64 { return float64(d.cache.Stats().Bytes) })
	d.set.NewGauge("lehr_distributor_cache_versions", func() float64 { return float64(d.cache.Stats().Versions) })
	return d, nil
}

// Ready is closed once the QUIC listener (and the metrics listener, if
// any) is bound and agents can connect.
func (d *Distributor) Ready() <-chan struct{} { return d.ready }

// Addr is the UDP address agents dial; nil before Ready.
func (d *Distributor) Addr() net.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.srv == nil {
		return nil
	}
	return d.srv.Addr()
}

// MetricsAddr is the address serving /metrics; nil before Ready or when
// MetricsListen is empty.
func (d *Distributor) MetricsAddr() net.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metricsAddr
}

// Metrics is the distributor's metric set (lehr_distributor_*).
func (d *Distributor) Metrics() *metrics.Set { return d.set }

// ID is the distributor's instance id.
func (d *Distributor) ID() string { return d.opts.ID }

// Stats returns the distributor's counters and state.
func (d *Distributor) Stats() Stats {
	d.mu.Lock()
	srv, serving := d.srv, d.serving
	d.mu.Unlock()
	var st Stats
	if srv != nil {
		st.Stats = srv.Stats()
	}
	st.Goals = len(d.watch.Goals())
	st.Serving = serving
	if srv != nil {
		st.Wanted = srv.WantedNamespaces()
	}
	st.ControlConnected = d.watch.Connected()
	st.ControlReconnects = d.reconnects.Get()
	st.Reports = d.reports.Get()
	st.ReportErrors = d.reportErrors.Get()
	st.Cache = d.cache.Stats()
	return st
}

// Convergence returns how many agents are connected and how many hold
// each version of each namespace (what is reported to control).
func (d *Distributor) Convergence() (agents int, counts []fanout.VersionCount) {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return 0, nil
	}
	return srv.Convergence()
}

// AgentBuilds returns the connected agents per build they announced
// (fanout.Server.AgentBuilds).
func (d *Distributor) AgentBuilds() []*lehrpb.BuildCount {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.AgentBuilds()
}

// CacheQuarantines returns the connected agents that moved an unopenable
// cache aside since they started (fanout.Server.CacheQuarantines).
func (d *Distributor) CacheQuarantines() []*lehrpb.CacheQuarantine {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.CacheQuarantines()
}

// Health returns the consumer health of the namespaces rollouts move and
// of those in trouble, per-host detail (fanout.Server.Health) and the
// cohort samples candidates ask for (fanout.Server.Samples).
func (d *Distributor) Health() ([]*lehrpb.NamespaceHealth, []*lehrpb.HostReport, []*lehrpb.CohortSample) {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return nil, nil, nil
	}
	h, hosts := srv.Health()
	return h, hosts, srv.Samples()
}

// Preview returns the policy-preview counts of the connected agents,
// summed (fanout.Server.Preview).
func (d *Distributor) Preview() []*lehrpb.NamespacePreviewCounts {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Preview()
}

// Signals returns the signals kept of the hosts canary analyses watch
// (fanout.Server.Signals), then asks those hosts for their newest
// intervals (fanout.Server.RequestSignals): the answers arrive before the
// next call.
func (d *Distributor) Signals(now time.Time) []*lehrpb.HostSignals {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv == nil {
		return nil
	}
	out := srv.Signals()
	srv.RequestSignals(now)
	return out
}

// Close stops a running distributor and waits until Run has returned. It
// is idempotent and may be called before, during or after Run.
func (d *Distributor) Close() error {
	d.mu.Lock()
	ran := d.runCalled
	d.runCalled, d.closed = true, true // Run after Close returns at once
	d.mu.Unlock()
	d.stopOnce.Do(func() {
		close(d.stop)
		if !ran {
			// Run, which would have closed it, never will.
			close(d.done)
			d.conn.Close()
		}
	})
	<-d.done
	return nil
}

// Run serves until ctx is done or Close is called, then stops everything
// it started and returns. It returns an error if the listeners cannot be
// bound or the zone is refused by control; losing control is not an error.
// Run may be called once.
func (d *Distributor) Run(ctx context.Context) (err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	if d.runCalled {
		d.mu.Unlock()
		return errors.New("distributor: Run called twice")
	}
	d.runCalled = true
	d.mu.Unlock()
	defer close(d.done)
	defer d.conn.Close()
	defer d.cache.Close()
	select {
	case <-d.stop:
		return nil
	default:
	}

	srv, err := fanout.Listen(fanout.Options{
		Listen:         d.opts.Listen,
		TLS:            d.opts.TLS,
		Zone:           d.opts.Zone,
		DistributorID:  d.opts.ID,
		Version:        d.opts.Version,
		Versions:       d.cache,
		Metrics:        d.set,
		Logger:         d.log,
		ReportInterval: d.opts.ReportInterval,
		RedialRate:     d.opts.RedialRate,
		KeepaliveRate:  d.opts.KeepaliveRate,
		GSO:            d.opts.GSO,
		DomainWanted:   d.wantDomain,
		// Location-aware: a namespace's content is loaded when the first
		// agent here subscribes to it and released when the last one
		// leaves (syncOne), so a zone holds what its hosts use, not the
		// whole catalog.
		Wanted:  func(nss []string, _ bool) { d.syncq.add(nss...) },
		Pending: func(ns string) bool { _, ok := d.watch.Goal(ns); return ok },
	})
	if err != nil {
		return fmt.Errorf("distributor: %w", err)
	}
	var hs *http.Server
	var mln net.Listener
	if d.opts.MetricsListen != "" {
		mln, err = net.Listen("tcp", d.opts.MetricsListen)
		if err != nil {
			srv.Close()
			return fmt.Errorf("distributor: metrics listen %s: %w", d.opts.MetricsListen, err)
		}
		var extra map[string]http.Handler
		if d.opts.Pprof {
			extra = pprofHandlers()
		}
		hs = metricshttp.Server(d.set, metricsHelp, extra)
	}
	d.mu.Lock()
	d.srv = srv
	if mln != nil {
		d.metricsAddr = mln.Addr()
	}
	d.mu.Unlock()

	// Every part runs in one lifecycle.Group: the first that fails ends
	// the others, and Run returns its error.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	g, ctx := lifecycle.New(ctx, "distributor")
	g.Go("serve agents", srv.Serve)
	g.Go("watch goals", d.watch.Run)
	g.Go("sync goals", d.syncGoals)
	g.Go("report", d.report)
	g.Go("refresh domains", d.refreshDomains)
	g.Go("look up domains", d.lookupDomains)
	if hs != nil {
		g.Go("serve metrics", func(context.Context) error {
			if err := hs.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	close(d.ready)
	d.log.Info("distributor serving", "listen", srv.Addr().String(), "control", d.opts.ControlAddr, "build", d.opts.Version)

	select {
	case <-ctx.Done():
	case <-d.stop:
	}
	stop()
	srv.Close()
	if hs != nil {
		hs.Close()
	}
	err = g.Wait()
	d.log.Info("distributor stopped", "err", err)
	return err
}

// offerDeltas gives the version cache the small changes control sent
// with goal events, before the watcher applies them and the goals' new
// versions are fetched (syncGoals): those built here need no call to
// control.
func (d *Distributor) offerDeltas(m *lehrpb.WatchGoalsResponse) {
	for _, ev := range m.GetEvents() {
		if ev.GetDelta() == nil {
			continue
		}
		if err := d.cache.Offer(ev.GetGoal().GetNamespace(), ev.GetDelta()); err != nil {
			d.log.Warn("cannot build a version from the change sent with its goal; fetching it instead", "namespace", ev.GetGoal().GetNamespace(), "err", err)
		}
	}
}

// markDirty records namespaces whose goal changed; syncGoals' workers
// pick them up.
func (d *Distributor) markDirty(nss []string) { d.syncq.add(nss...) }

// syncWorkers bounds concurrent version fetches from control; a domain
// takes at most half of them (syncQueue).
const syncWorkers = 8

// syncRetry paces the retries of a goal version that could not be fetched
// (control unreachable): 200 ms, doubling to 10 s, with equal jitter.
var syncRetry = backoff.Policy{Min: 200 * time.Millisecond, Max: 10 * time.Second}

// syncRetryState is a namespace whose sync failed: how many times in a
// row, and when it is due again.
type syncRetryState struct {
	attempts int
	due      time.Time
}

// syncGoals makes the fanout's goals follow the watcher's: for each
// namespace whose goal changed a worker pins and fetches the goal version
// and hands it to the fanout, taking namespaces fairly between domains. A
// fetch that fails (control unreachable) is retried with backoff;
// meanwhile agents keep the previous goal.
func (d *Distributor) syncGoals(ctx context.Context) error {
	var wg sync.WaitGroup
	for range syncWorkers {
		wg.Go(func() {
			for {
				ns, ok := d.syncq.next(ctx)
				if !ok {
					return
				}
				d.syncAndCount(ctx, ns)
				d.syncq.done(ns)
			}
		})
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
		var due []string
		now := time.Now()
		d.retryMu.Lock()
		for ns, r := range d.retry {
			if !now.Before(r.due) {
				due = append(due, ns)
				r.due = now.Add(time.Hour) // until this retry's result
				d.retry[ns] = r
			}
		}
		d.retryMu.Unlock()
		d.syncq.add(due...)
		if d.synced.Swap(false) {
			d.countServing()
		}
	}
}

// syncAndCount syncs ns and records its failure for a retry, or its
// success.
func (d *Distributor) syncAndCount(ctx context.Context, ns string) {
	err := d.syncOne(ctx, ns)
	d.retryMu.Lock()
	defer d.retryMu.Unlock()
	if err == nil {
		delete(d.retry, ns)
		d.synced.Store(true)
		return
	}
	if ctx.Err() != nil {
		return
	}
	d.log.Warn("cannot fetch goal version; agents keep the previous one until it can", "namespace", ns, "err", err)
	r := d.retry[ns]
	r.due = time.Now().Add(syncRetry.Equal(r.attempts))
	r.attempts++
	d.retry[ns] = r
}

// countServing counts the goals the fanout serves (Status.Serving).
func (d *Distributor) countServing() {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	n := 0
	for ns := range d.watch.Goals() {
		if _, ok := srv.Goal(ns); ok {
			n++
		}
	}
	d.mu.Lock()
	d.serving = n
	d.mu.Unlock()
}

func (d *Distributor) syncOne(ctx context.Context, ns string) error {
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	g, ok := d.watch.Goal(ns)
	if !ok || !srv.Wanted(ns) {
		// No goal, or no agent here subscribes to it: nothing to hold.
		// Its versions stay in the cache, unpinned, until evicted, so an
		// agent subscribing again soon costs no fetch.
		srv.ClearGoal(ns)
		d.cache.Unpin(ns)
		return nil
	}
	cand := g.GetCandidate()
	if cand.GetVersion() == 0 {
		d.cache.Pin(ns, g.GetVersion())
	} else {
		d.cache.Pin(ns, g.GetVersion(), cand.GetVersion())
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fetch := func(ref content.Ref) (*content.Version, error) {
		v, err := d.cache.Get(fctx, ns, ref)
		if err != nil {
			return nil, err
		}
		if v.Checksum != ref.Checksum {
			return nil, fmt.Errorf("goal %s@%d: %w: goal says %s, version has %s", ns, ref.Seq, versions.ErrChecksum, ref.Checksum, v.Checksum)
		}
		return v, nil
	}
	stable, err := fetch(content.Ref{Seq: g.GetVersion(), Checksum: g.GetChecksum()})
	if err != nil {
		return err
	}
	// Who may read it, and at what rate, is known before anyone is served.
	if err := d.ensureDomain(fctx, ns); err != nil {
		return err
	}
	// The fanout gets the versions' identity only; their content stays in
	// the cache, pinned but evictable past --cache-bytes (fetched again
	// when needed), so memory is bounded whatever the agents use.
	goal := fanout.Goal{Stable: stable.Header()}
	if len(g.GetSignature()) > 0 {
		goal.Proof = signing.GoalProof(g)
	}
	if cand.GetVersion() != 0 {
		c, err := fetch(content.Ref{Seq: cand.GetVersion(), Checksum: cand.GetChecksum()})
		if err != nil {
			return err
		}
		goal.Candidate = c.Header()
		goal.Cohort = cohort.Cohort{Hosts: cand.GetHosts(), PerMillion: cand.GetPerMillion(), Salt: cand.GetSalt()}
		goal.Sample = int(cand.GetSample())
		goal.Analysis = int(cand.GetAnalysis())
		goal.Checks = cand.GetChecks()
	}
	srv.SetGoal(goal) // no change if it is the current goal
	return nil
}

// report sends ReportZoneStatus every ReportInterval.
func (d *Distributor) report(ctx context.Context) error {
	t := time.NewTicker(d.opts.ReportInterval)
	defer t.Stop()
	ttl := uint32(max(1, (min(3*d.opts.ReportInterval, MaxReportTTL)+time.Second-1)/time.Second))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		agents, counts := d.Convergence()
		req := &lehrpb.ReportZoneStatusRequest{
			Zone:             d.opts.Zone,
			DistributorId:    d.opts.ID,
			Agents:           int32(agents),
			TtlSeconds:       ttl,
			DistributorBuild: d.opts.Version,
			AgentBuilds:      d.AgentBuilds(),
			CacheQuarantines: d.CacheQuarantines(),
		}
		for _, c := range counts {
			req.Versions = append(req.Versions, &lehrpb.VersionCount{Namespace: c.Namespace, Version: c.Version, Agents: int32(c.Agents),
				Consumers: uint32(c.Consumers), Services: services.Top(c.Services)})
		}
		req.Health, req.Hosts, req.Samples = d.Health()
		req.Signals = d.Signals(time.Now())
		req.Preview = d.Preview()
		rctx, cancel := context.WithTimeout(ctx, d.opts.ReportInterval)
		resp, err := d.ctl.ReportZoneStatus(rctx, req)
		cancel()
		d.reports.Inc()
		if err != nil && ctx.Err() == nil {
			d.reportErrors.Inc()
			d.log.Info("report zone status", "err", err)
		}
		if n := int(resp.GetDistributors()); n > 0 {
			// The zone's per-domain quotas, split between its live
			// distributors; until control counts them, this one keeps the
			// last share (at first, the whole quota).
			d.zoneDistributors.Store(int64(n))
			d.mu.Lock()
			srv := d.srv
			d.mu.Unlock()
			if srv != nil {
				srv.SetShare(n)
			}
		}
	}
}

// certIdentity sets opts.ID from the distributor identity of the client
// certificate presented to control, if it carries one, and refuses an ID
// or a zone that differ from it: control refuses reports and goal watches
// under any other.
func certIdentity(opts *Options) error {
	if opts.ControlTLS == nil || len(opts.ControlTLS.Certificates) == 0 || len(opts.ControlTLS.Certificates[0].Certificate) == 0 {
		return nil
	}
	leaf := opts.ControlTLS.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(opts.ControlTLS.Certificates[0].Certificate[0]); err != nil {
			return fmt.Errorf("distributor: Options.ControlTLS: the client certificate: %w", err)
		}
	}
	id, ok, err := tlsconfig.CertRole(leaf)
	switch {
	case err != nil:
		return fmt.Errorf("distributor: Options.ControlTLS: the client certificate: %w", err)
	case !ok || id.Role != tlsconfig.RoleDistributor:
		return nil // control refuses it, saying why
	case id.Zone != opts.Zone:
		return fmt.Errorf("distributor: Options.Zone is %q but the client certificate for control is %s, a distributor of zone %q; control lets it serve only that zone", opts.Zone, id, id.Zone)
	case opts.ID != "" && opts.ID != id.Name:
		return fmt.Errorf("distributor: Options.ID is %q but the client certificate for control is %s: control files reports only under the certificate's id; leave the id empty (it is then %q) or issue a certificate for %q",
			opts.ID, id, id.Name, opts.ID)
	}
	opts.ID = id.Name
	return nil
}
