// Package controladdr turns the control plane address a user gives —
// one "host:port", a comma-separated list of them (one per control
// replica), or a gRPC target such as "unix:///run/lehr/control.sock" —
// into a gRPC client target that fails over between replicas.
//
// Every name in a list is resolved to all of its addresses (a DNS name
// resolving to every replica works as well as a list). A client talks to
// one replica at a time, picked from the list in an order of its own (gRPC's
// pick_first policy with shuffleAddressList, so clients spread over the
// replicas): when that replica goes down, the next call or stream connects
// again, trying the addresses in turn — a refused one at once, a silent one
// for 250 ms before the next is tried alongside (gRPC's happy eyeballs). A
// client connects only when it has a call to make, so a replica that comes
// back is used at once, with no reconnection backoff in the way (gRPC's
// round_robin reconnects eagerly and fails calls fast during its backoff:
// a producer's first call after a control restart then failed). TLS
// verifies each replica against the name it was listed under.
//
// Imported by client/producer (and through it the lehr CLI), distributor and
// distributor/distributorcmd.
package controladdr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"lehr.dev/lehr/internal/tlsconfig"
)

// scheme is the gRPC resolver scheme of a parsed list. The resolver is
// registered per connection (grpc.WithResolvers), never globally.
const scheme = "lehr-control"

// serviceConfig picks one replica at a time, in a shuffled order.
const serviceConfig = `{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}`

// Addresses is a parsed control address.
type Addresses struct {
	// Target, when set, is a gRPC target passed as given ("unix:…",
	// "dns:///…", "passthrough:///…"); List is then nil.
	Target string
	// List holds the replicas' "host:port" addresses, in the order given,
	// without duplicates.
	List []string
}

// Parse parses s: a gRPC target with a scheme (kept as is), or one or
// more "host:port" separated by commas. The error says which entry is
// wrong and what is allowed.
func Parse(s string) (Addresses, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Addresses{}, errors.New("empty address: want host:port, a comma-separated list of host:port (one per control replica), or unix:///path")
	}
	if strings.HasPrefix(s, "unix:") || strings.HasPrefix(s, "unix-abstract:") || strings.Contains(s, "://") {
		if strings.Contains(s, ",") {
			return Addresses{}, fmt.Errorf("%q: a list takes host:port entries only, not %s targets", s, s[:strings.Index(s, ":")])
		}
		return Addresses{Target: s}, nil
	}
	var a Addresses
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		host, port, err := net.SplitHostPort(e)
		if err != nil || host == "" || port == "" {
			what := fmt.Sprintf("%q", e)
			if strings.Contains(s, ",") {
				what = fmt.Sprintf("entry %d %q", i+1, e)
			}
			return Addresses{}, fmt.Errorf("%s: want host:port (e.g. control-a.example.net:7400 or 10.0.0.5:7400; [::1]:7400 for IPv6)", what)
		}
		if !slices.Contains(a.List, e) {
			a.List = append(a.List, e)
		}
	}
	return a, nil
}

// String returns the address as a user would write it.
func (a Addresses) String() string {
	if a.Target != "" {
		return a.Target
	}
	return strings.Join(a.List, ",")
}

// Local reports whether every replica is on this host: a unix socket or
// loopback addresses only. Plaintext is allowed only then.
func (a Addresses) Local() bool {
	if a.Target != "" {
		if strings.HasPrefix(a.Target, "unix:") || strings.HasPrefix(a.Target, "unix-abstract:") {
			return true
		}
		t := a.Target
		for _, p := range []string{"dns:///", "passthrough:///"} {
			t = strings.TrimPrefix(t, p)
		}
		return tlsconfig.IsLoopback(t)
	}
	for _, e := range a.List {
		if !tlsconfig.IsLoopback(e) {
			return false
		}
	}
	return len(a.List) > 0
}

// Dial returns the gRPC target and the dial options that make a client of
// a: for a list, a resolver of its own and pick_first over the replicas in
// a shuffled order.
// The caller adds its credentials and other options.
func (a Addresses) Dial() (target string, opts []grpc.DialOption) {
	return a.dial(net.DefaultResolver.LookupHost)
}

// dial is Dial with the name lookup given (tests resolve names of their own).
func (a Addresses) dial(lookup func(ctx context.Context, host string) ([]string, error)) (target string, opts []grpc.DialOption) {
	if a.Target != "" {
		return a.Target, nil
	}
	return scheme + ":///" + strings.Join(a.List, ","), []grpc.DialOption{
		grpc.WithResolvers(&builder{lookup: lookup}),
		grpc.WithDefaultServiceConfig(serviceConfig),
	}
}

// builder builds a resolver for one connection.
type builder struct {
	lookup func(ctx context.Context, host string) ([]string, error)
}

func (b *builder) Scheme() string { return scheme }

func (b *builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	a, err := Parse(strings.TrimPrefix(target.Endpoint(), "/"))
	if err != nil {
		return nil, err
	}
	if a.Target != "" {
		return nil, fmt.Errorf("controladdr: %q is not a host:port list", a.Target)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &listResolver{list: a.List, lookup: b.lookup, cc: cc, ctx: ctx, cancel: cancel, now: make(chan struct{}, 1)}
	r.wg.Add(1)
	go r.run()
	r.ResolveNow(resolver.ResolveNowOptions{})
	return r, nil
}

// minReresolve spaces re-resolutions: gRPC asks for one on every failed
// connection attempt.
const minReresolve = time.Second

// listResolver resolves every entry of a list, at start and again when
// gRPC asks (a replica's connection failed: its name may point elsewhere
// now). It owns one goroutine, stopped by Close.
type listResolver struct {
	list   []string
	lookup func(ctx context.Context, host string) ([]string, error)
	cc     resolver.ClientConn
	ctx    context.Context
	cancel context.CancelFunc
	now    chan struct{}
	wg     sync.WaitGroup
}

func (r *listResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

func (r *listResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

func (r *listResolver) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.now:
		}
		addrs, err := r.resolve()
		if err != nil {
			r.cc.ReportError(err)
		} else {
			_ = r.cc.UpdateState(resolver.State{Addresses: addrs})
		}
		t := time.NewTimer(minReresolve)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// resolve returns every address of every entry. An entry whose name does
// not resolve is left out while others do; only when none resolves is
// it an error.
func (r *listResolver) resolve() ([]resolver.Address, error) {
	var (
		out  []resolver.Address
		errs []error
	)
	for _, e := range r.list {
		host, port, _ := net.SplitHostPort(e) // Parse checked it
		if net.ParseIP(host) != nil {
			out = append(out, resolver.Address{Addr: e, ServerName: host})
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		ips, err := r.lookup(ctx, host)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve control address %s: %w", e, err))
			continue
		}
		slices.Sort(ips)
		for _, ip := range ips {
			out = append(out, resolver.Address{Addr: net.JoinHostPort(ip, port), ServerName: host})
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
