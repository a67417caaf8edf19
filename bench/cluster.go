package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
)

// startTimeout bounds how long a component may take to become ready.
const startTimeout = 60 * time.Second

// hostPKI is a throw-away certificate authority for one scenario.
type hostPKI struct {
	ca *pki.CA
}

func newPKI(dir string) (*hostPKI, error) {
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "lehr-bench-ca", 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	return &hostPKI{ca: ca}, nil
}

// serverTLS returns a distributor's QUIC server configuration (mutual TLS).
func (p *hostPKI) serverTLS(name string) (*tls.Config, error) {
	cert, err := p.pair(name, pki.Server, []string{"127.0.0.1"}, tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: benchZone, Name: name}.URI())
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.ca.Pool(),
	}, nil
}

// clientTLS returns a host certificate configuration for an agent named
// host, trusting distributors at 127.0.0.1.
func (p *hostPKI) clientTLS(host string) (*tls.Config, error) {
	cert, err := p.pair(host, pki.Client, nil, tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: benchZone, Name: host}.URI())
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      p.ca.Pool(),
		ServerName:   "127.0.0.1",
	}, nil
}

func (p *hostPKI) pair(name string, kind pki.Kind, hosts []string, id *url.URL) (tls.Certificate, error) {
	c, k, err := p.ca.IssueURI(name, kind, hosts, id, 24*time.Hour)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load certificate %s: %w", name, err)
	}
	return cert, nil
}

// runningDistributor is a distributor started by a scenario.
type runningDistributor struct {
	d    *distributor.Distributor
	done chan error

	closeOnce sync.Once
	closeErr  error
}

// startDistributor starts a distributor of benchZone against control at
// controlAddr, listening on listen ("127.0.0.1:0" for any port), and waits
// until it serves.
func startDistributor(ctx context.Context, p *hostPKI, controlAddr, id, listen string, log *slog.Logger) (*runningDistributor, error) {
	tc, err := p.serverTLS(id)
	if err != nil {
		return nil, err
	}
	d, err := distributor.New(distributor.Options{
		Zone:        benchZone,
		ID:          id,
		ControlAddr: controlAddr,
		Listen:      listen,
		TLS:         tc,
		Logger:      log.With("component", "distributor", "id", id),
	})
	if err != nil {
		return nil, fmt.Errorf("new distributor: %w", err)
	}
	rd := &runningDistributor{d: d, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
		return rd, nil
	case err := <-rd.done:
		return nil, fmt.Errorf("distributor stopped before serving: %w", err)
	case <-time.After(startTimeout):
		rd.close()
		return nil, fmt.Errorf("distributor did not serve within %v", startTimeout)
	case <-ctx.Done():
		rd.close()
		return nil, ctx.Err()
	}
}

func (rd *runningDistributor) addr() string { return rd.d.Addr().String() }

// close stops the distributor and waits for Run. Idempotent.
func (rd *runningDistributor) close() error {
	rd.closeOnce.Do(func() {
		rd.d.Close()
		rd.closeErr = <-rd.done
	})
	return rd.closeErr
}

// runningAgent is a real agent (package agent) run in this process.
type runningAgent struct {
	a      *agent.Agent
	cancel context.CancelFunc
	done   chan error

	closeOnce sync.Once
	closeErr  error
}

// startAgent runs a real agent with durable writes in dataDir, its socket
// at socket, connected to distributors, and waits until its local API
// serves.
func startAgent(ctx context.Context, p *hostPKI, host, dataDir, socket string, distributors []string, log *slog.Logger) (*runningAgent, error) {
	tc, err := p.clientTLS(host)
	if err != nil {
		return nil, err
	}
	a, err := agent.New(agent.Options{
		HostID:       host,
		Zone:         benchZone,
		Distributors: distributors,
		TLS:          tc,
		DataDir:      dataDir,
		Socket:       socket,
		BackoffMin:   10 * time.Millisecond,
		BackoffMax:   500 * time.Millisecond,
		Logger:       log.With("component", "agent", "host", host),
	})
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(runCtx) }()
	select {
	case <-a.Ready():
		return ra, nil
	case err := <-ra.done:
		cancel()
		return nil, fmt.Errorf("agent stopped before serving: %w", err)
	case <-time.After(startTimeout):
		ra.close()
		return nil, fmt.Errorf("agent did not serve within %v", startTimeout)
	case <-ctx.Done():
		ra.close()
		return nil, ctx.Err()
	}
}

// close stops the agent and waits for Run. Idempotent.
func (ra *runningAgent) close() error {
	ra.closeOnce.Do(func() {
		ra.cancel()
		ra.closeErr = <-ra.done
	})
	return ra.closeErr
}

// dialSim connects one simulated agent (see package agenttest for how it
// differs from the real agent) to the distributor at addr.
func dialSim(ctx context.Context, p *hostPKI, addr, host string, subs []string, cached []agenttest.Cached, log *slog.Logger) (*agenttest.Agent, error) {
	tc, err := p.clientTLS(host)
	if err != nil {
		return nil, err
	}
	a, err := agenttest.Dial(ctx, agenttest.Options{
		Addr: addr, TLS: tc, HostID: host, Zone: benchZone,
		Subscriptions: subs, Cached: cached, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("dial simulated agent %s: %w", host, err)
	}
	return a, nil
}
