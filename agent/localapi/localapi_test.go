package localapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/agent/leases"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// tableBackend is a Backend over a real lease table and a fixed set of
// namespaces; it counts the calls that reach it.
type tableBackend struct {
	tab *leases.Table

	mu      sync.Mutex
	calls   int
	ns      map[string]*lehrpb.AgentGetResponse
	corrupt map[string]bool
	reports []*lehrpb.ReportApplyRequest
}

func (b *tableBackend) count() {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
}

func (b *tableBackend) Calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

func (b *tableBackend) Subscribe(_ context.Context, req *lehrpb.SubscribeRequest) (*lehrpb.SubscribeResponse, error) {
	b.count()
	l, _, err := b.tab.Subscribe(req.GetNamespace(), req.GetClientId(), req.GetService(), time.Duration(req.GetTtlSeconds())*time.Second)
	if err != nil {
		return nil, err
	}
	return &lehrpb.SubscribeResponse{LeaseId: l.ID, TtlSeconds: uint32(l.TTL / time.Second), Path: "/files/" + req.GetNamespace()}, nil
}

func (b *tableBackend) KeepAlive(_ context.Context, id string) (*lehrpb.KeepAliveResponse, error) {
	b.count()
	l, err := b.tab.KeepAlive(id)
	if err != nil {
		return nil, err
	}
	return &lehrpb.KeepAliveResponse{TtlSeconds: uint32(l.TTL / time.Second)}, nil
}

func (b *tableBackend) Unsubscribe(_ context.Context, id string) error {
	b.count()
	_, err := b.tab.Unsubscribe(id)
	return err
}

func (b *tableBackend) Get(_ context.Context, req *lehrpb.AgentGetRequest) (*lehrpb.AgentGetResponse, error) {
	b.count()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.corrupt[req.GetNamespace()] {
		return nil, fmt.Errorf("get %s: cached copy corrupt, refetching: %w", req.GetNamespace(), ErrUnavailable)
	}
	r, ok := b.ns[req.GetNamespace()]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", req.GetNamespace(), ErrNotFound)
	}
	return r, nil
}

func (b *tableBackend) Status(context.Context) (*lehrpb.StatusResponse, error) {
	b.count()
	return &lehrpb.StatusResponse{HostId: "h1", Zone: "z1"}, nil
}

func (b *tableBackend) ReportApply(_ context.Context, req *lehrpb.ReportApplyRequest) error {
	b.count()
	if _, ok := b.tab.Lookup(req.GetLeaseId()); !ok {
		return fmt.Errorf("report for lease %q: %w", req.GetLeaseId(), leases.ErrNotFound)
	}
	b.mu.Lock()
	b.reports = append(b.reports, req)
	b.mu.Unlock()
	return nil
}

func (b *tableBackend) Signals(context.Context, string) (*lehrpb.NamespaceSignals, error) {
	b.count()
	return nil, nil
}

func (b *tableBackend) ReportPreview(context.Context, *lehrpb.ReportPreviewRequest) error {
	b.count()
	return nil
}

// shortDir returns a temporary directory short enough for a unix socket
// path (108 bytes on Linux), removed at the end of the test.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "la")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func startServer(t *testing.T, sock string) (*Server, *tableBackend, lehrpb.AgentClient) {
	t.Helper()
	b := &tableBackend{
		tab: leases.New(leases.Options{}),
		ns: map[string]*lehrpb.AgentGetResponse{
			"d/x": {Version: &lehrpb.VersionInfo{Namespace: "d/x", Seq: 3}, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
				Properties: []*lehrpb.Property{{Key: "a", Value: []byte("1")}}},
		},
		corrupt: map[string]bool{"d/bad": true},
	}
	s, err := New(Options{Socket: sock, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return s, b, lehrpb.NewAgentClient(cc)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestLeaseRoundTrip(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	_, b, c := startServer(t, sock)

	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != SocketMode {
		t.Errorf("socket mode = %v, want %v", got, SocketMode)
	}

	sub, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/x", ClientId: "svc@1", TtlSeconds: 12})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if sub.GetLeaseId() == "" || sub.GetTtlSeconds() != 12 || sub.GetPath() != "/files/d/x" {
		t.Errorf("Subscribe = %v, want a lease id, ttl 12, path /files/d/x", sub)
	}
	if !b.tab.Wanted("d/x") {
		t.Errorf("d/x not wanted after Subscribe")
	}
	ka, err := c.KeepAlive(ctx(t), &lehrpb.KeepAliveRequest{LeaseId: sub.GetLeaseId()})
	if err != nil || ka.GetTtlSeconds() != 12 {
		t.Fatalf("KeepAlive = %v, %v; want ttl 12", ka, err)
	}
	if _, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: sub.GetLeaseId(), Namespace: "d/x", Version: 3, Ok: true}); err != nil {
		t.Fatalf("ReportApply: %v", err)
	}
	if _, err := c.Unsubscribe(ctx(t), &lehrpb.UnsubscribeRequest{LeaseId: sub.GetLeaseId()}); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	_, err = c.KeepAlive(ctx(t), &lehrpb.KeepAliveRequest{LeaseId: sub.GetLeaseId()})
	if got := apierror.FromError(err); got == nil || got.Code != codes.NotFound || got.Reason != apierror.ReasonNotFound {
		t.Errorf("KeepAlive after Unsubscribe: err = %v, want NOT_FOUND", err)
	}
	_, err = c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: sub.GetLeaseId(), Namespace: "d/x", Version: 3, Ok: true})
	if !errors.Is(apierror.FromError(err), apierror.ErrNotFound) {
		t.Errorf("ReportApply on an ended lease: err = %v, want NOT_FOUND", err)
	}
}

func TestGetAndStatus(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	_, b, c := startServer(t, sock)
	got, err := c.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: "d/x"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(b.ns["d/x"], got, protocmp.Transform()); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	st, err := c.Status(ctx(t), &lehrpb.StatusRequest{})
	if err != nil || st.GetHostId() != "h1" || st.GetZone() != "z1" {
		t.Errorf("Status = %v, %v; want host h1 zone z1", st, err)
	}
	tests := []struct {
		ns       string
		wantCode codes.Code
	}{
		{"d/missing", codes.NotFound},
		{"d/bad", codes.Unavailable},
	}
	for _, tc := range tests {
		_, err := c.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: tc.ns})
		if got := apierror.FromError(err); got == nil || got.Code != tc.wantCode {
			t.Errorf("Get(%s): err = %v, want code %v", tc.ns, err, tc.wantCode)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	_, b, c := startServer(t, sock)
	long := string(make([]byte, 300))
	tests := []struct {
		name      string
		call      func() error
		wantField string
	}{
		{"subscribe without namespace", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{})
			return err
		}, "namespace"},
		{"subscribe bad namespace", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "../etc/passwd"})
			return err
		}, "namespace"},
		{"subscribe long client id", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/x", ClientId: long})
			return err
		}, "client_id"},
		{"subscribe bad service", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/x", Service: "Check Out"})
			return err
		}, "service"},
		{"subscribe huge ttl", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/x", TtlSeconds: 1 << 30})
			return err
		}, "ttl_seconds"},
		{"keepalive without id", func() error {
			_, err := c.KeepAlive(ctx(t), &lehrpb.KeepAliveRequest{})
			return err
		}, "lease_id"},
		{"unsubscribe long id", func() error {
			_, err := c.Unsubscribe(ctx(t), &lehrpb.UnsubscribeRequest{LeaseId: long})
			return err
		}, "lease_id"},
		{"get bad key", func() error {
			_, err := c.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: "d/x", Keys: []string{"ok", "../up"}})
			return err
		}, "keys[1]"},
		{"report without version", func() error {
			_, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: "l", Namespace: "d/x"})
			return err
		}, "version"},
		{"report ok with error", func() error {
			_, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: "l", Namespace: "d/x", Version: 1, Ok: true, Error: "boom"})
			return err
		}, "error"},
		{"subscribe remote metrics url", func() error {
			_, err := c.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/x", MetricsUrl: "http://10.1.2.3:9100/metrics"})
			return err
		}, "metrics_url"},
		{"report negative callback time", func() error {
			_, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: "l", Namespace: "d/x", Version: 1, CallbackSeconds: -1})
			return err
		}, "callback_seconds"},
		{"report ok but panicked", func() error {
			_, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: "l", Namespace: "d/x", Version: 1, Ok: true, Panicked: true})
			return err
		}, "panicked"},
		{"signals bad namespace", func() error {
			_, err := c.Signals(ctx(t), &lehrpb.AgentSignalsRequest{Namespace: "nope"})
			return err
		}, "namespace"},
		{"report bad namespace", func() error {
			_, err := c.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: "l", Namespace: "D/X", Version: 1})
			return err
		}, "namespace"},
		{"preview bad experiment id", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", Counts: []*lehrpb.HostPreviewCounts{
				{Experiment: "Bad/Id", Counts: &lehrpb.PreviewCounts{LiveEtag: "v1", ExperimentEtag: "e"}}}})
			return err
		}, "counts[0].experiment"},
		{"preview without counts", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", Counts: []*lehrpb.HostPreviewCounts{{Experiment: "e1"}}})
			return err
		}, "counts[0].counts"},
		{"preview without an experiment etag", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", Counts: []*lehrpb.HostPreviewCounts{
				{Experiment: "e1", Counts: &lehrpb.PreviewCounts{LiveEtag: "v1"}}}})
			return err
		}, "counts[0].counts.experiment_etag"},
		{"preview with more denials than decisions", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", LiveDecisions: 3, LiveDenies: 4})
			return err
		}, "live_denies"},
		{"preview with an experiment id of the comparison's shape", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", Counts: []*lehrpb.HostPreviewCounts{
				{Experiment: "_other", Counts: &lehrpb.PreviewCounts{LiveEtag: "v1", ExperimentEtag: "e"}}}})
			return err
		}, "counts[0].experiment"},
		{"preview with more changed decisions than decisions", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{LeaseId: "l", Namespace: "d/x", LiveDecisions: 3, LiveChanged: proto.Uint64(4)})
			return err
		}, "live_changed"},
		{"preview without a lease", func() error {
			_, err := c.ReportPreview(ctx(t), &lehrpb.ReportPreviewRequest{Namespace: "d/x"})
			return err
		}, "lease_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			got := apierror.FromError(err)
			if got == nil || got.Code != codes.InvalidArgument || got.Field != tc.wantField {
				t.Errorf("err = %v, want INVALID_ARGUMENT on field %q", err, tc.wantField)
			}
			if got != nil && got.Message == "" {
				t.Errorf("err %v has no message", err)
			}
		})
	}
	if n := b.Calls(); n != 0 {
		t.Errorf("backend called %d times for invalid requests, want 0", n)
	}
	if got := b.tab.Len(); got != 0 {
		t.Errorf("lease table holds %d leases after invalid requests, want 0", got)
	}
}

func TestSocketLifecycle(t *testing.T) {
	dir := shortDir(t)

	t.Run("stale socket is replaced", func(t *testing.T) {
		sock := filepath.Join(dir, "stale.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close() // the file stays, nobody listens: a dead agent's socket
		if _, err := os.Lstat(sock); err != nil {
			t.Fatalf("stale socket missing before the test: %v", err)
		}
		s, _, c := startServer(t, sock)
		if _, err := c.Status(ctx(t), &lehrpb.StatusRequest{}); err != nil {
			t.Fatalf("Status over the replaced socket: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket still present after Close: %v", err)
		}
	})

	t.Run("live socket is not stolen", func(t *testing.T) {
		sock := filepath.Join(dir, "live.sock")
		_, _, c := startServer(t, sock)
		s2, err := New(Options{Socket: sock, Backend: &tableBackend{tab: leases.New(leases.Options{})}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Start(); !errors.Is(err, ErrInUse) {
			t.Errorf("second Start: err = %v, want ErrInUse", err)
		}
		if _, err := c.Status(ctx(t), &lehrpb.StatusRequest{}); err != nil {
			t.Errorf("first server stopped answering: %v", err)
		}
	})

	t.Run("regular file is not removed", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := New(Options{Socket: path, Backend: &tableBackend{tab: leases.New(leases.Options{})}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err == nil {
			s.Close()
			t.Fatalf("Start over a regular file succeeded")
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
			t.Errorf("regular file changed: %q, %v", b, err)
		}
	})

	t.Run("options are required", func(t *testing.T) {
		if _, err := New(Options{Backend: &tableBackend{}}); err == nil {
			t.Errorf("New without Socket succeeded")
		}
		if _, err := New(Options{Socket: filepath.Join(dir, "x.sock")}); err == nil {
			t.Errorf("New without Backend succeeded")
		}
	})
}

// The local API bounds what one local process can hold: a lease beyond the
// per-client cap is RESOURCE_EXHAUSTED naming the field and the limit,
// connections that never speak are cut after ConnectTimeout, idle ones
// after IdleTimeout, and at most MaxConnections are served at once (issue
// 8, defect 14: one client held 5,000 subscriptions to nonexistent
// namespaces and 1,000 idle connections with no cutoff).
func TestLocalClientsAreBounded(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	b := &tableBackend{tab: leases.New(leases.Options{MaxLeasesPerClient: 2})}
	s, err := New(Options{Socket: sock, Backend: b, MaxConnections: 3, ConnectTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	api := lehrpb.NewAgentClient(cc)
	for _, ns := range []string{"d/a", "d/b"} {
		if _, err := api.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "greedy"}); err != nil {
			t.Fatalf("Subscribe %s: %v", ns, err)
		}
	}
	_, err = api.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: "d/c", ClientId: "greedy"})
	if e := apierror.FromError(err); e.Code != codes.ResourceExhausted || e.Reason != apierror.ReasonTooManyLeases || e.Field != "client_id" || e.Limit != "2 leases" {
		t.Errorf("third lease of one client = %v; want RESOURCE_EXHAUSTED TOO_MANY_LEASES on client_id, limit 2 leases", err)
	}

	// Idle: the connection that did its calls is closed by the server.
	wait.For(t, "the idle connection to be closed by the agent", func() bool { return cc.GetState() == connectivity.Idle })

	// Silent: three raw connections that never speak fill the server, and
	// are cut after ConnectTimeout; a real client is served then.
	var raws []net.Conn
	for range 3 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		raws = append(raws, c)
	}
	for _, c := range raws {
		c.SetReadDeadline(time.Now().Add(wait.Timeout))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			// The server's HTTP/2 preface: keep reading to EOF.
			_, err = io.Copy(io.Discard, c)
			if err != nil {
				t.Errorf("silent connection: %v, want it closed by the server", err)
			}
		}
	}
	if _, err := api.Status(ctx(t), &lehrpb.StatusRequest{}); err != nil {
		t.Errorf("Status after the silent connections were cut: %v", err)
	}
}
