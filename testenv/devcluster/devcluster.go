// Package devcluster starts a whole Lehr system in one process, on
// loopback: the control plane on an embedded etcd, a development CA and
// certificates, the distributors of every zone and the agents of every
// zone, all real daemons with their real transports (gRPC, QUIC with mutual
// TLS, Badger on disk, namespace files, unix sockets). It is what "lehr dev"
// (make run) runs, and what end-to-end tests and the benchmark harness
// start.
//
// What Start starts, in this order (Close stops it in reverse):
//
//  1. A development CA in Dir/pki/ca (created once, reused by later runs on
//     the same Dir), and from it a server certificate per distributor (CN =
//     distributor id, SANs 127.0.0.1, ::1, localhost) and a client (host)
//     certificate per agent (CN = host id), in Dir/pki.
//  2. control (package control) with its embedded single-member etcd in
//     Dir/control, serving plaintext gRPC on ControlListen (loopback only),
//     and a producer client (client/producer) connected to it. Every zone of
//     Options.Zones and every domain of Options.Domains is created (an
//     existing one is kept).
//  3. For every zone, DistributorsPerZone distributors (package
//     distributor), ids "<zone>-dist-<i>", serving QUIC on 127.0.0.1 with
//     mutual TLS: agents must present a host certificate of the dev CA.
//  4. For every zone, AgentsPerZone agents (package agent), host ids
//     "<zone>-host-<i>", data dir Dir/agents/<host id>, each dialing all
//     the distributors of its zone (agent i prefers distributor i mod D, so
//     agents spread over distributors) and serving its local API on a unix
//     socket: Dir/agents/<host id>/agent.sock when that path is short
//     enough for a unix socket (108 bytes), otherwise <host id>.sock in a
//     short directory made with os.MkdirTemp("", "lehr") and removed by
//     Close.
//
// Every daemon runs in a goroutine the Cluster owns; Close waits for all of
// them. Daemons can be stopped and restarted one by one (to test failover,
// restarts and static stability): a restart reuses the daemon's data
// directory, socket and listen address, so agents reconnect to a restarted
// distributor, distributors to a restarted control, and an agent's cache
// survives its restart.
//
// Imported by testenv/devtour ("lehr dev"), bench and tests (end to end).
// Daemons must not import it.
package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultZones returns the zones started when Options.Zones is empty:
// dev-a and dev-b.
func DefaultZones() []string { return []string{"dev-a", "dev-b"} }

// Defaults of Options.
const (
	// DefaultControlListen is control's gRPC address when
	// Options.ControlListen is empty: a free loopback port.
	DefaultControlListen = "127.0.0.1:0"
	// DefaultReportInterval is how often distributors report convergence
	// when Options.ReportInterval is zero.
	DefaultReportInterval = time.Second
	// DefaultStartTimeout bounds the start of each daemon when
	// Options.StartTimeout is zero.
	DefaultStartTimeout = 60 * time.Second
	// certValidity is the validity of the dev CA and every certificate.
	certValidity = 365 * 24 * time.Hour
	// maxSocketPath is the longest unix socket path used in place; the
	// kernel limit is 108 bytes including the terminating NUL.
	maxSocketPath = 100
	// reconnectBackoff caps gRPC's reconnect backoff of the clients the
	// cluster makes, so they find a restarted daemon quickly.
	reconnectBackoff = 500 * time.Millisecond
)

// Options configures a Cluster. The zero value starts zones dev-a and
// dev-b, each with one distributor and one agent, in a temporary directory
// removed by Close.
type Options struct {
	// Dir holds everything: Dir/pki, Dir/control, Dir/agents. Default: a
	// new temporary directory, removed by Close. A Dir from an earlier run
	// is reused as it is (same CA, etcd data and agent caches).
	Dir string
	// Zones to start; default DefaultZones(). Each must be a valid zone name
	// (internal/names) and appear once.
	Zones []string
	// DistributorsPerZone is the number of distributors of each zone;
	// 0 means 1.
	DistributorsPerZone int
	// AgentsPerZone is the number of agents of each zone; 0 means 1, a
	// negative value starts none (e.g. a benchmark that dials simulated
	// agents itself; see HostTLS).
	AgentsPerZone int
	// Domains are created in control at start (existing ones are kept);
	// default none.
	Domains []string
	// StoreQuota is control's store quota (control.Options.StoreQuota);
	// 0: its default.
	StoreQuota int64
	// DomainQuotas are the quotas Domains are created with; nil: the
	// server's defaults. The cluster's caller is a fleet admin (dev
	// mode), so they may be above the defaults (benchmarks flood).
	DomainQuotas *lehrpb.Quotas
	// Logger receives every daemon's logs, each with a "component"
	// attribute; default slog.Default().
	Logger *slog.Logger
	// ControlListen is control's gRPC address; default
	// DefaultControlListen (a free loopback port, see ControlAddr). It
	// must be a loopback address: control serves plaintext.
	ControlListen string
	// ControlMetricsListen is the address of control's /metrics and
	// /healthz; "" (the default) serves none.
	ControlMetricsListen string
	// ControlHTTPListen is the address of control's HTTP/JSON API
	// (control.Options.HTTPListen); "" (the default) serves none.
	ControlHTTPListen string
	// DistributorMetrics, if true, makes every distributor serve /metrics
	// on a free loopback port (see DistributorHandle.MetricsAddr).
	DistributorMetrics bool
	// AgentMetrics, if true, makes every agent serve /metrics on a free
	// loopback port (see AgentHandle.MetricsAddr).
	AgentMetrics bool
	// NoSync makes etcd and the agents skip fsync: data survives a process
	// restart but not a machine crash, which is what throwaway development
	// clusters and tests want. The zero value is durable, as in
	// production.
	NoSync bool
	// ReportInterval is how often distributors report convergence to
	// control and ask agents for reports; default DefaultReportInterval.
	ReportInterval time.Duration
	// LeaseTTL and UnsubscribeGrace are passed to every agent; zero means
	// the agent's defaults (30 s and 5 min).
	LeaseTTL, UnsubscribeGrace time.Duration
	// AgentBackoffMin and AgentBackoffMax bound the wait between an
	// agent's connection attempts; zero means 20 ms and 500 ms, so that
	// failover is quick on loopback.
	AgentBackoffMin, AgentBackoffMax time.Duration
	// SignalsInterval is the agents' signals interval (canary analysis);
	// default 1 s, so analyses of bakes of seconds have data.
	SignalsInterval time.Duration
	// StartTimeout bounds the start of each daemon; default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Rollouts runs control's rollout strategist (control.Options.Rollouts)
	// every RolloutInterval (zero: the strategist's default).
	Rollouts        bool
	RolloutInterval time.Duration
	// ExperimentSampleInterval is how often control's strategist leader
	// samples policy experiments' counts into their histories
	// (control.Options.ExperimentSampleInterval; zero: a minute).
	ExperimentSampleInterval time.Duration
	// AlertsURL is control's alerts source (control.Options.Alerts.URL,
	// lehr control --alerts-url), read at most once per AlertsInterval
	// (zero: its default); "" (the default): none.
	AlertsURL      string
	AlertsInterval time.Duration
	// MetricsURL is control's metrics source, which canary checks
	// written as queries read (control.Options.MetricsSource.URL, lehr
	// control --metrics-url); "" (the default): none. MetricsStep is its
	// step (zero: metricsource.DefaultStep).
	MetricsURL  string
	MetricsStep time.Duration
}

// Cluster is a running system. Create it with Start, stop it with Close.
// Its methods are safe for concurrent use.
type Cluster struct {
	opts    Options
	log     *slog.Logger
	dir     string
	ownDir  bool   // dir was made by Start and is removed by Close
	sockDir string // short directory for sockets, removed by Close; "" if unused

	pkiDir string
	ca     *pki.CA
	caFile string
	// trusted holds control's signing key, which every agent checks each
	// version against.
	trusted *signing.Verifier

	ctl   *controlDaemon
	prod  *producer.Client
	zones []string
	dists map[string][]*DistributorHandle
	ags   map[string][]*AgentHandle

	mu        sync.Mutex
	consumers []*consumer.Client
	closed    bool

	closeOnce sync.Once
	closeErr  error
}

// Start starts a cluster as described in the package comment and returns
// once every daemon serves: control answers, distributors listen and
// agents serve their local API (agents may still be connecting to their
// distributors). ctx bounds the start only; the cluster runs until Close.
// If anything fails to start, what was started is stopped again and the
// error says what failed.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	c := &Cluster{
		opts:  opts,
		log:   opts.Logger,
		zones: slices.Clone(opts.Zones),
		dists: map[string][]*DistributorHandle{},
		ags:   map[string][]*AgentHandle{},
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "lehr-dev")
		if err != nil {
			return nil, fmt.Errorf("devcluster: make a temporary directory: %w", err)
		}
		c.dir, c.ownDir = d, true
	} else {
		d, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("devcluster: Options.Dir %q: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("devcluster: create Options.Dir: %w", err)
		}
		c.dir = d
	}

	// 1. Certificates.
	c.pkiDir = filepath.Join(c.dir, "pki")
	c.ca, err = pki.NewCA(filepath.Join(c.pkiDir, "ca"), "lehr-dev-ca", certValidity)
	if err != nil {
		return nil, fmt.Errorf("devcluster: dev CA: %w", err)
	}
	c.caFile = filepath.Join(c.pkiDir, "ca", pki.CACertFile)

	// 2. Control and the producer client. Control's signing key is made
	// first, so every agent trusts it from its start (control loads the
	// same file).
	signer, _, err := signing.LoadOrCreate(filepath.Join(c.dir, "control", "signing.key"))
	if err != nil {
		return nil, fmt.Errorf("devcluster: signing key: %w", err)
	}
	c.trusted = signing.NewVerifier(signer.Public())
	c.ctl = &controlDaemon{
		c: c,
		opts: control.Options{
			DataDir:         filepath.Join(c.dir, "control"),
			Listen:          opts.ControlListen,
			MetricsListen:   opts.ControlMetricsListen,
			HTTPListen:      opts.ControlHTTPListen,
			ConsoleURL:      consoleURL(opts.ControlHTTPListen),
			Logger:          c.log.With("component", "control"),
			NoSync:          opts.NoSync,
			ShutdownTimeout: 5 * time.Second,
			// A development cluster: plaintext loopback callers (the
			// producer client, lehr commands, distributors) may change
			// things under the author they assert.
			DevMode: true,
			// Bakes of seconds, so a local rollout is watchable.
			DefaultRolloutPolicy: rollout.Fast(),
			Rollouts:             opts.Rollouts,
			RolloutInterval:      opts.RolloutInterval,
			StoreQuota:           opts.StoreQuota,

			ExperimentSampleInterval: opts.ExperimentSampleInterval,
			Alerts:                   alerts.Options{URL: opts.AlertsURL, Interval: opts.AlertsInterval},
			MetricsSource:            metricsource.Options{URL: opts.MetricsURL, Step: opts.MetricsStep},
		},
	}
	if c.ctl.opts.MetricsListen == "" {
		c.ctl.opts.MetricsListen = "off"
	}
	if err := c.ctl.start(ctx); err != nil {
		return nil, err
	}
	c.prod, err = producer.New(producer.Options{
		Address:     c.ControlAddr(),
		Author:      "devcluster",
		Logger:      c.log.With("component", "producer"),
		DialOptions: []grpc.DialOption{fastReconnect()},
	})
	if err != nil {
		return nil, fmt.Errorf("devcluster: producer client: %w", err)
	}
	for _, z := range c.zones {
		if _, err := c.prod.CreateZone(ctx, z); err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
			return nil, fmt.Errorf("devcluster: create zone %s: %w", z, err)
		}
	}
	for _, d := range opts.Domains {
		if _, err := c.prod.CreateDomain(ctx, &lehrpb.Domain{Name: d, Quotas: opts.DomainQuotas}); err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
			return nil, fmt.Errorf("devcluster: create domain %s: %w", d, err)
		}
	}

	// 3. Distributors.
	for _, z := range c.zones {
		for i := range opts.DistributorsPerZone {
			h, err := c.newDistributor(z, i)
			if err != nil {
				return nil, err
			}
			c.dists[z] = append(c.dists[z], h)
			if err := h.start(ctx); err != nil {
				return nil, err
			}
		}
	}

	// 4. Agents.
	for _, z := range c.zones {
		for i := range max(opts.AgentsPerZone, 0) {
			h, err := c.newAgent(z, i)
			if err != nil {
				return nil, err
			}
			c.ags[z] = append(c.ags[z], h)
			if err := h.start(ctx); err != nil {
				return nil, err
			}
		}
	}
	c.log.Info("devcluster: started", "dir", c.dir, "control", c.ControlAddr(), "zones", c.zones,
		"distributors_per_zone", opts.DistributorsPerZone, "agents_per_zone", max(opts.AgentsPerZone, 0))
	return c, nil
}

func (o *Options) normalize() error {
	if len(o.Zones) == 0 {
		o.Zones = DefaultZones()
	}
	seen := map[string]bool{}
	for i, z := range o.Zones {
		if err := names.Zone(z); err != nil {
			return fmt.Errorf("devcluster: Options.Zones[%d]: %w", i, err)
		}
		if seen[z] {
			return fmt.Errorf("devcluster: Options.Zones[%d]: zone %q appears twice", i, z)
		}
		seen[z] = true
	}
	for i, d := range o.Domains {
		if err := names.Domain(d); err != nil {
			return fmt.Errorf("devcluster: Options.Domains[%d]: %w", i, err)
		}
	}
	if o.DistributorsPerZone < 0 {
		return fmt.Errorf("devcluster: Options.DistributorsPerZone is %d: want >= 0 (0 means 1)", o.DistributorsPerZone)
	}
	if o.DistributorsPerZone == 0 {
		o.DistributorsPerZone = 1
	}
	if o.AgentsPerZone == 0 {
		o.AgentsPerZone = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ControlListen == "" {
		o.ControlListen = DefaultControlListen
	}
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultReportInterval
	}
	if o.LeaseTTL < 0 {
		return fmt.Errorf("devcluster: Options.LeaseTTL is %v: want >= 0", o.LeaseTTL)
	}
	if o.AgentBackoffMin <= 0 {
		o.AgentBackoffMin = 20 * time.Millisecond
	}
	if o.SignalsInterval <= 0 {
		o.SignalsInterval = time.Second
	}
	if o.AgentBackoffMax <= 0 {
		o.AgentBackoffMax = 500 * time.Millisecond
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	return nil
}

// fastReconnect caps gRPC's reconnect backoff so a client finds a restarted
// daemon within half a second.
func fastReconnect() grpc.DialOption {
	cfg := backoff.DefaultConfig
	cfg.BaseDelay = 50 * time.Millisecond
	cfg.MaxDelay = reconnectBackoff
	return grpc.WithConnectParams(grpc.ConnectParams{Backoff: cfg, MinConnectTimeout: 5 * time.Second})
}

// Dir is the cluster's root directory.
func (c *Cluster) Dir() string { return c.dir }

// CAFile is the dev CA certificate (PEM), which signs every certificate of
// the cluster.
func (c *Cluster) CAFile() string { return c.caFile }

// HostTLS issues a host certificate for hostID in zone from the dev CA
// (tlsconfig.Identity, role host) and returns the TLS configuration an
// agent of this cluster would use to dial its distributors. Benchmarks use
// it for simulated agents.
func (c *Cluster) HostTLS(zone, hostID string) (*tls.Config, error) {
	return c.leafTLS(hostID, pki.Client, tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: hostID}.URI())
}

// leafTLS issues name's certificate into Dir/pki and loads the TLS
// configuration of that side.
func (c *Cluster) leafTLS(name string, kind pki.Kind, id *url.URL) (*tls.Config, error) {
	cert, key, err := c.ca.IssueURIFiles(c.pkiDir, name, kind, nil, id, certValidity)
	if err != nil {
		return nil, fmt.Errorf("devcluster: certificate for %s: %w", name, err)
	}
	var cfg *tls.Config
	if kind == pki.Server {
		cfg, err = tlsconfig.Server(cert, key, c.caFile)
	} else {
		cfg, err = tlsconfig.Client(cert, key, c.caFile, "127.0.0.1")
	}
	if err != nil {
		return nil, fmt.Errorf("devcluster: TLS configuration for %s: %w", name, err)
	}
	return cfg, nil
}

// Zones returns the zones of the cluster, in Options order.
func (c *Cluster) Zones() []string { return slices.Clone(c.zones) }

// ControlAddr is control's gRPC address, "127.0.0.1:port". It stays the
// same across StopControl and RestartControl.
func (c *Cluster) ControlAddr() string { return c.ctl.addrString() }

// ControlMetricsAddr is the address of control's /metrics, "" if none.
func (c *Cluster) ControlMetricsAddr() string { return c.ctl.metricsAddrString() }

// ControlHTTPAddr is the address of control's HTTP/JSON API, "" if none.
// It stays the same across StopControl and RestartControl.
func (c *Cluster) ControlHTTPAddr() string { return c.ctl.httpAddrString() }

// ControlDataDir is control's --data-dir: its embedded etcd is in
// ControlDataDir()/etcd (lehr control restore).
func (c *Cluster) ControlDataDir() string { return c.ctl.opts.DataDir }

// Control returns the running control daemon, nil while it is stopped.
func (c *Cluster) Control() *control.Control { return c.ctl.current() }

// Producer is a producer client connected to control, shared by every
// caller and closed by Close. It reconnects by itself after
// RestartControl.
func (c *Cluster) Producer() *producer.Client { return c.prod }

// StopControl stops control (and its embedded etcd) and waits until it
// has stopped; distributors and agents keep running and keep serving what
// they hold. It returns the error control's Run ended with. Stopping a
// stopped control does nothing.
func (c *Cluster) StopControl() error { return c.ctl.stop() }

// RestartControl starts control again on the same data directory and
// address, and returns once it serves. Restarting a running control is an
// error.
func (c *Cluster) RestartControl(ctx context.Context) error { return c.ctl.start(ctx) }

// Distributors returns the distributors of zone (nil for an unknown
// zone).
func (c *Cluster) Distributors(zone string) []*DistributorHandle {
	return slices.Clone(c.dists[zone])
}

// Agents returns the agents of zone (nil for an unknown zone).
func (c *Cluster) Agents(zone string) []*AgentHandle { return slices.Clone(c.ags[zone]) }

// Agent returns agent i of zone, or an error naming what exists.
func (c *Cluster) Agent(zone string, i int) (*AgentHandle, error) {
	as, ok := c.ags[zone]
	if !ok {
		return nil, fmt.Errorf("devcluster: no zone %q (zones: %v)", zone, c.zones)
	}
	if i < 0 || i >= len(as) {
		return nil, fmt.Errorf("devcluster: zone %s has %d agents; agent %d does not exist", zone, len(as), i)
	}
	return as[i], nil
}

// Consumer returns a new consumer client (client/consumer) bound to the
// socket and files directory of agent i of zone, with a 200 ms retry
// interval, adjusted by mod (a metrics URL, say). Close closes it if the
// caller has not; closing it earlier is fine.
func (c *Cluster) Consumer(zone string, i int, mod ...func(*consumer.Options)) (*consumer.Client, error) {
	a, err := c.Agent(zone, i)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("devcluster: cluster closed")
	}
	copts := consumer.Options{
		Socket:        a.Socket(),
		FilesDir:      a.FilesDir(),
		ClientID:      fmt.Sprintf("devcluster-%s-%d", a.HostID, len(c.consumers)),
		RetryInterval: 200 * time.Millisecond,
		Logger:        c.log.With("component", "consumer", "host", a.HostID),
	}
	for _, m := range mod {
		m(&copts)
	}
	cl, err := consumer.New(copts)
	if err != nil {
		return nil, fmt.Errorf("devcluster: consumer of %s: %w", a.HostID, err)
	}
	c.consumers = append(c.consumers, cl)
	return cl, nil
}

// Close stops everything in reverse order of Start — consumer clients,
// agents, distributors, the producer client, control — waits for every
// goroutine the cluster started, and removes the directories Start made
// (never an Options.Dir). It returns the errors daemons stopped with. It is
// idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		cons := c.consumers
		c.consumers = nil
		c.mu.Unlock()
		var errs []error
		for _, cl := range slices.Backward(cons) {
			if err := cl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("devcluster: close consumer: %w", err))
			}
		}
		for _, z := range slices.Backward(c.zones) {
			for _, a := range slices.Backward(c.ags[z]) {
				errs = append(errs, a.close())
			}
		}
		for _, z := range slices.Backward(c.zones) {
			for _, d := range slices.Backward(c.dists[z]) {
				errs = append(errs, d.Stop())
			}
		}
		if c.prod != nil {
			c.prod.Close()
		}
		if c.ctl != nil {
			errs = append(errs, c.ctl.stop())
		}
		if c.sockDir != "" {
			if err := os.RemoveAll(c.sockDir); err != nil {
				errs = append(errs, fmt.Errorf("devcluster: remove socket directory: %w", err))
			}
		}
		if c.ownDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("devcluster: remove %s: %w", c.dir, err))
			}
		}
		c.closeErr = errors.Join(errs...)
		c.log.Info("devcluster: stopped", "err", c.closeErr)
	})
	return c.closeErr
}

// socketPath returns where host's agent listens: inside its data dir when
// that is short enough, else in the cluster's short socket directory.
func (c *Cluster) socketPath(dataDir, hostID string) (string, error) {
	if p := filepath.Join(dataDir, "agent.sock"); len(p) <= maxSocketPath {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sockDir == "" {
		d, err := os.MkdirTemp("", "lehr")
		if err != nil {
			return "", fmt.Errorf("devcluster: make a socket directory: %w", err)
		}
		c.sockDir = d
	}
	p := filepath.Join(c.sockDir, hostID+".sock")
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("devcluster: socket path %s is longer than %d bytes: set TMPDIR to a shorter directory", p, maxSocketPath)
	}
	return p, nil
}

// runner runs one daemon's Run in a goroutine the cluster owns.
type runner struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when Run returned
	err    error         // Run's result; read after done is closed
}

func goRun(run func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan struct{})}
	r.wg.Go(func() {
		defer close(r.done)
		r.err = run(ctx)
	})
	return r
}

// stop cancels Run and waits for it.
func (r *runner) stop() error {
	r.cancel()
	r.wg.Wait()
	return r.err
}

// waitReady waits until ready is closed, Run ends, ctx ends or timeout
// passes. On failure it stops Run.
func (r *runner) waitReady(ctx context.Context, ready <-chan struct{}, timeout time.Duration, what string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-r.done:
		if r.err != nil {
			return fmt.Errorf("devcluster: %s: %w", what, r.err)
		}
		return fmt.Errorf("devcluster: %s stopped before it served", what)
	case <-ctx.Done():
		r.stop()
		return fmt.Errorf("devcluster: start %s: %w", what, ctx.Err())
	case <-t.C:
		r.stop()
		return fmt.Errorf("devcluster: %s did not serve within %v", what, timeout)
	}
}

// controlDaemon is control with a stable address across restarts.
type controlDaemon struct {
	c    *Cluster
	opts control.Options // Listen, MetricsListen and HTTPListen fixed after the first start

	mu  sync.Mutex
	ctl *control.Control
	run *runner
}

func (d *controlDaemon) start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.run != nil {
		return errors.New("devcluster: control is already running")
	}
	ctl, err := control.New(d.opts)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	r := goRun(ctl.Run)
	if err := r.waitReady(ctx, ctl.Ready(), d.c.opts.StartTimeout, "control"); err != nil {
		return err
	}
	// Keep the ports for restarts.
	d.opts.Listen = ctl.Addr().String()
	if a := ctl.MetricsAddr(); a != nil {
		d.opts.MetricsListen = a.String()
	}
	if a := ctl.HTTPAddr(); a != nil {
		d.opts.HTTPListen = a.String()
	}
	d.ctl, d.run = ctl, r
	return nil
}

// consoleURL is the console's base URL on a loopback HTTP listener whose
// port is known before it binds; "" otherwise (evaluations then carry
// their console path alone).
func consoleURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "0" || !tlsconfig.IsLoopback(listen) {
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}

func (d *controlDaemon) stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.run == nil {
		return nil
	}
	err := d.run.stop()
	d.ctl, d.run = nil, nil
	if err != nil {
		return fmt.Errorf("devcluster: control: %w", err)
	}
	return nil
}

func (d *controlDaemon) current() *control.Control {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctl
}

func (d *controlDaemon) addrString() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.Listen
}

func (d *controlDaemon) httpAddrString() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.HTTPListen
}

func (d *controlDaemon) metricsAddrString() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.MetricsListen == "off" {
		return ""
	}
	return d.opts.MetricsListen
}
