// Package controltest starts a real control plane (control.Control on a
// real etcd, serving gRPC on loopback) inside a test and dials it, so tests
// of control itself, the producer client, the CLI and the distributor run
// against the real thing instead of a fake.
//
// Only tests import controltest.
package controltest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/proto/lehrpb"
)

// StartTimeout bounds how long StartControl waits for control to serve.
const StartTimeout = 60 * time.Second

// Server is a control plane running for one test.
type Server struct {
	// Control is the running daemon.
	Control *control.Control
	// Addr is its gRPC address, "127.0.0.1:port".
	Addr string
	// DataDir is its data directory (the embedded etcd lives in
	// DataDir/etcd); start another Server on it to test a restart.
	DataDir string
	// Conn is a plaintext client connection to Addr.
	Conn *grpc.ClientConn
	// Client is the Control API over Conn.
	Client lehrpb.ControlClient

	stopOnce sync.Once
	runErr   chan error
	tb       testing.TB
}

// StartControl starts control with opts and waits until it serves. Zero
// fields of opts get test-friendly values instead of the daemon defaults:
// DataDir a t.TempDir(), Listen and MetricsListen "127.0.0.1:0", Logger
// one that writes warnings and errors to t.Log, NoSync true (only
// when the embedded etcd is used). DevMode is always on: tests change
// things over plaintext loopback under asserted authors (a test of the
// secure default uses control.New). The server is stopped by t.Cleanup,
// or earlier by Stop.
//
// Conn is dialled with dialOpts, or plaintext if there are none (pass
// grpc.WithTransportCredentials for a control started with TLS).
func StartControl(t testing.TB, opts control.Options, dialOpts ...grpc.DialOption) *Server {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.MetricsListen == "" {
		opts.MetricsListen = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = Logger(t, slog.LevelWarn)
	}
	if len(opts.EtcdEndpoints) == 0 {
		opts.NoSync = true
	}
	opts.DevMode = true
	c, err := control.New(opts)
	if err != nil {
		t.Fatalf("control.New: %v", err)
	}
	s := &Server{Control: c, DataDir: opts.DataDir, runErr: make(chan error, 1), tb: t}
	go func() { s.runErr <- c.Run(context.Background()) }()
	t.Cleanup(s.Stop)
	select {
	case <-c.Ready():
	case err := <-s.runErr:
		s.runErr <- err
		t.Fatalf("control.Run ended before it served: %v", err)
	case <-time.After(StartTimeout):
		t.Fatalf("control did not serve within %v", StartTimeout)
	}
	s.Addr = c.Addr().String()
	s.Conn = Dial(t, s.Addr, dialOpts...)
	s.Client = lehrpb.NewControlClient(s.Conn)
	return s
}

// Stop closes the client connection, stops control and waits until it has
// stopped; it fails the test if Run returned an error. It is idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.Conn != nil {
			s.Conn.Close()
		}
		s.Control.Close()
		if err := <-s.runErr; err != nil {
			s.tb.Errorf("control.Run: %v", err)
		}
	})
}

// Dial returns a client connection to a control address, closed by
// t.Cleanup. It is plaintext unless dialOpts say otherwise; messages up to
// control.DefaultMaxMessageBytes are allowed both ways.
func Dial(t testing.TB, addr string, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	dialOpts = append(dialOpts, grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(control.DefaultMaxMessageBytes), grpc.MaxCallSendMsgSize(control.DefaultMaxMessageBytes)))
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		t.Fatalf("dial control at %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Logger returns a logger that writes records at or above level to t.Log
// while the test runs and drops them after it has finished.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	h := &tbHandler{tb: t, level: level, mu: new(sync.Mutex), done: new(bool)}
	t.Cleanup(func() {
		h.mu.Lock()
		*h.done = true
		h.mu.Unlock()
	})
	return slog.New(h)
}

// tbHandler is a slog.Handler writing to testing.TB.Log.
type tbHandler struct {
	tb     testing.TB
	level  slog.Level
	attrs  []slog.Attr
	groups string

	mu   *sync.Mutex
	done *bool
}

func (h *tbHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *tbHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s%s=%v", h.groups, a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s%s=%v", h.groups, a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !*h.done {
		h.tb.Log(b.String())
	}
	return nil
}

func (h *tbHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *tbHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.groups = h.groups + name + "."
	return &c
}
