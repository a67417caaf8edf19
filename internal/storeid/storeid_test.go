package storeid_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"lehr.dev/lehr/internal/storeid"
)

// serve runs a gRPC server with the health service on loopback, setting
// the store id header to id ("" for a server without the interceptors: an
// older control), and returns its address.
func serve(t *testing.T, id string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if id != "" {
		opts = append(opts, grpc.ChainUnaryInterceptor(storeid.ServerUnary(id)), grpc.ChainStreamInterceptor(storeid.ServerStream(id)))
	}
	gs := grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// client dials addr through pin's interceptors.
func client(t *testing.T, addr string, pin *storeid.Pin) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pin.Unary), grpc.WithChainStreamInterceptor(pin.Stream))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// A client pins the first store it hears from and refuses answers —
// replies, refusals and streams alike — from a server of another store,
// naming both stores, the server and the fix; servers without the header
// are taken as they are.
func TestPinRefusesAnotherStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var refused []*storeid.MismatchError
	pin := &storeid.Pin{OnMismatch: func(e *storeid.MismatchError) {
		mu.Lock()
		refused = append(refused, e)
		mu.Unlock()
	}}
	addrA, addrB := serve(t, "store-a"), serve(t, "store-b")
	a, b, old := client(t, addrA, pin), client(t, addrB, pin), client(t, serve(t, ""), pin)

	if _, err := old.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check on a server without the header: %v", err)
	}
	if got := pin.ID(); got != "" {
		t.Fatalf("pinned %q after a response without the header; want nothing pinned", got)
	}
	if _, err := a.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("first Check: %v", err)
	}
	if got := pin.ID(); got != "store-a" {
		t.Fatalf("pinned %q, want store-a (the first store seen)", got)
	}
	// A refusal of the pinned store passes as it is.
	if _, err := a.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service on store-a: %v, want NotFound", err)
	}

	resp, err := b.Check(ctx, &healthpb.HealthCheckRequest{})
	var merr *storeid.MismatchError
	if !errors.As(err, &merr) || resp != nil {
		t.Fatalf("Check on store-b: %v, %v; want a *MismatchError and no answer", resp, err)
	}
	if merr.Pinned != "store-a" || merr.Got != "store-b" || merr.Replica != addrB || merr.Method != "/grpc.health.v1.Health/Check" {
		t.Errorf("mismatch %+v; want pinned store-a, got store-b from %s", merr, addrB)
	}
	if status.Code(err) != codes.Unavailable || !errors.Is(err, storeid.ErrMismatch) {
		t.Errorf("code %v, errors.Is(ErrMismatch) %v; want Unavailable (retry, keep what you have) and true", status.Code(err), errors.Is(err, storeid.ErrMismatch))
	}
	for _, want := range []string{"store-a", "store-b", addrB, "--etcd-endpoints", "LEHR_ETCD_ENDPOINTS", "lehr control status"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Refused even when store-b refuses the call itself.
	if _, err := b.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); !errors.Is(err, storeid.ErrMismatch) {
		t.Errorf("refused Check on store-b: %v, want the mismatch", err)
	}

	// Streams: store-a's first message arrives; store-b's never does.
	wa, err := a.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := wa.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch on store-a: %v, %v; want SERVING", m, err)
	}
	wb, err := b.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := wb.Recv(); !errors.As(err, &merr) || m != nil {
		t.Errorf("Watch on store-b: %v, %v; want the mismatch and no message", m, err)
	}
	if _, err := wb.Header(); !errors.Is(err, storeid.ErrMismatch) {
		t.Errorf("Watch on store-b: Header: %v, want the mismatch", err)
	}
	if m, err := wb.Recv(); !errors.Is(err, storeid.ErrMismatch) {
		t.Errorf("Watch on store-b, again: %v, %v; want the mismatch", m, err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 3 {
		t.Errorf("OnMismatch called %d times, want 3 (two calls and a stream)", len(refused))
	}
	if got := pin.ID(); got != "store-a" {
		t.Errorf("pinned %q after the refusals, want store-a still", got)
	}
}
