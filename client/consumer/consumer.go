// Package consumer is the library services use to read Lehr configuration.
//
// A Client talks to the host's agent over its unix socket. Subscribe takes a
// lease on a namespace (kept alive in the background, so the agent keeps the
// namespace current on this host) and returns a Subscription: an in-memory,
// checksum-verified view of the namespace that follows the file the agent
// writes, with change callbacks and a Next loop.
//
//	c, err := consumer.New(consumer.Options{})
//	sub, err := c.Subscribe(ctx, "payments/limits")
//	rps, ok := sub.View().Get("limits/rps")
//	sub.OnChange(func(ch consumer.Change) error {
//		return reload(ch.New)
//	})
//
// Guarantees:
//   - A view is never torn and never fails its checksum: the file is read whole
//     and verified before it replaces the current view; a bad read is logged
//     and the previous view stays.
//   - Versions only move forward: a file holding a version at or below the
//     current one is ignored.
//   - If the agent goes away, the last good view stays and the client keeps
//     trying to renew its lease; it also keeps watching the file.
//   - If the agent's distributor cannot serve the namespace — this host is
//     not among its domain's readers, it has no goal in the zone (never
//     published, or deleted upstream) — the subscription waits and says
//     why: Subscription.Unavailable (matching ErrForbidden for a reader
//     ACL; NOT_FOUND for a namespace deleted upstream, whose last view
//     stays as it is) and a warning in the log saying what to do.
//
// Package consumer imports nothing of the agent, distributor or control.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultSocket is where the agent listens unless configured otherwise.
const DefaultSocket = "/run/lehr/agent.sock"

// Options configures a Client. The zero value is valid.
type Options struct {
	// Socket is the agent's unix socket. Default: $LEHR_AGENT_SOCKET, else
	// DefaultSocket.
	Socket string
	// ClientID names this process in the agent's status and reports.
	// Default: the program name and pid, "name@pid".
	ClientID string
	// Service names the service this process belongs to, e.g.
	// "checkout": operators see which services use each namespace, per
	// zone (lehr status, the console). 1-63 bytes of a-z, 0-9, '.', '_'
	// and '-', starting and ending with a letter or digit. Default:
	// $LEHR_SERVICE, else the program's name made to fit
	// ("Checkout API" → "checkout-api"); New refuses an invalid one.
	Service string
	// LeaseTTL is the lease duration to ask for; 0 lets the agent choose.
	LeaseTTL time.Duration
	// MetricsURL is this process's Prometheus endpoint, e.g.
	// "http://127.0.0.1:9100/metrics" (a loopback address with a port),
	// or "" for none. The agent scrapes it while the process holds a
	// subscription and compares the standard request, error, latency and
	// restart figures before and after a change reaches the host (canary
	// analysis, docs/canary.md). Default: $LEHR_METRICS_URL.
	MetricsURL string
	// FilesDir, if set, is the agent's files directory (its data dir +
	// "/files"). It lets Subscribe serve the last file written even when the
	// agent is unreachable at start; without it, Subscribe needs the agent.
	FilesDir string
	// RetryInterval bounds the wait between attempts to reach the agent
	// (lease renewal after a failure). Default 1 s.
	RetryInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger

	// Policy preview (docs/preview.md). Evaluate on a policy subscription
	// also evaluates the experiments being previewed, unless
	// DisablePreview.
	DisablePreview bool
	// DecisionLog receives the preview's decision log lines, each the
	// experiment's log prefix ("PolicyPreviewLog"), a space and a JSON
	// object, one line per write. Default os.Stderr.
	DecisionLog io.Writer
	// PreviewSample logs one agreement in PreviewSample (disagreements
	// are all logged); 0 means DefaultPreviewSample, negative logs none.
	PreviewSample int
	// PreviewReportInterval is how often the decision counts go to the
	// agent; 0 means DefaultPreviewReportInterval.
	PreviewReportInterval time.Duration
}

// Client is a connection to the local agent. It is safe for concurrent use.
type Client struct {
	opts Options
	// policyEnv builds the CEL environment of policy rules once, on the
	// first Evaluate (it costs milliseconds).
	policyEnv func() (*cel.Env, error)
	conn      *grpc.ClientConn
	api       lehrpb.AgentClient
	log       *slog.Logger

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

// New returns a Client for the agent on opts.Socket. It does not wait for
// the agent: the connection is made lazily and re-made as needed.
func New(opts Options) (*Client, error) {
	if opts.Socket == "" {
		opts.Socket = os.Getenv("LEHR_AGENT_SOCKET")
	}
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	// gRPC's unix resolver wants an absolute path ("unix:///abs"); a
	// relative one would be read as an authority.
	if abs, err := filepath.Abs(opts.Socket); err == nil {
		opts.Socket = abs
	}
	if opts.MetricsURL == "" {
		opts.MetricsURL = os.Getenv("LEHR_METRICS_URL")
	}
	if opts.ClientID == "" {
		opts.ClientID = fmt.Sprintf("%s@%d", filepath.Base(os.Args[0]), os.Getpid())
	}
	if opts.Service == "" {
		if opts.Service = os.Getenv("LEHR_SERVICE"); opts.Service == "" {
			opts.Service = names.ServiceOf(filepath.Base(os.Args[0]))
		}
	}
	if opts.Service != "" {
		if err := names.Service(opts.Service); err != nil {
			return nil, fmt.Errorf("consumer: Options.Service (or $LEHR_SERVICE): %w", err)
		}
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DecisionLog == nil {
		opts.DecisionLog = os.Stderr
	}
	if opts.PreviewSample == 0 {
		opts.PreviewSample = DefaultPreviewSample
	}
	if opts.PreviewReportInterval <= 0 {
		opts.PreviewReportInterval = DefaultPreviewReportInterval
	}
	conn, err := grpc.NewClient("unix://"+opts.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("consumer: agent socket %s: %w", opts.Socket, err)
	}
	return &Client{
		opts:      opts,
		policyEnv: sync.OnceValues(policy.NewEnv),
		conn:      conn,
		api:       lehrpb.NewAgentClient(conn),
		log:       opts.Logger.With("component", "lehr-consumer"),
		subs:      map[*Subscription]struct{}{},
	}, nil
}

// ErrClosed is returned by calls on a closed Client or Subscription.
var ErrClosed = errors.New("consumer: closed")

// Subscribe takes a lease on namespace ns ("domain/name") and returns its
// subscription once the current content (if any) is loaded. The view may be
// empty (version 0) if the namespace has not reached this host yet; use
// Next or OnChange to learn when it arrives.
func (c *Client) Subscribe(ctx context.Context, ns string) (*Subscription, error) {
	if _, _, err := names.Namespace(ns); err != nil {
		return nil, fmt.Errorf("consumer: subscribe: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.mu.Unlock()

	s := newSubscription(c, ns)
	lease, err := s.lease(ctx)
	switch {
	case err == nil:
		s.setLease(lease)
	case c.opts.FilesDir != "":
		// Static stability: serve what the agent last wrote, keep trying.
		c.log.Warn("agent unreachable; serving from files", "namespace", ns, "err", err)
		p, perr := filePath(c.opts.FilesDir, ns)
		if perr != nil {
			return nil, perr
		}
		s.path = p
	default:
		return nil, fmt.Errorf("consumer: subscribe %s: agent at %s: %w", ns, c.opts.Socket, err)
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		s.Close()
		return nil, ErrClosed
	}
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s, nil
}

// Close ends every subscription (releasing their leases) and the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	subs := make([]*Subscription, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	return c.conn.Close()
}

func (c *Client) forget(s *Subscription) {
	c.mu.Lock()
	delete(c.subs, s)
	c.mu.Unlock()
}
