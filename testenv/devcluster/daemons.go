package devcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// DistributorHandle is one distributor of the cluster. It can be stopped
// and restarted; a restart listens on the same address, so agents find it
// again.
type DistributorHandle struct {
	// Zone is the distributor's zone.
	Zone string
	// ID is the distributor's instance id, "<zone>-dist-<i>".
	ID string

	c    *Cluster
	opts distributor.Options // Listen and MetricsListen fixed after the first start

	mu   sync.Mutex
	d    *distributor.Distributor // the current or, when stopped, last instance
	run  *runner                  // nil when stopped
	addr string
}

func (c *Cluster) newDistributor(zone string, i int) (*DistributorHandle, error) {
	id := fmt.Sprintf("%s-dist-%d", zone, i)
	tlsCfg, err := c.leafTLS(id, pki.Server, tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: id}.URI())
	if err != nil {
		return nil, err
	}
	h := &DistributorHandle{
		Zone: zone,
		ID:   id,
		c:    c,
		opts: distributor.Options{
			Zone:           zone,
			ID:             id,
			ControlAddr:    c.ControlAddr(),
			Listen:         "127.0.0.1:0",
			TLS:            tlsCfg,
			ReportInterval: c.opts.ReportInterval,
			Logger:         c.log.With("component", "distributor"),
		},
	}
	if c.opts.DistributorMetrics {
		h.opts.MetricsListen = "127.0.0.1:0"
	}
	return h, nil
}

func (h *DistributorHandle) start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != nil {
		return fmt.Errorf("devcluster: distributor %s is already running", h.ID)
	}
	d, err := distributor.New(h.opts)
	if err != nil {
		return fmt.Errorf("devcluster: distributor %s: %w", h.ID, err)
	}
	r := goRun(d.Run)
	if err := r.waitReady(ctx, d.Ready(), h.c.opts.StartTimeout, "distributor "+h.ID); err != nil {
		return err
	}
	h.addr = d.Addr().String()
	h.opts.Listen = h.addr
	if a := d.MetricsAddr(); a != nil {
		h.opts.MetricsListen = a.String()
	}
	h.d, h.run = d, r
	return nil
}

// Addr is the UDP address agents dial, "127.0.0.1:port". It stays the same
// across restarts.
func (h *DistributorHandle) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addr
}

// MetricsAddr is the address of the distributor's /metrics, "" unless
// Options.DistributorMetrics is set.
func (h *DistributorHandle) MetricsAddr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.opts.MetricsListen == "" || h.d == nil {
		return ""
	}
	return h.opts.MetricsListen
}

// Distributor returns the running instance, nil while stopped.
func (h *DistributorHandle) Distributor() *distributor.Distributor {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	return h.d
}

// Running says whether the distributor is running.
func (h *DistributorHandle) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.run != nil
}

// Stats returns the counters of the running instance or, while stopped,
// of the last one. Every start begins a new instance whose counters start
// at zero.
func (h *DistributorHandle) Stats() distributor.Stats {
	h.mu.Lock()
	d := h.d
	h.mu.Unlock()
	if d == nil {
		return distributor.Stats{}
	}
	return d.Stats()
}

// Convergence returns how many agents are connected to this distributor
// and how many of them hold each version of each namespace; zero while
// stopped.
func (h *DistributorHandle) Convergence() (agents int, counts []fanout.VersionCount) {
	d := h.Distributor()
	if d == nil {
		return 0, nil
	}
	return d.Convergence()
}

// Stop stops the distributor and waits until it has stopped; its agents
// fail over to the other distributors of the zone. It returns the error
// the distributor's Run ended with. Stopping a stopped distributor does
// nothing.
func (h *DistributorHandle) Stop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	err := h.run.stop()
	h.run = nil
	if err != nil {
		return fmt.Errorf("devcluster: distributor %s: %w", h.ID, err)
	}
	return nil
}

// Restart starts a stopped distributor again on the same address and
// returns once it listens. It is an error if it is running.
func (h *DistributorHandle) Restart(ctx context.Context) error { return h.start(ctx) }

// AgentHandle is one agent of the cluster. It can be stopped and
// restarted; a restart reuses its data directory (so its cache and files
// survive) and its socket.
type AgentHandle struct {
	// Zone is the agent's zone.
	Zone string
	// HostID is the agent's host id, "<zone>-host-<i>", also the
	// CommonName of its host certificate.
	HostID string

	c     *Cluster
	opts  agent.Options
	local *grpc.ClientConn
	api   lehrpb.AgentClient

	mu  sync.Mutex
	a   *agent.Agent
	run *runner // nil when stopped
}

func (c *Cluster) newAgent(zone string, i int) (*AgentHandle, error) {
	host := fmt.Sprintf("%s-host-%d", zone, i)
	tlsCfg, err := c.HostTLS(zone, host)
	if err != nil {
		return nil, err
	}
	// Agent i prefers distributor i mod D, then the others in order.
	ds := c.dists[zone]
	var addrs []string
	for j := range ds {
		addrs = append(addrs, ds[(i+j)%len(ds)].Addr())
	}
	dataDir := filepath.Join(c.dir, "agents", host)
	sock, err := c.socketPath(dataDir, host)
	if err != nil {
		return nil, err
	}
	h := &AgentHandle{
		Zone:   zone,
		HostID: host,
		c:      c,
		opts: agent.Options{
			HostID:           host,
			Zone:             zone,
			Distributors:     addrs,
			TLS:              tlsCfg,
			DataDir:          dataDir,
			Socket:           sock,
			LeaseTTL:         c.opts.LeaseTTL,
			UnsubscribeGrace: c.opts.UnsubscribeGrace,
			BackoffMin:       c.opts.AgentBackoffMin,
			BackoffMax:       c.opts.AgentBackoffMax,
			SignalsInterval:  c.opts.SignalsInterval,
			TrustedKeys:      c.trusted,
			Logger:           c.log.With("component", "agent", "host", host),
			NoSync:           c.opts.NoSync,
		},
	}
	if c.opts.AgentMetrics {
		h.opts.MetricsListen = "127.0.0.1:0"
	}
	h.local, err = grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()), fastReconnect())
	if err != nil {
		return nil, fmt.Errorf("devcluster: local API client of %s: %w", host, err)
	}
	h.api = lehrpb.NewAgentClient(h.local)
	return h, nil
}

func (h *AgentHandle) start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != nil {
		return fmt.Errorf("devcluster: agent %s is already running", h.HostID)
	}
	a, err := agent.New(h.opts)
	if err != nil {
		return fmt.Errorf("devcluster: agent %s: %w", h.HostID, err)
	}
	r := goRun(a.Run)
	if err := r.waitReady(ctx, a.Ready(), h.c.opts.StartTimeout, "agent "+h.HostID); err != nil {
		return err
	}
	h.a, h.run = a, r
	return nil
}

// MetricsAddr is the address of the agent's /metrics: "" unless
// Options.AgentMetrics is set, while the agent is stopped, and until its
// listener is up (shortly after it is ready). A restarted agent may serve
// /metrics on another port.
func (h *AgentHandle) MetricsAddr() string {
	a := h.Agent()
	if a == nil {
		return ""
	}
	if addr := a.MetricsAddr(); addr != nil {
		return addr.String()
	}
	return ""
}

// Socket is the agent's unix socket (the local API consumers use).
func (h *AgentHandle) Socket() string { return h.opts.Socket }

// DataDir is the agent's data directory; its Badger cache is
// DataDir/cache.
func (h *AgentHandle) DataDir() string { return h.opts.DataDir }

// CacheDir is the agent's Badger directory (DataDir/cache).
func (h *AgentHandle) CacheDir() string { return filepath.Join(h.opts.DataDir, "cache") }

// FilesDir is the directory of the agent's namespace files
// (DataDir/files).
func (h *AgentHandle) FilesDir() string { return filepath.Join(h.opts.DataDir, "files") }

// Distributors are the addresses the agent dials, in its order of
// preference.
func (h *AgentHandle) Distributors() []string { return append([]string(nil), h.opts.Distributors...) }

// Local is a client of the agent's local API (Status, Get, …) over its
// socket. It survives restarts of the agent and is closed by Cluster.Close.
func (h *AgentHandle) Local() lehrpb.AgentClient { return h.api }

// Agent returns the running agent, nil while stopped.
func (h *AgentHandle) Agent() *agent.Agent {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	return h.a
}

// Running says whether the agent is running.
func (h *AgentHandle) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.run != nil
}

// Stop stops the agent and waits until it has stopped (its cache closed).
// Its consumers keep their last good views. It returns the error the
// agent's Run ended with. Stopping a stopped agent does nothing.
func (h *AgentHandle) Stop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	err := h.run.stop()
	h.run = nil
	if err != nil {
		return fmt.Errorf("devcluster: agent %s: %w", h.HostID, err)
	}
	return nil
}

// Restart starts a stopped agent again with the same data directory and
// socket and returns once it serves its local API — from its cache, before
// any distributor answers. It is an error if it is running.
func (h *AgentHandle) Restart(ctx context.Context) error { return h.start(ctx) }

// close stops the agent and closes the local API client.
func (h *AgentHandle) close() error {
	err := h.Stop()
	if h.local != nil {
		if cerr := h.local.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("devcluster: close local API client of %s: %w", h.HostID, cerr))
		}
	}
	return err
}
