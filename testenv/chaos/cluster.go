package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Topology is the shape of a cluster.
type Topology struct {
	// Zones is the number of zones, named z0, z1, ...
	Zones int
	// DistributorsPerZone and AgentsPerZone size each zone.
	DistributorsPerZone, AgentsPerZone int
	// SilenceTimeout is the agents' --silence-timeout; zero leaves their
	// default.
	SilenceTimeout time.Duration
}

func (t Topology) String() string {
	s := fmt.Sprintf("%d zone(s) × (%d distributors, %d agents)", t.Zones, t.DistributorsPerZone, t.AgentsPerZone)
	if t.SilenceTimeout > 0 {
		s += fmt.Sprintf(", agents' silence timeout %v", t.SilenceTimeout)
	}
	return s
}

// Domain is the domain every namespace of the matrix lives in.
const Domain = "chaos"

// Cluster is Lehr running as processes of one binary: control on its
// embedded etcd, distributors and agents, with certificates from a CA of
// its own. Every process is a Proc.
type Cluster struct {
	Control     *Proc
	ControlAddr string
	// Distributors of each zone, and their UDP addresses.
	Distributors map[string][]*Distributor
	// Agents in zone order.
	Agents []*Agent

	dir  string
	prod *producer.Client
	log  *slog.Logger
}

// Distributor is one distributor process.
type Distributor struct {
	*Proc
	Zone, Addr string
}

// Agent is one agent process.
type Agent struct {
	*Proc
	Zone, HostID, DataDir string
	// Distributors is the agent's --distributors list (preference order).
	Distributors []string

	conn *grpc.ClientConn
	api  lehrpb.AgentClient
}

// Socket is the agent's local API socket.
func (a *Agent) Socket() string { return filepath.Join(a.DataDir, "agent.sock") }

// FilesDir is where the agent writes namespace files.
func (a *Agent) FilesDir() string { return filepath.Join(a.DataDir, "files") }

// Status asks the agent for its status.
func (a *Agent) Status(ctx context.Context) (*lehrpb.StatusResponse, error) {
	return a.api.Status(ctx, &lehrpb.StatusRequest{})
}

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Binary is the lehr binary (see Build). Required.
	Binary string
	// Dir holds every process's data, sockets and log. Keep it short:
	// agents' unix sockets live under it (at most 107 bytes a path).
	Dir      string
	Topology Topology
	// AgentDistributors, if set, returns agent i's --distributors list
	// from the zone's distributor addresses; nil spreads agents over them
	// by rotating the list.
	AgentDistributors func(zone string, i int, dists []string) []string
	// ControlArgs are added to control's command line (e.g. --rollouts=false).
	ControlArgs []string
	Logger      *slog.Logger
}

// StartCluster starts control, creates the domain and the zones, then
// starts the distributors and agents, each ready (READY=1) before it
// returns. ctx bounds the start; run bounds supervision (restarts).
func StartCluster(ctx, run context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Cluster{dir: opts.Dir, Distributors: map[string][]*Distributor{}, log: log}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ca, err := pki.NewCA(filepath.Join(opts.Dir, "pki"), "lehr-chaos-CA", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(opts.Dir, "pki", pki.CACertFile)
	issue := func(id tlsconfig.Identity, kind pki.Kind) (string, string, error) {
		return ca.IssueURIFiles(filepath.Join(opts.Dir, "pki"), id.Name, kind, []string{"127.0.0.1"}, id.URI(), 24*time.Hour)
	}

	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	c.ControlAddr = fmt.Sprintf("127.0.0.1:%d", port)
	if c.Control, err = newProc(run, "control", opts.Binary, filepath.Join(opts.Dir, "control"), append([]string{
		"control", "--data-dir", filepath.Join(opts.Dir, "control", "data"), "--listen", c.ControlAddr,
		"--metrics-listen", "off", "--keep-last", "1000000", "--compact-interval", "-1s",
		"--dev", // the workload and the distributors talk plaintext on loopback
	}, opts.ControlArgs...), log); err != nil {
		return nil, err
	}
	if err := c.Control.Start(ctx); err != nil {
		return nil, err
	}
	if c.prod, err = producer.New(producer.Options{
		Address: c.ControlAddr, Author: "chaos", Logger: log,
		// Few attempts per call, so an op outliving a control restart is
		// called again with its request id (Workload.do), as a producer
		// process that crashed and resumed would.
		Retry: producer.RetryPolicy{MaxAttempts: 3, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	}); err != nil {
		return nil, err
	}
	// Quotas the workload never meets (the matrix tests kills, not
	// quotas; a rate-limited op retried would count as one retried after
	// a kill). Its control runs in dev mode: the caller may set them.
	quotas := &lehrpb.Quotas{PublishesPerSecond: 1e6, PublishBurst: 1 << 20, PublishBytesPerSecond: 1 << 40, MaxStoredBytes: 1 << 40}
	if _, err := c.prod.CreateDomain(ctx, &lehrpb.Domain{Name: Domain, Description: "the kill matrix", Quotas: quotas}); err != nil {
		return nil, err
	}

	topo := opts.Topology
	for z := range topo.Zones {
		zone := fmt.Sprintf("z%d", z)
		if _, err := c.prod.CreateZone(ctx, zone); err != nil {
			return nil, err
		}
		var addrs []string
		for i := range topo.DistributorsPerZone {
			id := fmt.Sprintf("%s-d%d", zone, i)
			cert, key, err := issue(tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: id}, pki.Both)
			if err != nil {
				return nil, err
			}
			port, err := freeUDPPort()
			if err != nil {
				return nil, err
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			p, err := newProc(run, "distributor "+id, opts.Binary, filepath.Join(opts.Dir, id), []string{
				"distributor", "--zone", zone, "--id", id, "--control", c.ControlAddr, "--control-plaintext",
				"--listen", addr, "--tls-cert", cert, "--tls-key", key, "--tls-ca", caFile, "--report-interval", "1s",
			}, log)
			if err != nil {
				return nil, err
			}
			c.Distributors[zone] = append(c.Distributors[zone], &Distributor{Proc: p, Zone: zone, Addr: addr})
			addrs = append(addrs, addr)
		}
		for i := range topo.AgentsPerZone {
			host := fmt.Sprintf("%s-h%d", zone, i)
			cert, key, err := issue(tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: host}, pki.Client)
			if err != nil {
				return nil, err
			}
			list := rotate(addrs, i)
			if opts.AgentDistributors != nil {
				list = opts.AgentDistributors(zone, i, addrs)
			}
			dataDir := filepath.Join(opts.Dir, host)
			args := []string{
				"agent", "--zone", zone, "--host-id", host, "--distributors", strings.Join(list, ","),
				"--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key, "--data-dir", dataDir,
				"--grace", "10m", "--backoff-max", "1s",
				// Every version checked against control's key: the kill
				// matrix runs with end-to-end signing on.
				"--trusted-keys", filepath.Join(opts.Dir, "control", "data", "signing.pub"),
			}
			if d := opts.Topology.SilenceTimeout; d > 0 {
				args = append(args, "--silence-timeout", d.String())
			}
			p, err := newProc(run, "agent "+host, opts.Binary, filepath.Join(dataDir, "proc"), args, log)
			if err != nil {
				return nil, err
			}
			a := &Agent{Proc: p, Zone: zone, HostID: host, DataDir: dataDir, Distributors: list}
			if a.conn, err = grpc.NewClient("unix://"+a.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				return nil, err
			}
			a.api = lehrpb.NewAgentClient(a.conn)
			c.Agents = append(c.Agents, a)
		}
	}
	for _, p := range c.procs() {
		if p == c.Control {
			continue
		}
		if err := p.Start(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// rotate returns s rotated left by i.
func rotate(s []string, i int) []string {
	if len(s) == 0 {
		return nil
	}
	i %= len(s)
	return append(append([]string(nil), s[i:]...), s[:i]...)
}

// Producer is a producer client of control, retrying through restarts.
func (c *Cluster) Producer() *producer.Client { return c.prod }

// Zones lists the zones.
func (c *Cluster) Zones() []string {
	var zs []string
	for z := range len(c.Distributors) {
		zs = append(zs, fmt.Sprintf("z%d", z))
	}
	return zs
}

// procs lists every process: control, the distributors, the agents.
func (c *Cluster) procs() []*Proc {
	var ps []*Proc
	if c.Control != nil {
		ps = append(ps, c.Control)
	}
	for _, z := range c.Zones() {
		for _, d := range c.Distributors[z] {
			ps = append(ps, d.Proc)
		}
	}
	for _, a := range c.Agents {
		ps = append(ps, a.Proc)
	}
	return ps
}

// StartStopped starts every process Kill left down.
func (c *Cluster) StartStopped(ctx context.Context) error {
	for _, p := range c.procs() {
		if p.Running() {
			continue
		}
		if err := p.Start(ctx); err != nil && !errors.Is(err, errRunning) {
			return err
		}
	}
	return nil
}

// Failures returns every process's unexpected exits, and the data races
// the race detector reported in their logs (a process killed with SIGKILL
// never exits with the detector's status).
func (c *Cluster) Failures() []string {
	var out []string
	for _, p := range c.procs() {
		out = append(out, p.Failures()...)
		if log := p.Tail(64 << 20); strings.Contains(log, "WARNING: DATA RACE") {
			i := strings.Index(log, "WARNING: DATA RACE")
			out = append(out, fmt.Sprintf("%s: the race detector reported a data race; log %s:\n%s", p.Name, p.LogPath(), log[i:min(len(log), i+4000)]))
		}
	}
	return out
}

// Close ends every process (SIGTERM, then SIGKILL) and the clients.
func (c *Cluster) Close() error {
	var errs []error
	if c.prod != nil {
		errs = append(errs, c.prod.Close())
	}
	var wg sync.WaitGroup
	for _, p := range c.procs() {
		wg.Go(func() { p.Close(10 * time.Second) })
	}
	wg.Wait()
	for _, a := range c.Agents {
		if a.conn != nil {
			errs = append(errs, a.conn.Close())
		}
	}
	return errors.Join(errs...)
}
