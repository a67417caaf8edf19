package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
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
// embedded etcd (or several control replicas on an external etcd),
// distributors and agents, with certificates from a CA of its own. Every
// process is a Proc.
type Cluster struct {
	// Controls are the control replicas, ControlAddrs their gRPC
	// addresses and ControlMetrics their /metrics addresses (host:port).
	Controls                     []*Proc
	ControlAddrs, ControlMetrics []string
	// Control and ControlAddr are the first replica (the only one unless
	// ClusterOptions.Controls says otherwise).
	Control     *Proc
	ControlAddr string
	// DistributorControl is the --control the distributors were given:
	// every replica's address as a list, or only the first's when the
	// binary refuses a list (before issue 29's multi-address support).
	DistributorControl string
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

	args func(control string) []string // its command line, given --control
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
	// Controls is the number of control replicas; 0 means 1. More than
	// one needs EtcdEndpoints.
	Controls int
	// EtcdEndpoints, if set, are the client URLs of an external etcd
	// cluster every control replica uses (--etcd-endpoints) instead of an
	// embedded etcd of its own.
	EtcdEndpoints []string
	// EtcdTLS, if set, are the files control replicas reach EtcdEndpoints
	// with (--etcd-ca, --etcd-cert, --etcd-key).
	EtcdTLS *EtcdTLS
	Logger  *slog.Logger
}

// EtcdTLS are the files of a client of an etcd over mutual TLS: the CA of
// the members' certificates, and a client certificate and its key.
type EtcdTLS struct{ CA, Cert, Key string }

// Args are control's flags for them.
func (t EtcdTLS) Args() []string {
	return []string{"--etcd-ca", t.CA, "--etcd-cert", t.Cert, "--etcd-key", t.Key}
}

// StartCluster starts control (every replica), creates the domain and the
// zones, then starts the distributors and agents, each ready (READY=1)
// before it returns. ctx bounds the start; run bounds supervision
// (restarts).
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

	replicas := max(opts.Controls, 1)
	if replicas > 1 && len(opts.EtcdEndpoints) == 0 {
		return nil, fmt.Errorf("chaos: %d control replicas need an external etcd (ClusterOptions.EtcdEndpoints)", replicas)
	}
	var pubKeys []string
	for i := range replicas {
		port, err := freeTCPPort()
		if err != nil {
			return nil, err
		}
		mport, err := freeTCPPort()
		if err != nil {
			return nil, err
		}
		addr, maddr := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", mport)
		name := "control"
		if replicas > 1 {
			name = fmt.Sprintf("control%d", i)
		}
		dir := filepath.Join(opts.Dir, name)
		args := []string{
			"control", "--data-dir", filepath.Join(dir, "data"), "--listen", addr,
			"--metrics-listen", maddr, "--keep-last", "1000000", "--compact-interval", "-1s",
			"--dev", // the workload and the distributors talk plaintext on loopback
		}
		if len(opts.EtcdEndpoints) > 0 {
			args = append(args, "--etcd-endpoints", strings.Join(opts.EtcdEndpoints, ","))
		}
		if opts.EtcdTLS != nil {
			args = append(args, opts.EtcdTLS.Args()...)
		}
		p, err := newProc(run, name, opts.Binary, dir, append(args, opts.ControlArgs...), log)
		if err != nil {
			return nil, err
		}
		c.Controls = append(c.Controls, p)
		c.ControlAddrs = append(c.ControlAddrs, addr)
		c.ControlMetrics = append(c.ControlMetrics, maddr)
		pubKeys = append(pubKeys, filepath.Join(dir, "data", "signing.pub"))
	}
	c.Control, c.ControlAddr = c.Controls[0], c.ControlAddrs[0]
	c.DistributorControl = strings.Join(c.ControlAddrs, ",")
	for _, p := range c.Controls {
		if err := p.Start(ctx); err != nil {
			return nil, err
		}
	}
	// Each replica signs with a key of its own: agents trust them all.
	trusted := filepath.Join(opts.Dir, "trusted.pub")
	if err := concatFiles(trusted, pubKeys); err != nil {
		return nil, err
	}
	if c.prod, err = newProducer(c.ControlAddrs, log); err != nil {
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
			d := &Distributor{Zone: zone, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
			d.args = func(control string) []string {
				return []string{
					"distributor", "--zone", zone, "--id", id, "--control", control, "--control-plaintext",
					"--listen", d.Addr, "--tls-cert", cert, "--tls-key", key, "--tls-ca", caFile, "--report-interval", "1s",
				}
			}
			if d.Proc, err = newProc(run, "distributor "+id, opts.Binary, filepath.Join(opts.Dir, id), d.args(c.DistributorControl), log); err != nil {
				return nil, err
			}
			c.Distributors[zone] = append(c.Distributors[zone], d)
			addrs = append(addrs, d.Addr)
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
				"--trusted-keys", trusted,
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
	for _, z := range c.Zones() {
		for _, d := range c.Distributors[z] {
			if err := c.startDistributor(ctx, run, d); err != nil {
				return nil, err
			}
		}
	}
	for _, a := range c.Agents {
		if err := a.Start(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startDistributor starts d. A binary that refuses a list of control
// addresses (before issue 29's multi-address support) is given the first
// replica's alone, for the whole cluster: c.DistributorControl says which.
func (c *Cluster) startDistributor(ctx, run context.Context, d *Distributor) error {
	err := d.Start(ctx)
	if err == nil || len(c.ControlAddrs) < 2 || !strings.Contains(d.Tail(4096), "want host:port") {
		return err
	}
	if c.DistributorControl != c.ControlAddr {
		c.log.Warn("chaos: the distributors refuse a list of control addresses; each is given the first replica's alone",
			"list", c.DistributorControl, "control", c.ControlAddr)
		c.DistributorControl = c.ControlAddr
	}
	d.Proc.Close(time.Second) // ends the supervisor's restarts
	p, err := newProc(run, d.Name, d.Binary(), d.dir, d.args(c.DistributorControl), c.log)
	if err != nil {
		return err
	}
	d.Proc = p
	return d.Start(ctx)
}

// newProducer returns a producer client of the control replicas at addrs,
// retrying through restarts: the list itself as its address where the
// client takes one (issue 29). Until it does, a client of the first
// address whose connections go to the first replica that answers.
func newProducer(addrs []string, log *slog.Logger) (*producer.Client, error) {
	opts := producer.Options{
		Address: strings.Join(addrs, ","), Author: "chaos", Logger: log,
		// Few attempts per call, so an op outliving a control restart is
		// called again with its request id (Workload.do), as a producer
		// process that crashed and resumed would.
		Retry: producer.RetryPolicy{MaxAttempts: 3, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	}
	p, err := producer.New(opts)
	if err == nil || len(addrs) < 2 {
		return p, err
	}
	opts.Address = addrs[0]
	opts.DialOptions = []grpc.DialOption{grpc.WithContextDialer(dialFirst(addrs))}
	return producer.New(opts)
}

// dialFirst returns a gRPC dialer that connects to the first of addrs
// that accepts, starting with the one that accepted last.
func dialFirst(addrs []string) func(context.Context, string) (net.Conn, error) {
	var mu sync.Mutex
	last := 0
	return func(ctx context.Context, _ string) (net.Conn, error) {
		mu.Lock()
		first := last
		mu.Unlock()
		var errs []error
		for i := range addrs {
			k := (first + i) % len(addrs)
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addrs[k])
			if err == nil {
				mu.Lock()
				last = k
				mu.Unlock()
				return conn, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}

// concatFiles writes the files' contents, one after the other, to dst.
func concatFiles(dst string, files []string) error {
	var b []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		b = append(b, data...)
	}
	return os.WriteFile(dst, b, 0o644)
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

// procs lists every process: the control replicas, the distributors,
// the agents.
func (c *Cluster) procs() []*Proc {
	ps := append([]*Proc(nil), c.Controls...)
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
