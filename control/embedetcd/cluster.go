package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is an n-member etcd cluster running in this process, every member
// on its own loopback ports and in its own subdirectory. Members can be
// stopped and restarted to test failover. It is safe for concurrent use.
type Cluster struct {
	logger  *slog.Logger
	members []memberConfig
	initial string // --initial-cluster of every member

	mu      sync.Mutex
	servers []*Server // nil while stopped
}

type memberConfig struct {
	name, dir, clientURL, peerURL string
}

// StartCluster starts an n-member cluster under dir (member i in
// dir/a<attempt>/m<i>, a fresh attempt directory for each retry after a
// picked port was taken) and waits until every member is ready. logger may be nil (slog.Default).
// Members run with NoSync: a Cluster is for tests.
func StartCluster(ctx context.Context, dir string, n int, logger *slog.Logger) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedetcd: cluster size %d: want at least 1", n)
	}
	if logger == nil {
		logger = slog.Default()
	}
	const attempts = 5
	var err error
	for attempt := range attempts {
		var c *Cluster
		c, err = startCluster(ctx, dir, n, logger, attempt)
		if err == nil {
			return c, nil
		}
		if !isAddrInUse(err) || ctx.Err() != nil {
			return nil, err
		}
		logger.Debug("embedetcd: picked port was taken, retrying cluster start", "err", err)
	}
	return nil, err
}

func startCluster(ctx context.Context, dir string, n int, logger *slog.Logger, attempt int) (*Cluster, error) {
	c := &Cluster{logger: logger, servers: make([]*Server, n)}
	var initial []string
	for i := range n {
		m := memberConfig{
			name: fmt.Sprintf("m%d", i),
			// A failed attempt may leave a half-initialised data dir behind;
			// each attempt gets fresh ones.
			dir: filepath.Join(dir, fmt.Sprintf("a%d", attempt), fmt.Sprintf("m%d", i)),
		}
		var err error
		if m.clientURL, err = resolvePort(autoURL); err != nil {
			return nil, err
		}
		if m.peerURL, err = resolvePort(autoURL); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	cluster := strings.Join(initial, ",")
	c.initial = cluster

	// Members of a new cluster become ready only once a quorum is up, so
	// they must start concurrently.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() {
			s, err := Start(ctx, Options{
				Dir:            m.dir,
				Name:           m.name,
				ClientURL:      m.clientURL,
				PeerURL:        m.peerURL,
				InitialCluster: cluster,
				ClusterState:   embed.ClusterStateFlagNew,
				Logger:         logger,
				NoSync:         true,
			})
			errs[i], c.servers[i] = err, s
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, fmt.Errorf("embedetcd: start %d-member cluster: %w", n, err)
	}
	return c, nil
}

// Endpoints returns the client URLs of every member, stopped ones included,
// so a client given them all fails over between members.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// Size returns the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Stop closes member i. Stopping a stopped member does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Restart starts stopped member i again with the same data directory and
// URLs and waits until it is ready. Restarting a running member is an error.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	running := c.servers[i] != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("embedetcd: restart member %d: still running", i)
	}
	m := c.members[i]
	if _, err := os.Stat(m.dir); err != nil {
		return fmt.Errorf("embedetcd: restart member %d: %w", i, err)
	}
	s, err := Start(ctx, Options{
		Dir:            m.dir,
		Name:           m.name,
		ClientURL:      m.clientURL,
		PeerURL:        m.peerURL,
		InitialCluster: c.initial,
		ClusterState:   embed.ClusterStateFlagExisting,
		Logger:         c.logger,
		NoSync:         true,
	})
	if err != nil {
		return fmt.Errorf("embedetcd: restart member %d: %w", i, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers[i] != nil { // lost a race with a concurrent Restart
		s.Close()
		return fmt.Errorf("embedetcd: restart member %d: restarted concurrently", i)
	}
	c.servers[i] = s
	return nil
}

// Close stops every member. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	servers := c.servers
	c.servers = make([]*Server, len(servers))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		if s != nil {
			wg.Go(func() { s.Close() })
		}
	}
	wg.Wait()
	return nil
}
