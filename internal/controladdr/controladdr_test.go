package controladdr

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Addresses
		local   bool
		wantErr string
	}{
		{in: "127.0.0.1:7400", want: Addresses{List: []string{"127.0.0.1:7400"}}, local: true},
		{in: "127.3.4.5:1", want: Addresses{List: []string{"127.3.4.5:1"}}, local: true},
		{in: "localhost:7400", want: Addresses{List: []string{"localhost:7400"}}, local: true},
		{in: "[::1]:7400", want: Addresses{List: []string{"[::1]:7400"}}, local: true},
		{in: "127.0.0.1:7400, 127.0.0.1:7401,127.0.0.1:7400", want: Addresses{List: []string{"127.0.0.1:7400", "127.0.0.1:7401"}}, local: true},
		{in: "127.0.0.1:7400,10.0.0.1:7400", want: Addresses{List: []string{"127.0.0.1:7400", "10.0.0.1:7400"}}},
		{in: "control-a.example.net:7400,control-b.example.net:7400", want: Addresses{List: []string{"control-a.example.net:7400", "control-b.example.net:7400"}}},
		{in: "10.0.0.1:7400", want: Addresses{List: []string{"10.0.0.1:7400"}}},
		{in: "0.0.0.0:7400", want: Addresses{List: []string{"0.0.0.0:7400"}}},
		{in: "unix:///run/lehr.sock", want: Addresses{Target: "unix:///run/lehr.sock"}, local: true},
		{in: "dns:///127.0.0.1:7400", want: Addresses{Target: "dns:///127.0.0.1:7400"}, local: true},
		{in: "dns:///control.example.net:7400", want: Addresses{Target: "dns:///control.example.net:7400"}},
		{in: "", wantErr: "empty address"},
		{in: "127.0.0.1", wantErr: `"127.0.0.1": want host:port`},
		{in: ":7400", wantErr: `":7400": want host:port`},
		{in: "127.0.0.1:7400,nohost", wantErr: `entry 2 "nohost": want host:port`},
		{in: "127.0.0.1:7400,", wantErr: `entry 2 "": want host:port`},
		{in: "unix:///a.sock,127.0.0.1:1", wantErr: "a list takes host:port entries only"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tt.in, diff)
		}
		if got.Local() != tt.local {
			t.Errorf("Parse(%q).Local() = %v, want %v", tt.in, got.Local(), tt.local)
		}
	}
}

// replica is a real gRPC server on loopback answering health checks.
type replica struct {
	addr string
	srv  *grpc.Server
}

func startReplica(t *testing.T, addr string) *replica {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return &replica{addr: l.Addr().String(), srv: srv}
}

// answeredBy makes a call and returns the address that answered. As every
// Lehr client does, it retries a call that failed UNAVAILABLE (one sent
// on a connection the server was closing) — once more at most here.
func answeredBy(ctx context.Context, cc *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	for range 2 {
		var p peer.Peer
		if _, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err == nil {
			return p.Addr.String(), nil
		}
		if status.Code(err) != codes.Unavailable {
			break
		}
	}
	return "", err
}

func dial(t *testing.T, a Addresses, lookup func(context.Context, string) ([]string, error)) *grpc.ClientConn {
	t.Helper()
	target, opts := a.dial(lookup)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestFailover stops the replica that answered and checks that the next
// call, made at once, is answered by the other: a client of a list never
// waits for a lost replica to come back. Then the first comes back and the
// second goes: the client uses the first again at once, with no
// reconnection backoff in the way.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	a, b := startReplica(t, "127.0.0.1:0"), startReplica(t, "127.0.0.1:0")
	addrs, err := Parse(a.addr + "," + b.addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, addrs, net.DefaultResolver.LookupHost)
	first, err := answeredBy(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	up, down := b, a
	if first == b.addr {
		up, down = a, b
	}
	down.srv.Stop()
	for i := range 10 {
		who, err := answeredBy(ctx, cc)
		if err != nil {
			t.Fatalf("call %d after %s stopped: %v", i, down.addr, err)
		}
		if who != up.addr {
			t.Fatalf("call %d after %s stopped was answered by %s", i, down.addr, who)
		}
	}
	back := startReplica(t, down.addr)
	up.srv.Stop()
	who, err := answeredBy(ctx, cc)
	if err != nil || who != back.addr {
		t.Fatalf("after %s came back and %s stopped: answered by %q, %v; want %s", down.addr, up.addr, who, err, back.addr)
	}
}

// TestClientsSpreadOverReplicas: each client takes the list in an order of
// its own, so many clients of one list do not all land on its first entry.
func TestClientsSpreadOverReplicas(t *testing.T) {
	ctx := context.Background()
	a, b := startReplica(t, "127.0.0.1:0"), startReplica(t, "127.0.0.1:0")
	addrs, err := Parse(a.addr + "," + b.addr)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 40 {
		who, err := answeredBy(ctx, dial(t, addrs, net.DefaultResolver.LookupHost))
		if err != nil {
			t.Fatal(err)
		}
		seen[who]++
	}
	// Each client picks either with probability 1/2: both being used by
	// 40 clients fails to happen once in 2^39.
	if seen[a.addr] == 0 || seen[b.addr] == 0 {
		t.Errorf("40 clients connected to %v; want both replicas used", seen)
	}
}

// TestNameResolvingToSeveralReplicas lists one name whose lookup returns
// two addresses (as a DNS name for every replica would) and checks that
// the client fails over between them, and that TLS would verify each
// against the name.
func TestNameResolvingToSeveralReplicas(t *testing.T) {
	ctx := context.Background()
	a := startReplica(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(a.addr)
	b := startReplica(t, "127.0.0.2:"+port)
	lookups := make(chan string, 100)
	lookup := func(_ context.Context, host string) ([]string, error) {
		lookups <- host
		if host != "control.lehr.test" {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []string{"127.0.0.2", "127.0.0.1"}, nil
	}
	addrs, err := Parse("control.lehr.test:" + port + ",missing.lehr.test:" + port)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, addrs, lookup)
	first, err := answeredBy(ctx, cc)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	up, down := b, a
	if first == b.addr {
		up, down = a, b
	}
	down.srv.Stop()
	if who, err := answeredBy(ctx, cc); err != nil || who != up.addr {
		t.Errorf("after %s (one of control.lehr.test's addresses) stopped: answered by %q, %v; want the other, %s", down.addr, who, err, up.addr)
	}

	got, err := (&listResolver{list: addrs.List, lookup: lookup, ctx: ctx}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.ServerName != "control.lehr.test" {
			t.Errorf("address %s verifies as %q, want control.lehr.test", g.Addr, g.ServerName)
		}
	}
	if _, err := (&listResolver{list: []string{"missing.lehr.test:1"}, lookup: lookup, ctx: ctx}).resolve(); err == nil || !strings.Contains(err.Error(), "missing.lehr.test:1") {
		t.Errorf("resolving only unknown names: err %v, want one naming the entry", err)
	}
}
