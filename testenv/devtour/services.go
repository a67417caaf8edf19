package devtour

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/internal/termtext"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/testenv/demoservice"
)

// callers are the users the demo services see, in turn.
var callers = []string{"ana", "ben", "c-eve", "mallory", "dan", "c-fay", "gus", "hal"}

// decisionInterval is how often each demo service decides for a caller.
const decisionInterval = 50 * time.Millisecond

// hostService is the demo service of one host: it prints its callbacks,
// remembers the last version they delivered, and serves synthetic traffic
// shaped by the configuration it holds.
type hostService struct {
	zone    string
	host    string
	client  *consumer.Client
	sub     *consumer.Subscription
	access  *consumer.Subscription // policyNamespace
	svc     *demoservice.Service
	metrics string // the service's /metrics URL
	stop    context.CancelFunc
	wg      sync.WaitGroup // the service's traffic, metrics and decision goroutines

	mu      sync.Mutex
	seen    uint64
	changed chan struct{} // closed and replaced when seen moves
}

// startServices starts a demo service on every host, subscribed to the
// demo namespace through the host's agent, printing every callback. On an
// error it returns the services started so far, for the caller to close.
func (t *tour) startServices(ctx context.Context, decisions io.Writer) ([]*hostService, error) {
	var services []*hostService
	seed := uint64(0)
	for _, z := range t.zones {
		for i, a := range t.cl.Agents(z) {
			seed++
			s, err := t.startService(ctx, z, i, a.HostID, seed, decisions)
			if err != nil {
				return services, err
			}
			services = append(services, s)
			t.say("%s: demo service subscribed to %s through agent %s, metrics on %s", z, appNamespace, a.HostID, s.metrics)
		}
	}
	return services, nil
}

// startService starts the demo service of host (the i-th agent of zone
// z): its traffic, its metrics endpoint on a loopback port, and its
// subscriptions.
func (t *tour) startService(ctx context.Context, z string, i int, host string, seed uint64, decisions io.Writer) (*hostService, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo service on %s: metrics listener: %w", host, err)
	}
	svc := demoservice.New(demoservice.Options{Seed: seed})
	sctx, stop := context.WithCancel(ctx)
	s := &hostService{zone: z, host: host, svc: svc, stop: stop, changed: make(chan struct{}),
		metrics: "http://" + ln.Addr().String() + "/metrics"}
	s.wg.Go(func() { svc.Run(sctx) })
	s.wg.Go(func() {
		if err := svc.Serve(sctx, ln); err != nil {
			fmt.Fprintf(t.out, "    [%s service on %s] %v\n", z, host, err)
		}
	})
	c, err := t.cl.Consumer(z, i, func(o *consumer.Options) {
		o.MetricsURL, o.DecisionLog, o.PreviewReportInterval = s.metrics, decisions, time.Second
	})
	if err != nil {
		s.close()
		return nil, err
	}
	s.client = c
	sub, err := c.Subscribe(ctx, appNamespace)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to %s in %s: %w", appNamespace, z, err)
	}
	s.sub = sub
	if s.access, err = c.Subscribe(ctx, policyNamespace); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to %s in %s: %w", policyNamespace, z, err)
	}
	s.wg.Go(func() { decideCallers(sctx, s.access, int(seed)) })
	sub.OnChange(func(ch consumer.Change) error {
		fmt.Fprint(t.out, formatCallback(z, host, ch.Old, ch.New, ch.Changed))
		s.mu.Lock()
		s.seen = ch.New.Version()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		return svc.Take(ch.New)
	})
	return s, nil
}

// decideCallers is the demo service's access check: every
// decisionInterval it decides, with policyNamespace, for the next caller
// of callers (starting at offset), as a service would for each request.
// The decisions themselves are not used: the demo serves everyone; what
// matters is that the policy and its experiments are evaluated on traffic.
func decideCallers(ctx context.Context, sub *consumer.Subscription, offset int) {
	t := time.NewTicker(decisionInterval)
	defer t.Stop()
	for i := offset; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		user := callers[i%len(callers)]
		// No version yet is ErrNoPolicy: nothing to decide with.
		sub.Evaluate(ctx, policy.Input{
			Principal: map[string]any{"user": user, "token": "tok-" + user},
			Request:   map[string]any{"path": "/app"},
			Now:       time.Now(),
		})
	}
}

// view is what a demo service prints of a version: a *consumer.View, or
// a fixed one in tests.
type view interface {
	demoservice.Getter
	Namespace() string
	Version() uint64
	RollbackOf() uint64
}

// maxCallbackKeys bounds the changed keys a callback line lists.
const maxCallbackKeys = 8

// formatCallback is what the demo service of host prints for one
// callback: the change from old to cur, whose changed keys (sorted) are
// changed — consumer.Change's fields. Keys and values are shown through
// termtext: anyone may push to the demo namespace while the tour runs.
func formatCallback(zone, host string, old, cur view, changed []string) string {
	var b strings.Builder
	rb := ""
	if cur.RollbackOf() != 0 {
		rb = fmt.Sprintf(", a rollback to version %d's content", cur.RollbackOf())
	}
	fmt.Fprintf(&b, "    [%s service on %s] callback: %s version %d (was %d)%s, %d changed %s\n", zone, host,
		termtext.Clean(cur.Namespace()), cur.Version(), old.Version(), rb, len(changed), plural(len(changed), "key", "keys"))
	if _, err := demoservice.Parse(cur); err != nil {
		fmt.Fprintf(&b, "        ! %s\n", termtext.Clean(err.Error()))
	}
	for i, k := range changed {
		if i == maxCallbackKeys {
			fmt.Fprintf(&b, "        … and %d more\n", len(changed)-i)
			break
		}
		ov, had := old.Get(k)
		nv, has := cur.Get(k)
		switch {
		case !had:
			fmt.Fprintf(&b, "        + %s = %s\n", termtext.Clean(k), termtext.Short(nv))
		case !has:
			fmt.Fprintf(&b, "        - %s\n", termtext.Clean(k))
		default:
			fmt.Fprintf(&b, "        ~ %s: %s → %s\n", termtext.Clean(k), termtext.Short(ov), termtext.Short(nv))
		}
	}
	return b.String()
}

// wait blocks until the service's callbacks have delivered version v or
// later.
func (s *hostService) wait(ctx context.Context, v uint64) error {
	for {
		s.mu.Lock()
		seen, ch := s.seen, s.changed
		s.mu.Unlock()
		if seen >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s service on %s at version %d, waiting for %d: %w", s.zone, s.host, seen, v, ctx.Err())
		}
	}
}

// close stops the service and its subscriptions, and waits for its
// goroutines.
func (s *hostService) close() {
	if s.sub != nil {
		s.sub.Close()
	}
	if s.client != nil {
		s.client.Close()
	}
	s.stop()
	s.wg.Wait()
}
