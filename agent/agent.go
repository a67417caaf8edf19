// Package agent is Lehr's per-host agent: it keeps the namespaces local
// consumers hold leases on current, from the zone's distributors to a
// Badger cache to one file per namespace, and serves consumers on a unix
// socket.
//
// Life of an agent (Run):
//
//  1. Open the cache (DataDir/cache) and list what it holds.
//  2. Serve the local API (package localapi) — Ready is closed here, before
//     any distributor has been contacted: consumers are served from disk.
//  3. Verify every cached namespace once; a corrupt one is dropped so the
//     distributor sends a fresh snapshot. Bring the files
//     (DataDir/files/<domain>/<name>.lehr, package internal/nsfile) of the
//     previous run up to date from the cache and hold their namespaces for
//     one grace period, so consumers that come back after the restart see
//     no gap.
//  4. Connect upstream (package upstream), announcing every cached
//     namespace's version and checksum so the distributor sends only what
//     is missing, and subscribing to the namespaces with live leases.
//
// Every update is applied to the cache in one transaction whose result is
// verified against the update's checksum, and only then written to the
// namespace's file (temp file, fsync, rename): a file only ever holds
// verified content. A cached copy found corrupt is dropped and fetched
// again; it never reaches a consumer.
//
// Imported by agent/agentcmd (the lehr-agent and "lehr agent" commands),
// testenv/devcluster, bench and cmd/lehr-bench. It must not import control,
// distributor or etcd (see cmd/lehr-agent's lean-binary test).
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/agent/cache"
	"lehr.dev/lehr/agent/leases"
	"lehr.dev/lehr/agent/localapi"
	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/keylock"
	"lehr.dev/lehr/internal/lifecycle"
	"lehr.dev/lehr/internal/metricshttp"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/wire"
)

// Defaults for zero Options fields.
const (
	DefaultLeaseTTL         = leases.DefaultTTL   // 30 s
	DefaultUnsubscribeGrace = leases.DefaultGrace // 5 min
	DefaultBackoffMin       = upstream.DefaultBackoffMin
	DefaultBackoffMax       = upstream.DefaultBackoffMax
	// DefaultShutdownTimeout bounds a graceful stop of the local API.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultCacheRetention is how long an unwanted namespace stays cached.
	DefaultCacheRetention = 24 * time.Hour
	// MinSilenceTimeout and MaxSilenceTimeout bound Options.SilenceTimeout.
	MinSilenceTimeout = 500 * time.Millisecond
	MaxSilenceTimeout = time.Minute
)

// Options configure an Agent.
type Options struct {
	// HostID identifies the host to distributors; "" means the hostname.
	// Under mutual TLS it must match the host certificate's name.
	HostID string
	// Zone is the agent's zone. Required.
	Zone string
	// Labels describe the host (e.g. "role": "canary"); nil means none.
	Labels map[string]string
	// Distributors are the UDP addresses of the zone's distributors, in
	// order of preference. Required.
	Distributors []string
	// TLS is the client configuration: the host certificate (the host's
	// identity) and the CA that signs distributors. Required.
	TLS *tls.Config
	// DataDir holds the cache (DataDir/cache) and the namespace files
	// (DataDir/files). Required; created if missing. The agent makes it
	// mode 0710 (its group may pass through to the files, not list the
	// cache) and the files directory 0750, the files 0640.
	DataDir string
	// Socket is the local API's unix socket; "" means DataDir/agent.sock.
	// A stale socket file is removed on start; the socket is mode 0660.
	Socket string
	// ConsumerGid, when not 0, is the group of the consumers: the data
	// directory, the files directory, the namespace files and the socket
	// are given to it, so its members read the files and use the socket
	// and nobody else can. 0 keeps the agent's own group (with systemd,
	// the unit's Group=).
	ConsumerGid int
	// TrustedKeys, if set, are the public keys of control's signing keys:
	// every update must carry a signature one of them made over its
	// namespace, version, checksum, author and time, or it is refused and
	// the distributor that sent it dropped (upstream.Options.Verifier).
	// Nil accepts unsigned versions.
	TrustedKeys *signing.Verifier
	// MetricsListen is a TCP address serving /metrics; "" means none.
	MetricsListen string
	// LeaseTTL is the lease TTL granted when a consumer asks for 0; zero
	// means DefaultLeaseTTL (30 s).
	LeaseTTL time.Duration
	// UnsubscribeGrace is how long the upstream subscription and the file
	// of a namespace are kept after its last lease ends; zero means
	// DefaultUnsubscribeGrace (5 min), negative means none.
	UnsubscribeGrace time.Duration
	// CacheRetention is how long the cache keeps a namespace no lease
	// wants (after its grace period ended, or since the agent started for
	// what it found cached) before evicting it; zero means
	// DefaultCacheRetention (24 h), negative means never.
	CacheRetention time.Duration
	// BackoffMin and BackoffMax bound the randomised wait between
	// connection attempts; zero means 100 ms and 10 s.
	BackoffMin, BackoffMax time.Duration
	// SilenceTimeout is how long the agent hears nothing from its
	// distributor before it fails over to another; keepalives go every
	// third of it. Zero means wire.DefaultSilenceTimeout (3 s); allowed
	// MinSilenceTimeout to MaxSilenceTimeout. Shorter fails over sooner
	// from a crashed host or a partition, at the price of more keepalive
	// packets and of failovers on links that lose several packets in a
	// row (a failover itself is cheap: the agent announces its cache and
	// receives nothing it holds).
	SilenceTimeout time.Duration
	// SignalsInterval is the length of the intervals of the signals the
	// agent keeps for canary analysis (a whole number of seconds, aligned
	// on the Unix epoch so every host's intervals line up), and how often
	// it scrapes consumers' metrics endpoints. Zero means 10 s.
	SignalsInterval time.Duration
	// Now returns the current time, for leases; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// NoSync skips the fsync of the cache and of every file before an
	// update is acknowledged: what was applied survives a process restart
	// but not a machine crash. The zero value is durable; tests only.
	NoSync bool
	// Metrics receives the agent's metrics (lehr_agent_*); nil means a
	// private set, served on MetricsListen if set.
	Metrics *metrics.Set
}

// Agent is the per-host agent. Create it with New and start it with Run.
type Agent struct {
	opts     Options
	log      *slog.Logger
	filesDir string
	met      *agentMetrics

	leases *leases.Table
	cache  *cache.Cache // set by Run before anything uses it
	// cacheRef is cache for readers outside Run's goroutines (metrics).
	cacheRef atomic.Pointer[cache.Cache]
	// quarantined is when openCache last moved a damaged cache aside
	// (Unix nanoseconds; 0: never since the agent started), reported to
	// the distributor (Report.cache_quarantine_time).
	quarantined atomic.Int64
	up          *upstream.Client
	api         *localapi.Server
	writer      nsfile.Writer
	sig         *signals

	ready     chan struct{}
	readyOnce sync.Once

	nsMu  sync.Mutex
	locks keylock.Map         // per-namespace apply/read lock (see lock)
	state map[string]*nsState // what is held, by namespace

	runMu       sync.Mutex
	running     bool
	metricsAddr net.Addr // set once the metrics listener is up
	cancel      context.CancelCauseFunc
	done        chan struct{}
}

// New validates opts and returns an agent; it opens nothing (see Run).
func New(opts Options) (*Agent, error) {
	if opts.Zone == "" {
		return nil, errors.New("agent: Options.Zone is required")
	}
	if err := names.Zone(opts.Zone); err != nil {
		return nil, fmt.Errorf("agent: Options.Zone: %w", err)
	}
	if len(opts.Distributors) == 0 {
		return nil, errors.New("agent: Options.Distributors is empty: name at least one distributor address (host:port)")
	}
	for i, d := range opts.Distributors {
		if _, _, err := net.SplitHostPort(d); err != nil {
			return nil, fmt.Errorf("agent: Options.Distributors[%d] %q: want host:port: %w", i, d, err)
		}
	}
	if opts.TLS == nil {
		return nil, errors.New("agent: Options.TLS is required: the host certificate and the CA of the distributors")
	}
	if opts.DataDir == "" {
		return nil, errors.New("agent: Options.DataDir is required")
	}
	if opts.HostID == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("agent: Options.HostID is empty and the hostname is unknown: %w", err)
		}
		opts.HostID = h
	}
	if opts.Socket == "" {
		opts.Socket = filepath.Join(opts.DataDir, "agent.sock")
	}
	if iv := opts.SignalsInterval; iv != 0 && (iv < time.Second || iv%time.Second != 0 || iv > time.Hour) {
		return nil, fmt.Errorf("agent: Options.SignalsInterval is %v: want whole seconds from 1s to 1h (0 means 10s)", iv)
	}
	if opts.ConsumerGid < 0 {
		return nil, fmt.Errorf("agent: Options.ConsumerGid is %d: want a group id (0 keeps the agent's own group)", opts.ConsumerGid)
	}
	if opts.LeaseTTL < 0 {
		return nil, fmt.Errorf("agent: Options.LeaseTTL is %v: want >= 0 (0 means %v)", opts.LeaseTTL, DefaultLeaseTTL)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	if err := metricshttp.RegisterCertificateExpiry(opts.Metrics, "client", opts.TLS); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if opts.CacheRetention == 0 {
		opts.CacheRetention = DefaultCacheRetention
	}
	if opts.SilenceTimeout == 0 {
		opts.SilenceTimeout = wire.DefaultSilenceTimeout
	}
	if opts.SilenceTimeout < MinSilenceTimeout || opts.SilenceTimeout > MaxSilenceTimeout {
		return nil, fmt.Errorf("agent: Options.SilenceTimeout is %v: want %v to %v (0 means %v)", opts.SilenceTimeout, MinSilenceTimeout, MaxSilenceTimeout, wire.DefaultSilenceTimeout)
	}
	qc := wire.ClientQUICConfig()
	wire.SetSilenceTimeout(qc, opts.SilenceTimeout)
	a := &Agent{
		opts:     opts,
		log:      opts.Logger,
		filesDir: filepath.Join(opts.DataDir, "files"),
		ready:    make(chan struct{}),
		state:    map[string]*nsState{},
		done:     make(chan struct{}),
	}
	a.writer = nsfile.Writer{NoSync: opts.NoSync, Gid: opts.ConsumerGid}
	a.sig = newSignals(opts.SignalsInterval, a.now)
	a.leases = leases.New(leases.Options{Now: opts.Now, DefaultTTL: opts.LeaseTTL, Grace: opts.UnsubscribeGrace})
	a.met = newAgentMetrics(opts.Metrics, a)
	up, err := upstream.New(upstream.Options{
		Distributors:   opts.Distributors,
		TLS:            opts.TLS,
		HostID:         opts.HostID,
		Zone:           opts.Zone,
		Labels:         opts.Labels,
		AgentVersion:   buildinfo.Get().String(),
		Handler:        (*handler)(a),
		Verifier:       opts.TrustedKeys,
		BackoffMin:     opts.BackoffMin,
		BackoffMax:     opts.BackoffMax,
		QUIC:           qc,
		SilenceTimeout: opts.SilenceTimeout,
		Metrics:        opts.Metrics,
		Logger:         opts.Logger.With("component", "upstream"),
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.up = up
	api, err := localapi.New(localapi.Options{Socket: opts.Socket, Backend: (*backend)(a), Logger: opts.Logger.With("component", "localapi"),
		ShutdownTimeout: DefaultShutdownTimeout, Gid: opts.ConsumerGid})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.api = api
	return a, nil
}

// Ready is closed once the local API serves, which happens before any
// distributor is contacted.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Socket returns the local API's socket path.
func (a *Agent) Socket() string { return a.opts.Socket }

// FilesDir returns the directory of namespace files.
func (a *Agent) FilesDir() string { return a.filesDir }

// Metrics returns the agent's metric set.
func (a *Agent) Metrics() *metrics.Set { return a.opts.Metrics }

// MetricsAddr is the address serving /metrics; nil when MetricsListen is
// empty and until the listener is up (shortly after Ready).
func (a *Agent) MetricsAddr() net.Addr {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	return a.metricsAddr
}

// Run starts the agent and blocks until ctx ends or Close is called, then
// shuts down gracefully: the local API stops (in-flight calls get
// DefaultShutdownTimeout), the upstream connection closes, the cache is
// closed. It returns an error if starting fails or a part of the agent
// fails while it runs. Run may be called once.
func (a *Agent) Run(ctx context.Context) (err error) {
	a.runMu.Lock()
	if a.running {
		a.runMu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	ctx, a.cancel = context.WithCancelCause(ctx)
	a.runMu.Unlock()
	defer close(a.done)
	defer a.cancel(nil)

	if err := a.makeDirs(); err != nil {
		return err
	}
	c, err := a.openCache()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.cache = c
	a.cacheRef.Store(c)
	defer func() {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("agent: close cache: %w", cerr)
		}
	}()
	if err := a.loadState(); err != nil {
		return err
	}
	if err := a.api.Start(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer a.api.Close()
	a.readyOnce.Do(func() { close(a.ready) })
	a.log.Info("agent ready: serving from cache", "socket", a.opts.Socket, "host", a.opts.HostID,
		"zone", a.opts.Zone, "cached", len(a.heldList()), "build", buildinfo.Get().String())

	// Before the first Hello: verify the cache (so Hello never announces a
	// corrupt copy) and restore the previous run's files.
	a.scrub()
	a.restoreFiles()

	// Every part runs in one lifecycle.Group: the first that fails ends
	// the agent, and Run returns its error.
	g, gctx := lifecycle.New(ctx, "agent")
	var msrv *http.Server
	if a.opts.MetricsListen != "" {
		if msrv, err = a.serveMetrics(g); err != nil {
			return err // no part started yet
		}
	}
	g.Go("upstream", a.up.Run)
	g.Go("maintain", func(ctx context.Context) error { a.maintain(ctx); return nil })
	g.Go("scrape", func(ctx context.Context) error { a.scrapeLoop(ctx); return nil })
	<-gctx.Done()
	a.log.Info("agent stopping")
	a.cancel(nil)
	if msrv != nil {
		msrv.Close()
	}
	return g.Wait()
}

// makeDirs creates the data directory (0710: the consumers' group passes
// through, lists nothing) and the files directory (0750), with the
// consumers' group when one is set.
func (a *Agent) makeDirs() error {
	dir := a.opts.DataDir
	if err := os.MkdirAll(dir, 0o710); err != nil {
		return fmt.Errorf("agent: create data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o710); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	if gid := a.opts.ConsumerGid; gid != 0 {
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("agent: give data dir %s to group %d: %w", dir, gid, err)
		}
	}
	if err := a.writer.MkdirAll(a.filesDir); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// openCache opens the cache; one Badger cannot open is moved aside and an
// empty one started, since everything in it can be fetched again and the
// files of the previous run (verified by their readers) keep serving
// meanwhile.
func (a *Agent) openCache() (*cache.Cache, error) {
	dir := filepath.Join(a.opts.DataDir, "cache")
	opts := cache.Options{Dir: dir, Logger: a.log.With("component", "cache"), NoSync: a.opts.NoSync}
	c, err := cache.Open(opts)
	if !errors.Is(err, cache.ErrDamaged) {
		return c, err
	}
	moved, qerr := cache.Quarantine(dir, a.now())
	if qerr != nil {
		return nil, fmt.Errorf("%w (and it cannot be moved aside: %w)", err, qerr)
	}
	a.met.quarantines.Inc()
	a.quarantined.Store(a.now().UnixNano())
	a.log.Error("the cache is damaged and cannot be opened; moved it aside and starting with an empty one: "+
		"every namespace is fetched again, and the files of the previous run serve consumers meanwhile",
		"moved_to", moved, "err", err)
	return cache.Open(opts)
}

// Close stops a running agent and waits for Run to return. It is
// idempotent and safe to call before or without Run.
func (a *Agent) Close() error {
	a.runMu.Lock()
	running := a.running
	cancel := a.cancel
	if !running {
		a.running = true // Run after Close must not start
		a.runMu.Unlock()
		return nil
	}
	a.runMu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
	<-a.done
	return nil
}

// serveMetrics serves the metrics endpoint as a part of g until the
// returned server is closed.
func (a *Agent) serveMetrics(g *lifecycle.Group) (*http.Server, error) {
	lis, err := net.Listen("tcp", a.opts.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("agent: listen for metrics on %s: %w", a.opts.MetricsListen, err)
	}
	srv := metricshttp.Server(a.opts.Metrics, metricsHelp, nil)
	g.Go("serve metrics", func(context.Context) error {
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	a.runMu.Lock()
	a.metricsAddr = lis.Addr()
	a.runMu.Unlock()
	a.log.Info("serving metrics", "addr", lis.Addr().String())
	return srv, nil
}

// maintain expires leases, retries files that could not be written,
// checks files are as written (every fileCheckInterval) and evicts what no
// consumer wants any more.
func (a *Agent) maintain(ctx context.Context) {
	tick := time.NewTicker(a.tickInterval())
	defer tick.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		trs, lapsed := a.leases.Expire()
		a.transition(trs)
		for _, ns := range lapsed {
			a.log.Warn("a consumer's lease lapsed without being released (crashed or hung?)", "namespace", ns)
			a.update(ns, func(st *nsState) { st.leasesExpired++ })
			a.sig.store.Add(ns, canary.MetricLeaseLosses, 1)
		}
		a.retryFiles()
		if time.Since(lastCheck) >= fileCheckInterval {
			a.checkFiles()
			lastCheck = time.Now()
		}
		a.evictUnwanted()
	}
}

// now is the agent's clock.
func (a *Agent) now() time.Time {
	if a.opts.Now != nil {
		return a.opts.Now()
	}
	return time.Now()
}

// tickInterval is how often leases are checked: a tenth of the shortest
// lease timing, between 10 ms and 1 s.
func (a *Agent) tickInterval() time.Duration {
	d := min(a.leases.GrantTTL(0), time.Second*10)
	if g := a.leases.Grace(); g > 0 {
		d = min(d, g)
	}
	return min(max(d/10, 10*time.Millisecond), time.Second)
}
