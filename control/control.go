// Package control is the Lehr control plane daemon: it serves the Control
// gRPC API (control/service) over state kept in etcd (control/store), runs
// the rollout strategist (control/rollout) with its canary evaluations
// (control/evaluation), the history compactor and the store's space
// monitor, registers itself among the control replicas sharing the store
// (lehr control status), marks every response with the store's identity
// (internal/storeid), and exposes /metrics, /healthz and the gRPC health
// service. With Options.HTTPListen it serves the API as HTTP/JSON too
// (control/httpapi), through its own gRPC server, and the operator
// console (control/console) beside it.
// With no etcd endpoints configured it runs a single-member etcd inside
// the process, in its data directory (control/embedetcd).
//
// Imported by cmd/lehr (the "lehr control" command), control/controltest,
// testenv/devcluster, testenv/devtour, bench and tests.
package control

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/console"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/control/httpapi"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/previewhist"
	"lehr.dev/lehr/control/propagation"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/strategist"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/lifecycle"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/peercred"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/storeid"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of Options.
const (
	DefaultDataDir         = "./lehr-data"
	DefaultListen          = "127.0.0.1:7400"
	DefaultMetricsListen   = "127.0.0.1:7401"
	DefaultMaxMessageBytes = 24 << 20
	DefaultCompactInterval = 10 * time.Minute
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultStoreQuota is the embedded etcd's backend quota: room for
	// UCDP's catalog of 71,000 namespaces of a realistic size mix (about
	// 4.4 GiB) with the reserve kept for the safety path
	// (docs/operations.md, "Quotas"); etcd suggests no more than 8 GiB.
	DefaultStoreQuota = 8 << 30
)

// healthInterval is how often the gRPC health status is refreshed from etcd.
const healthInterval = 2 * time.Second

// Options configures a Control. The zero value runs an embedded etcd in
// ./lehr-data/etcd and serves plaintext gRPC on 127.0.0.1:7400.
type Options struct {
	// DataDir holds the embedded etcd's data in DataDir/etcd (unless
	// EtcdEndpoints is set) and, by default, the signing key. Default
	// DefaultDataDir ("./lehr-data").
	DataDir string
	// SigningKey is the ed25519 private key that signs every version
	// (internal/signing; PEM PKCS #8, mode 0600). Default
	// DataDir/signing.key, created on first start. Its public key is
	// written beside it (.pub instead of .key) for agents to trust
	// (lehr-agent --trusted-keys). "off" signs nothing.
	SigningKey string
	// EtcdEndpoints, if set, are the client URLs of an external etcd
	// cluster to use instead of the embedded one. The same client code
	// path serves both. An https:// endpoint needs EtcdTLS; an http://
	// one must be on loopback: every tenant's configuration crosses the
	// network to a remote etcd only over mutual TLS (CheckEtcdEndpoints).
	EtcdEndpoints []string
	// EtcdTLS is the TLS configuration for an external etcd: the CA that
	// issued its members' certificates and this replica's client
	// certificate (internal/tlsconfig.Client). Nil: plaintext.
	EtcdTLS *tls.Config
	// StoreTimeout bounds each etcd request control makes for a call (and
	// for its background work; not watches, compaction or
	// defragmentation): past it the call fails with UNAVAILABLE saying
	// the store did not answer within StoreTimeout, so a cluster that
	// lost quorum or cannot be reached fails calls within seconds rather
	// than holding them until the caller gives up. Zero: on an external
	// cluster store.DefaultRequestTimeout (10 s), on the embedded member
	// no bound (it cannot lose a quorum, and its requests wait out its own
	// defragmentation); negative, no bound.
	StoreTimeout time.Duration
	// EtcdProbeTimeout bounds the first request to an external etcd: past
	// it Run fails, saying why (which TLS side refused the other, or that
	// no member answered), instead of hanging. Default
	// DefaultEtcdProbeTimeout.
	EtcdProbeTimeout time.Duration
	// Listen is the gRPC address. Default DefaultListen
	// ("127.0.0.1:7400"); port 0 picks a free port (see Addr). Without
	// TLS it must be a loopback address: control refuses to serve
	// plaintext to the network.
	Listen string
	// Socket, if set, is a unix socket control also serves the API on, in
	// plaintext, for callers on this host: each is the local account its
	// uid names (internal/peercred; SO_PEERCRED), identity
	// "unix:<account>" — not the certificate user of that name, unless
	// LocalUsers maps it — with a user's rights under the domain ACLs; an
	// author it asserts other than its identity is refused. The socket is
	// mode 0666 (its directory decides who reaches it); a stale one is
	// replaced.
	Socket string
	// LocalUsers maps local accounts on Socket to the certificate users
	// they act as ({"alice": "alice"}: the local account alice is the user
	// of spiffe://lehr/user/alice for ACLs, authorship, the audit log and
	// FleetAdmins). Nil (the default): every local account is
	// "unix:<account>", a user distinct from every certificate user.
	LocalUsers map[string]string
	// FleetAdmins are the identities who may make fleet-wide changes:
	// create zones, and raise a domain's quotas above DomainDefaults — a
	// certificate user's name (the <name> of spiffe://lehr/user/<name>),
	// or "unix:<account>" for a local account on Socket (one LocalUsers
	// maps is its user). Besides them only the user control runs as and
	// root (on Socket), control replicas and, in DevMode, callers control
	// cannot identify may; and a distributor may register its own zone.
	// Empty (the default): nobody else.
	FleetAdmins []string
	// DevMode lets callers control cannot identify — plaintext TCP on
	// loopback, TLS without a client certificate — change anything under
	// any author they assert ("lehr --as"). Off (the default), they may
	// only read: changes come over Socket, or with a client certificate.
	// For lehr dev and test beds.
	DevMode bool
	// HTTPListen, if set, is the address of the HTTP/JSON API (AIP-127;
	// docs/operations.md, "HTTP/JSON"): the methods of control.proto with a
	// google.api.http option, e.g. GET /v1/namespaces/acme/web:get. It is
	// served with TLS (the TLS option, so client certificates exactly as
	// for gRPC), or plaintext on a loopback address only, and every request
	// is a call to control's own gRPC server as the HTTP caller — the same
	// identities, ACLs, audit and errors (control/httpapi). The operator
	// console (control/console) is served there too, under /console/,
	// reading and acting as its caller in the same way. Empty (the
	// default): off, so an upgrade opens no new port; lehr dev turns it on.
	HTTPListen string
	// ConsoleURL is the base URL people reach the console at, e.g.
	// https://lehr.example.com:8443 (behind a proxy, with its prefix): a
	// canary evaluation's uri is it followed by the evaluation's console
	// path, so every tool can link to it. Empty: the path alone.
	ConsoleURL string
	// MetricsListen is the HTTP address of /metrics (Prometheus text) and
	// /healthz. Default DefaultMetricsListen ("127.0.0.1:7401"); "off"
	// disables the listener. It is plaintext even when gRPC uses TLS.
	MetricsListen string
	// TLS, if set, makes gRPC use TLS 1.3 with this server configuration
	// (internal/tlsconfig.Server builds one from PEM files). With ClientCAs
	// and ClientAuth set it requires every client to present a certificate
	// (mutual TLS), whose Lehr identity (its URI SAN; never its common
	// name) is then who the client is: the author of what it changes,
	// checked against the domain ACLs. nil (the default) serves plaintext, which New
	// accepts only on a loopback Listen address (ErrPlaintextNotLoopback).
	TLS *tls.Config
	// Retention is the history compaction policy; zero fields take the
	// store's defaults (keep the last 100 versions and every version younger
	// than 7 days).
	Retention store.Retention
	// CompactInterval is how often history is compacted. Default
	// DefaultCompactInterval (10 minutes); negative disables compaction.
	CompactInterval time.Duration
	// StorePrefix is the prefix of every etcd key. Default "/lehr/".
	StorePrefix string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes bounds gRPC messages in both directions. Default
	// DefaultMaxMessageBytes (24 MiB): a namespace may hold 16 MiB of keys
	// and values, plus content types and framing (at most 10,000
	// properties: under 19 MiB).
	MaxMessageBytes int
	// ShutdownTimeout bounds the graceful stop: in-flight calls get this
	// long to finish before they are cut. Default DefaultShutdownTimeout
	// (10 s).
	ShutdownTimeout time.Duration
	// Metrics receives every metric; default a new set owned by Control.
	Metrics *metrics.Set
	// GoalPolicy decides how publishes move zone goal states; default
	// service.AllZones (every publish moves every zone).
	GoalPolicy service.GoalPolicy
	// DefaultRolloutPolicy is the rollout policy of a domain that set
	// none; nil means rollout.Default() ("lehr dev" uses rollout.Fast()).
	DefaultRolloutPolicy *lehrpb.RolloutPolicy
	// Rollouts runs the rollout strategist (one replica leads at a time)
	// and makes publishes progressive: a new version moves zone goals
	// stage by stage as its rollout policy says (GoalPolicy, unless set,
	// becomes service.Progressive). Off, every publish moves every zone at
	// once.
	Rollouts bool
	// RolloutInterval is how often the strategist looks at every rollout;
	// default strategist.DefaultInterval.
	RolloutInterval time.Duration
	// ExperimentSampleInterval is how often the strategist's leader
	// samples the counts of every active policy experiment into its
	// history (control/previewhist); default previewhist.DefaultInterval
	// (a minute). Tests use a short one. Sampled only with Rollouts.
	ExperimentSampleInterval time.Duration
	// Alerts is the alerts source of the rollouts' monitoring check
	// (control/alerts): Prometheus's or vmalert's /api/v1/alerts under
	// Alerts.URL, read by the strategist's leader at most once per
	// Alerts.Interval (never more often than RolloutInterval). A zero URL
	// (the default) means none: a rollout policy with a monitoring check
	// is refused. Metrics and Now are control's.
	Alerts alerts.Options
	// MetricsSource is the metrics source of the canary checks written as
	// queries (control/metricsource): a Prometheus-compatible
	// /api/v1/query_range under MetricsSource.URL. A zero URL (the default)
	// means none: an analysis with such a check is refused.
	// MetricsSource.Metrics is control's.
	MetricsSource metricsource.Options
	// NoSync runs the embedded etcd without fsync: data survives a process
	// restart but not a machine crash. The zero value is durable; tests
	// only.
	NoSync bool
	// StoreQuota is the store's size limit in bytes: the embedded etcd's
	// backend quota (default DefaultStoreQuota), or, for an external
	// cluster, the quota it was started with when it does not report it
	// (etcd before 3.6; default etcd's 2 GiB). Above StoreQuota -
	// StoreReserve new content is refused (RESOURCE_EXHAUSTED/STORE_FULL)
	// and control reclaims space (control/store, space.go).
	StoreQuota int64
	// StoreReserve is the part of StoreQuota only the safety path —
	// rollbacks, goal moves, rollout state, the audit log — may use;
	// default a fifth of the quota.
	StoreReserve int64
	// DomainDefaults are the quotas of a domain that sets none; zero
	// fields take service.DefaultQuotas' values.
	DomainDefaults *lehrpb.Quotas
	// Admission bounds the publishes control receives and works on at
	// once (service.Admission); zero fields take the defaults: 32 calls,
	// 256 MiB of requests, a quarter of it per domain.
	Admission service.AdmissionOptions
	// AdvertiseAddr is the gRPC address ("host:port") other hosts reach
	// this replica at: how it is registered in the store and named in the
	// strategist's election (lehr control status). Default the listen
	// address, with this host's name for an unspecified host
	// (0.0.0.0:7400 becomes HOSTNAME:7400).
	AdvertiseAddr string
	// Version is the build this replica reports in lehr control status;
	// default this binary's (buildinfo.Get().String(): its release version
	// and commit, as lehr version prints them).
	Version string
}

// Control is the control plane daemon. Create it with New, start it with
// Run, stop it by cancelling Run's context or with Close.
type Control struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics.Set
	tls     *tls.Config // nil for plaintext

	ready chan struct{}

	mu          sync.Mutex
	started     bool
	closed      bool
	cancel      context.CancelFunc
	done        chan struct{} // closed when Run returns
	addr        net.Addr
	httpAddr    net.Addr
	metricsAddr net.Addr
	signingPub  ed25519.PublicKey // see signer
	st          *store.Store      // set by Run once the store is open
}

// New checks opts and returns a Control. It reads the TLS files but starts
// nothing and listens on nothing.
func New(opts Options) (*Control, error) {
	if opts.DataDir == "" {
		opts.DataDir = DefaultDataDir
	}
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.MetricsListen == "" {
		opts.MetricsListen = DefaultMetricsListen
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.CompactInterval == 0 {
		opts.CompactInterval = DefaultCompactInterval
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	c := &Control{
		opts:    opts,
		log:     opts.Logger,
		metrics: opts.Metrics,
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	if opts.TLS == nil && !tlsconfig.IsLoopback(opts.Listen) {
		return nil, fmt.Errorf("control: Options.Listen %q: %w", opts.Listen, ErrPlaintextNotLoopback)
	}
	for use, cfg := range map[string]*tls.Config{"server": opts.TLS, "etcd_client": opts.EtcdTLS} {
		if err := metricshttp.RegisterCertificateExpiry(opts.Metrics, use, cfg); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
	}
	if opts.TLS != nil {
		c.tls = opts.TLS.Clone()
		if c.tls.MinVersion < tls.VersionTLS13 {
			c.tls.MinVersion = tls.VersionTLS13
		}
	}
	for _, a := range opts.FleetAdmins {
		if err := service.CheckPrincipal(a); err != nil {
			return nil, fmt.Errorf("%w: fleet admin %v (list them comma-separated)", ErrIdentityOptions, err)
		}
	}
	if err := service.CheckLocalUsers(opts.LocalUsers); err != nil {
		return nil, fmt.Errorf("%w: local users: %v", ErrIdentityOptions, err)
	}
	if opts.ConsoleURL != "" {
		if err := evaluation.CheckConsoleURL(opts.ConsoleURL); err != nil {
			return nil, fmt.Errorf("control: Options.ConsoleURL: %w", err)
		}
	}
	if opts.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(opts.HTTPListen); err != nil {
			return nil, fmt.Errorf("control: HTTP listen address %q: %w", opts.HTTPListen, err)
		}
		if opts.TLS == nil && !tlsconfig.IsLoopback(opts.HTTPListen) {
			return nil, fmt.Errorf("control: Options.HTTPListen %q: %w", opts.HTTPListen, ErrPlaintextNotLoopback)
		}
	}
	if opts.MetricsListen != "off" {
		if _, _, err := net.SplitHostPort(opts.MetricsListen); err != nil {
			return nil, fmt.Errorf("control: metrics listen address %q: %w", opts.MetricsListen, err)
		}
	}
	if a := opts.AdvertiseAddr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil || strings.Contains(a, "/") {
			return nil, fmt.Errorf("control: advertise address %q: want host:port", a)
		}
	}
	if c.opts.Version == "" {
		c.opts.Version = buildinfo.Get().String()
	}
	return c, nil
}

// ErrIdentityOptions is wrapped by New's error for Options.FleetAdmins or
// Options.LocalUsers that name no identity.
var ErrIdentityOptions = errors.New("control: invalid identities")

// ErrPlaintextNotLoopback is returned by New when Options.TLS is nil and
// Options.Listen (or Options.HTTPListen) is not a loopback address:
// control never serves plaintext to the network.
var ErrPlaintextNotLoopback = errors.New("control: plaintext gRPC is served on loopback addresses only; give control a TLS server certificate (Options.TLS) or listen on 127.0.0.1")

// Ready is closed once control serves gRPC (Addr is then valid). It is not
// closed if Run fails before that.
func (c *Control) Ready() <-chan struct{} { return c.ready }

// Addr returns the gRPC listen address, or nil before Ready.
func (c *Control) Addr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// HTTPAddr returns the HTTP/JSON API's address, or nil before Ready or
// when Options.HTTPListen is empty.
func (c *Control) HTTPAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.httpAddr
}

// MetricsAddr returns the metrics HTTP address, or nil before Ready or when
// the metrics listener is off.
func (c *Control) MetricsAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.metricsAddr
}

// StoreSpace returns the store's space as control last read it (the zero
// SpaceStatus before Run has opened the store).
func (c *Control) StoreSpace() store.SpaceStatus {
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	if st == nil {
		return store.SpaceStatus{}
	}
	return st.Space()
}

// Metrics returns the set control records into.
func (c *Control) Metrics() *metrics.Set { return c.metrics }

// Close stops a running control and waits until Run has returned. It is
// idempotent and safe to call before Run (Run then fails at once).
func (c *Control) Close() error {
	c.mu.Lock()
	c.closed = true
	cancel, started := c.cancel, c.started
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if started {
		<-c.done
	}
	return nil
}

// Run starts etcd (unless external), the gRPC and metrics servers and the
// compactor, serves until ctx is done or Close is called, then shuts down
// gracefully and returns. It returns a non-nil error only if something
// failed; a normal stop returns nil. Run may be called once.
func (c *Control) Run(ctx context.Context) (err error) {
	c.mu.Lock()
	if c.started || c.closed {
		c.mu.Unlock()
		return errors.New("control: Run called twice or after Close")
	}
	c.started = true
	ctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.mu.Unlock()
	defer close(c.done)
	defer cancel()
	start := time.Now()

	// Storage.
	endpoints := c.opts.EtcdEndpoints
	var etcdErr <-chan error
	var cli, maint *clientv3.Client
	dir := "" // the embedded etcd's
	if len(endpoints) == 0 {
		dir = filepath.Join(c.opts.DataDir, "etcd")
		srv, err := embedetcd.Start(ctx, embedetcd.Options{
			Dir:    dir,
			Name:   "lehr",
			Logger: c.log,
			NoSync: c.opts.NoSync,
			// The quota control's space watch keeps writes under.
			QuotaBackendBytes: cmp.Or(c.opts.StoreQuota, DefaultStoreQuota),
			// Free pages are given back here, before anyone waits on
			// the member, rather than online (store.SpaceOptions.DefragAtStart).
			CompactAtStart: store.DefragFree,
			// Unix sockets in a 0700 directory: no other local user can
			// reach /lehr/* (docs/operations.md, "Security model").
			Private: true,
		})
		if err != nil {
			return fmt.Errorf("control: start embedded etcd in %s: %w", dir, err)
		}
		defer srv.Close()
		endpoints = srv.Endpoints()
		etcdErr = srv.Err()
		c.log.Info("control: embedded etcd started", "dir", dir, "endpoints", endpoints)
		if r := srv.Compacted(); r.Compacted {
			c.metrics.GetOrCreateCounter(`lehr_control_store_space_events_total{event="compact_at_start"}`).Inc()
			service.RoundTripObserver(c.metrics)("compact_at_start", r.Took, nil)
		}
		// The member is in this process: call it directly — but for
		// maintenance, which etcd's in-process client cannot do all of
		// (defragmentation), over its socket.
		cli = srv.InProcessClient()
		if maint, err = embedetcd.NewClient(ctx, endpoints); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		defer maint.Close()
	} else {
		var err error
		if err = CheckEtcdEndpoints(endpoints, c.opts.EtcdTLS != nil); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		if cli, err = embedetcd.NewTLSClient(ctx, endpoints, c.opts.EtcdTLS); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		if err = probeEtcd(ctx, cli, endpoints, c.opts.EtcdTLS, cmp.Or(c.opts.EtcdProbeTimeout, DefaultEtcdProbeTimeout)); err != nil {
			cli.Close()
			return fmt.Errorf("control: %w", err)
		}
	}
	defer cli.Close()
	signer, err := c.signer()
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	calls := newActivity(time.Now)
	st := store.New(cli, store.Options{
		SingleMember:   len(c.opts.EtcdEndpoints) == 0,
		RequestTimeout: c.opts.StoreTimeout,
		Prefix:         c.opts.StorePrefix,
		Retention:      c.opts.Retention,
		Logger:         c.log,
		OnRoundTrip:    service.RoundTripObserver(c.metrics),
		Signer:         signer,
		Space: store.SpaceOptions{Quota: c.opts.StoreQuota, Reserve: c.opts.StoreReserve,
			Quiet:         func() bool { return calls.quietFor(defragQuiet) },
			DefragAtStart: len(c.opts.EtcdEndpoints) == 0},
		Maintenance: maint,
		OnDomainUsage: func(domain string, stored int64) {
			c.metrics.GetOrCreateGauge(fmt.Sprintf(`lehr_control_domain_stored_bytes{domain=%q}`, domain), nil).Set(float64(stored))
		},
		OnSpaceEvent: func(event string) {
			c.metrics.GetOrCreateCounter(`lehr_control_store_space_events_total{event="` + event + `"}`).Inc()
		},
	})
	registerSpaceMetrics(c.metrics, st)
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
	ident, err := st.EnsureIdentity(ctx)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	storeID := ident.Store.GetId()
	switch {
	case ident.Empty && dir != "" && !c.opts.DevMode:
		// The misconfiguration of issue 29: a replica meant for an
		// external cluster, started without its endpoints.
		c.log.Warn(fmt.Sprintf("control: created a new, empty store in %s with id %s. "+
			"If this replica belongs to a cluster of replicas, stop it: replicas share a store only through the external etcd "+
			"their --etcd-endpoints (LEHR_ETCD_ENDPOINTS) name; this one serves a store of its own, and distributors following "+
			"the cluster's store refuse its answers", dir, storeID), "dir", dir, "store_id", storeID)
	case ident.Empty:
		c.log.Info("control: created a new store", "store_id", storeID)
	case ident.Created:
		c.log.Info("control: gave the existing store an identity (first start of a release with store identities)", "store_id", storeID)
	}
	if n, err := st.SignUnsignedGoals(ctx); err != nil {
		return fmt.Errorf("control: %w", err)
	} else if n > 0 {
		c.log.Info("control: signed goal states written without a signature (by an earlier release)", "goals", n)
	}

	// Listeners.
	lis, err := net.Listen("tcp", c.opts.Listen)
	if err != nil {
		return fmt.Errorf("control: listen on %s: %w", c.opts.Listen, err)
	}
	defer lis.Close()
	var ulis net.Listener
	if c.opts.Socket != "" {
		if ulis, err = listenSocket(c.opts.Socket); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		defer ulis.Close()
	}
	var hlis net.Listener
	if c.opts.HTTPListen != "" {
		if hlis, err = net.Listen("tcp", c.opts.HTTPListen); err != nil {
			return fmt.Errorf("control: listen for HTTP/JSON on %s: %w", c.opts.HTTPListen, err)
		}
		defer hlis.Close()
	}
	var mlis net.Listener
	if c.opts.MetricsListen != "off" {
		mlis, err = net.Listen("tcp", c.opts.MetricsListen)
		if err != nil {
			return fmt.Errorf("control: listen for metrics on %s: %w", c.opts.MetricsListen, err)
		}
		defer mlis.Close()
	}

	address := advertiseAddr(c.opts.AdvertiseAddr, lis.Addr())
	electionKey := ""
	if c.opts.Rollouts {
		electionKey = st.Prefix() + "strategist"
	}
	goals := c.opts.GoalPolicy
	if goals == nil && c.opts.Rollouts {
		goals = service.Progressive
	}
	var msrc evaluation.MetricSource
	if c.opts.MetricsSource.URL != "" {
		mo := c.opts.MetricsSource
		mo.Metrics = c.metrics
		src, err := metricsource.New(mo)
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
		msrc = src
	}
	svc, err := service.New(service.Options{
		Store:      st,
		Logger:     c.log,
		Metrics:    c.metrics,
		GoalPolicy: goals,

		DefaultRolloutPolicy: c.opts.DefaultRolloutPolicy,
		FleetAdmins:          c.opts.FleetAdmins,
		LocalUsers:           c.opts.LocalUsers,
		DomainDefaults:       c.opts.DomainDefaults,
		DevMode:              c.opts.DevMode,
		Alerts:               c.opts.Alerts.URL != "",
		ConsoleURL:           c.opts.ConsoleURL,
		MetricsSource:        msrc,
		Replica: service.Replica{Address: address, Store: ident.Store, EmbeddedEtcd: dir != "",
			EtcdEndpoints: c.opts.EtcdEndpoints, ElectionKey: electionKey},
	})
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	// A store restored from a backup (lehr control restore) is served
	// only once every namespace is committed again above the restore's
	// version floor, so hosts holding the lost store's newer versions
	// converge to the backup's content (docs/operations.md, "Backup and
	// restore").
	if n, err := svc.ResyncRestore(ctx); err != nil {
		return fmt.Errorf("control: finish the restore of the store: %w", err)
	} else if n > 0 {
		c.log.Info("control: finished the restore of the store: committed every namespace's latest version again above the restore's version floor, every zone's goal", "namespaces", n)
	}

	// Servers.
	authz := service.Authorizer{DevMode: c.opts.DevMode, Socket: c.opts.Socket}
	adm := service.NewAdmission(c.opts.Admission)
	utf8 := service.NewUTF8Guard()
	gopts := []grpc.ServerOption{
		// Requests whose text is not UTF-8 parse (empty), to be refused
		// naming the field by utf8.Unary and utf8.Stream, first below.
		grpc.ForceServerCodecV2(utf8.Codec()),
		grpc.MaxRecvMsgSize(c.opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(c.opts.MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// First, the call's start is noted (a defragmentation space does
		// not demand waits for quiet: activity.go). Then every response
		// gets the store's id (lehr-store-id), refusals too. Then a request whose text is not UTF-8 is refused
		// naming the field; then every request loses the unknown fields it
		// carries, so nothing stores bytes no check counted; then every
		// mutating call into the audit log, refused ones too; who may call
		// what, from the client certificate's Lehr identity (roles, then
		// the target domain's ACL); last, a publish's bytes held against
		// the memory for publishes in flight, its domain's share (only
		// what the caller may publish to).
		grpc.ChainUnaryInterceptor(calls.unary, storeid.ServerUnary(storeID), utf8.Unary, svc.DropUnknownInterceptor, svc.AuditInterceptor, authz.Unary, svc.ACLInterceptor, adm.Unary),
		// At most so many publishes received at once, refused before a
		// byte is read.
		grpc.InTapHandle(adm.TapHandle),
		grpc.StatsHandler(adm.StatsHandler()),
		grpc.ChainStreamInterceptor(calls.stream, storeid.ServerStream(storeID), utf8.Stream, svc.DropUnknownStreamInterceptor, authz.Stream),
	}
	// TCP connections get TLS (or plaintext); unix socket connections the
	// peer's credentials instead; the HTTP/JSON gateway's in-process
	// connections the identity their HTTP connection verified (its TLS
	// state, the same client certificate check).
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	}
	var tc credentials.TransportCredentials = peercred.Credentials{TransportCredentials: creds}
	var api *httpapi.Server
	if hlis != nil {
		// The operator console, on the same listener: its pages read and
		// act as their HTTP caller, through the same in-process gRPC
		// connections (httpapi.CallerClient); MayCall is the service's own
		// decision, so it offers an action only to callers control would
		// let act.
		con, err := console.New(console.Options{
			Client: httpapi.CallerClient(),
			MayCall: func(r *http.Request, method string, req proto.Message) error {
				return svc.MayCall(httpapi.PeerContext(r), authz, method, req)
			},
			Logger: c.log.With("component", "console"),
		})
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
		api = httpapi.New(hlis.Addr(), httpapi.Options{TLS: c.tls, MaxMessageBytes: c.opts.MaxMessageBytes, Logger: c.log, Console: con})
		tc = httpapi.Credentials{TransportCredentials: tc}
	}
	gopts = append(gopts, grpc.Creds(tc))
	gs := grpc.NewServer(gopts...)
	lehrpb.RegisterControlServer(gs, svc)
	hs := health.NewServer()
	setHealth(hs, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	// Server reflection (grpc.reflection.v1 and v1alpha): grpcurl and
	// other gRPC tools list the services and fetch their descriptors from
	// control itself (docs/operations.md, "Calling the API from any
	// tool"). It is an ordinary streaming call on the same listeners, TCP
	// and the unix socket: the same TLS or mTLS, and the same interceptors.
	// service.Authorizer treats it as any method that changes nothing:
	// users, local accounts and (where control accepts them) unidentified
	// callers may call it; hosts, distributors and certificates without a
	// Lehr identity may not.
	reflection.Register(gs)

	var hsrv *http.Server
	if mlis != nil {
		hsrv = metricshttp.Server(c.metrics, metricsHelp, map[string]http.Handler{"GET /healthz": healthz(hs)})
	}

	// Propagation is measured by the strategist's leader (one replica at
	// a time, so each update counts once); its series exist on every
	// replica, at 0 where nothing is measured.
	// It reads once a second (propagation.DefaultInterval), not at a
	// test's short RolloutInterval: the reports it reads come every few
	// seconds anyway.
	prop, err := propagation.NewRunner(propagation.Options{Store: st, Metrics: c.metrics,
		Logger: c.log.With("component", "propagation")})
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	// So is the history of policy experiments' counts.
	hist, err := previewhist.NewRunner(previewhist.Options{Store: st, Interval: c.opts.ExperimentSampleInterval,
		Metrics: c.metrics, Logger: c.log.With("component", "previewhist")})
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	// Both run while this replica leads, each in a goroutine of its own
	// that leading waits for: the strategist waits for leading to return
	// before campaigning again.
	leading := func(ctx context.Context, g store.Guard) {
		var wg sync.WaitGroup
		wg.Go(func() { prop.Lead(ctx, g) })
		wg.Go(func() { hist.Lead(ctx, g) })
		wg.Wait()
	}
	var strat *strategist.Strategist
	if c.opts.Rollouts {
		var src *alerts.Source
		if c.opts.Alerts.URL != "" {
			ao := c.opts.Alerts
			ao.Metrics, ao.Now = c.metrics, nil
			if ao.Interval <= 0 {
				ao.Interval = alerts.DefaultInterval
			}
			ao.Interval = max(ao.Interval, c.opts.RolloutInterval) // once per round at most
			if src, err = alerts.New(ao); err != nil {
				return fmt.Errorf("control: %w", err)
			}
		}
		strat, err = strategist.New(strategist.Options{
			Store: st, Client: cli, ElectionKey: electionKey, ID: address,
			Interval: c.opts.RolloutInterval, Policy: svc.EffectiveRolloutPolicy,
			Metrics: c.metrics, Logger: c.log.With("component", "rollout"), Audit: svc.Audit,
			Ended: svc.RolloutEnded, Leading: leading, Alerts: src, MetricsSource: msrc,
		})
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
	}

	// Every part runs in one lifecycle.Group: the first that fails ends
	// control, and Run returns its error. The compactor and the space
	// monitor are not worth stopping control for: they log and end.
	g, gctx := lifecycle.New(ctx, "control")
	// A stop before Serve began (Close right after Ready) is a stop too.
	serve := func(l net.Listener) func(context.Context) error {
		return func(context.Context) error {
			if err := gs.Serve(l); !errors.Is(err, grpc.ErrServerStopped) {
				return err
			}
			return nil
		}
	}
	g.Go("serve gRPC", serve(lis))
	if ulis != nil {
		g.Go("serve gRPC on "+c.opts.Socket, serve(ulis))
	}
	if api != nil {
		g.Go("serve gRPC to HTTP/JSON", serve(api.GRPCListener()))
		g.Go("serve HTTP/JSON", func(context.Context) error { return api.Serve(hlis) })
	}
	if hsrv != nil {
		g.Go("serve metrics", func(context.Context) error {
			if err := hsrv.Serve(mlis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	if etcdErr != nil {
		g.Go("embedded etcd", func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return nil
			case e, ok := <-etcdErr:
				if !ok || e == nil {
					return errors.New("stopped")
				}
				return e
			}
		})
	}
	if c.opts.CompactInterval > 0 {
		g.Go("compactor", func(ctx context.Context) error {
			if err := st.RunCompactor(ctx, c.opts.CompactInterval); err != nil && ctx.Err() == nil {
				c.log.Error("control: compactor stopped", "err", err)
			}
			return nil
		})
	}
	g.Go("watch health", func(ctx context.Context) error { c.watchHealth(ctx, svc, hs); return nil })
	g.Go("space monitor", func(ctx context.Context) error {
		if err := st.RunSpaceMonitor(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("control: space monitor stopped", "err", err)
		}
		return nil
	})
	if strat != nil {
		g.Go("rollout strategist", strat.Run)
	}
	g.Go("replica registration", func(ctx context.Context) error {
		return st.RunReplica(ctx, &lehrpb.ControlReplica{Address: address, Version: c.opts.Version,
			StartTime: timestamppb.New(start), EmbeddedEtcd: dir != ""})
	})

	c.mu.Lock()
	c.addr = lis.Addr()
	if hlis != nil {
		c.httpAddr = hlis.Addr()
	}
	if mlis != nil {
		c.metricsAddr = mlis.Addr()
	}
	c.mu.Unlock()
	c.log.Info("control: serving", "addr", lis.Addr().String(), "socket", c.opts.Socket, "dev_mode", c.opts.DevMode, "tls", c.tls != nil,
		"mtls", c.tls != nil && c.tls.ClientAuth == tls.RequireAndVerifyClientCert, "http", c.opts.HTTPListen, "metrics", c.opts.MetricsListen, "etcd", endpoints,
		"replica", address, "store_id", storeID, "build", c.opts.Version)
	close(c.ready)

	<-gctx.Done()

	// Shutdown: end watches, stop taking calls, give in-flight ones
	// ShutdownTimeout to finish, then cut them. HTTP/JSON stops first:
	// its requests in flight are gRPC calls that finish with them.
	c.log.Info("control: shutting down")
	hs.Shutdown()
	svc.Close()
	stopped := make(chan struct{})
	go func() {
		if api != nil {
			api.Shutdown(context.WithoutCancel(ctx)) // returns early on api.Close
		}
		gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(c.opts.ShutdownTimeout)
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		c.log.Warn("control: graceful stop timed out; closing remaining calls", "timeout", c.opts.ShutdownTimeout)
		if api != nil {
			api.Close()
		}
		gs.Stop()
		<-stopped
	}
	if hsrv != nil {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ShutdownTimeout)
		if serr := hsrv.Shutdown(sctx); serr != nil {
			hsrv.Close()
		}
		scancel()
	}
	err = g.Wait()
	c.log.Info("control: stopped", "err", err)
	return err
}

// advertiseAddr is the address a replica listening on l advertises: opt
// if set, else l, with this host's name for an unspecified host.
func advertiseAddr(opt string, l net.Addr) string {
	if opt != "" {
		return opt
	}
	host, port, err := net.SplitHostPort(l.String())
	if err != nil {
		return l.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			return net.JoinHostPort(h, port)
		}
	}
	return l.String()
}

// registerSpaceMetrics exposes the store's space (store.Space) on set.
func registerSpaceMetrics(set *metrics.Set, st *store.Store) {
	gauge := func(name string, f func(store.SpaceStatus) int64) {
		set.NewGauge(name, func() float64 { return float64(f(st.Space())) })
	}
	gauge("lehr_control_store_bytes", func(s store.SpaceStatus) int64 { return s.DBSize })
	gauge("lehr_control_store_in_use_bytes", func(s store.SpaceStatus) int64 { return s.DBSizeInUse })
	gauge("lehr_control_store_quota_bytes", func(s store.SpaceStatus) int64 { return s.Quota })
	gauge("lehr_control_store_high_water_bytes", func(s store.SpaceStatus) int64 { return s.HighWater })
	gauge("lehr_control_store_revision", func(s store.SpaceStatus) int64 { return s.Revision })
	gauge("lehr_control_store_nospace_alarm", func(s store.SpaceStatus) int64 {
		if s.Alarm {
			return 1
		}
		return 0
	})
}

// healthz answers "ok" while the gRPC health service says control serves,
// 503 otherwise.
func healthz(hs *health.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{Service: lehrpb.Control_ServiceDesc.ServiceName})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not serving: etcd unreachable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// watchHealth sets the gRPC health status from etcd reachability until ctx
// is done.
func (c *Control) watchHealth(ctx context.Context, svc *service.Service, hs *health.Server) {
	serving := false
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, healthInterval)
		err := svc.Ready(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && !serving:
			serving = true
			setHealth(hs, healthpb.HealthCheckResponse_SERVING)
			c.log.Info("control: etcd reachable; serving")
		case err != nil && serving:
			serving = false
			setHealth(hs, healthpb.HealthCheckResponse_NOT_SERVING)
			c.log.Warn("control: etcd unreachable; not serving", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func setHealth(hs *health.Server, st healthpb.HealthCheckResponse_ServingStatus) {
	hs.SetServingStatus("", st)
	hs.SetServingStatus(lehrpb.Control_ServiceDesc.ServiceName, st)
}

// signer loads (or creates) the signing key and writes its public key
// beside it; nil with SigningKey "off".
func (c *Control) signer() (*signing.Signer, error) {
	path := c.opts.SigningKey
	switch path {
	case "off":
		c.log.Warn("control: signing is off: agents that trust keys will refuse every version")
		return nil, nil
	case "":
		path = filepath.Join(c.opts.DataDir, "signing.key")
	}
	s, created, err := signing.LoadOrCreate(path)
	if err != nil {
		return nil, err
	}
	pub, err := signing.EncodePublic(s.Public())
	if err != nil {
		return nil, err
	}
	pubPath := strings.TrimSuffix(path, ".key") + ".pub"
	if err := os.WriteFile(pubPath, pub, 0o644); err != nil {
		return nil, fmt.Errorf("write the signing public key: %w", err)
	}
	c.mu.Lock()
	c.signingPub = s.Public()
	c.mu.Unlock()
	c.log.Info("control: signing versions", "key", s.KeyID(), "created", created, "public_key", pubPath)
	return s, nil
}

// SigningPublicKey returns the public key of the key control signs with,
// nil before Run has loaded it or with signing off.
func (c *Control) SigningPublicKey() ed25519.PublicKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signingPub
}

// listenSocket listens on the unix socket at path, replacing a stale
// socket file (never another kind of file), mode 0666: who may connect is
// decided by the directory, and who connected by the kernel's peer
// credentials.
func listenSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: a file that is not a socket is in the way; remove it or choose another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket %s: remove the stale socket: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w (a socket path is at most 107 bytes)", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// DefaultEtcdProbeTimeout is the default Options.EtcdProbeTimeout.
const DefaultEtcdProbeTimeout = 10 * time.Second

// CheckEtcdEndpoints checks external etcd client URLs: http:// or
// https://, with a host and port, all of one scheme; https:// needs TLS
// (withTLS), and http:// is accepted only on loopback, since a remote etcd
// holds every tenant's configuration and is reached only over mutual TLS.
func CheckEtcdEndpoints(endpoints []string, withTLS bool) error {
	scheme := ""
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || u.Port() == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("etcd endpoint %q: want http(s)://HOST:PORT, e.g. https://etcd-0:2379", e)
		}
		if scheme != "" && u.Scheme != scheme {
			return fmt.Errorf("etcd endpoints %v mix http and https: use one", endpoints)
		}
		scheme = u.Scheme
		switch {
		case u.Scheme == "https" && !withTLS:
			return fmt.Errorf("etcd endpoint %s is https: give etcd's CA and this replica's client certificate (lehr control --etcd-ca, --etcd-cert, --etcd-key)", e)
		case u.Scheme == "http" && withTLS:
			return fmt.Errorf("etcd endpoint %s is plaintext http, but TLS files were given: use https://%s", e, u.Host)
		case u.Scheme == "http" && !tlsconfig.IsLoopback(u.Host):
			return fmt.Errorf("etcd endpoint %s is plaintext and not on loopback: control reaches a remote etcd only over mutual TLS "+
				"(https:// endpoints with --etcd-ca, --etcd-cert and --etcd-key); etcd's own docs say how to give its members client-cert-auth", e)
		}
	}
	return nil
}

// probeEtcd makes control's first request to an external etcd within
// timeout, and when it fails says why: which TLS side refused the other
// (tlsconfig.Diagnose), or that no member answered.
func probeEtcd(ctx context.Context, cli *clientv3.Client, endpoints []string, tlsCfg *tls.Config, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := cli.MemberList(pctx)
	if err == nil {
		return nil
	}
	if tlsCfg != nil {
		for _, e := range endpoints {
			u, _ := url.Parse(e)
			if derr := tlsconfig.Diagnose(ctx, u.Host, tlsCfg, "h2"); derr != nil {
				return fmt.Errorf("etcd at %s: %w (lehr control --etcd-ca, --etcd-cert, --etcd-key)", e, derr)
			}
		}
	}
	return fmt.Errorf("no etcd member at %s answered within %v (%w): check that they run and that this replica reaches them%s",
		strings.Join(endpoints, ", "), timeout, err, map[bool]string{true: "; TLS: check --etcd-ca, --etcd-cert, --etcd-key"}[tlsCfg != nil])
}
