// Package localapi serves the agent's local gRPC API (service lehr.v1.Agent,
// proto/lehr/v1/agent.proto) on a unix socket to consumers on the same host.
//
// The package owns the socket (stale-file removal, permissions, cleanup),
// validates every request (a bad field gets an INVALID_ARGUMENT naming it and
// changes nothing) and maps errors to gRPC statuses through
// internal/apierror. What each call means is the Backend's business; the
// agent implements it.
//
// Imported by agent.
package localapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"lehr.dev/lehr/agent/collect"
	"lehr.dev/lehr/agent/leases"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// Limits on request fields.
const (
	MaxClientIDBytes    = 256
	MaxLeaseIDBytes     = 128
	MaxReportErrorBytes = 4096
	MaxKeys             = 10000
)

// SocketMode is the permission of the socket file: owner and group may
// connect, others may not.
const SocketMode fs.FileMode = 0o660

// ErrNotFound is wrapped by Backend errors about a namespace the agent does
// not hold; it becomes NOT_FOUND.
var ErrNotFound = errors.New("localapi: not found")

// ErrUnavailable is wrapped by Backend errors about content the agent cannot
// serve right now (e.g. its cached copy failed verification and a fresh
// one is on its way); it becomes UNAVAILABLE, which callers may retry.
var ErrUnavailable = errors.New("localapi: temporarily unavailable")

// ErrInUse is returned by Start when another process serves the socket.
var ErrInUse = errors.New("localapi: socket in use by a live server")

// Backend gives the API its meaning. Requests reach it validated: names
// follow internal/names, lease ids are non-empty. Errors wrapping
// leases.ErrNotFound or ErrNotFound become NOT_FOUND, ErrUnavailable
// UNAVAILABLE, an *apierror.Error keeps its code, anything else is INTERNAL.
type Backend interface {
	Subscribe(ctx context.Context, req *lehrpb.SubscribeRequest) (*lehrpb.SubscribeResponse, error)
	KeepAlive(ctx context.Context, leaseID string) (*lehrpb.KeepAliveResponse, error)
	Unsubscribe(ctx context.Context, leaseID string) error
	Get(ctx context.Context, req *lehrpb.AgentGetRequest) (*lehrpb.AgentGetResponse, error)
	Status(ctx context.Context) (*lehrpb.StatusResponse, error)
	ReportApply(ctx context.Context, req *lehrpb.ReportApplyRequest) error
	// Signals returns the signals kept of a namespace, nil for none.
	Signals(ctx context.Context, ns string) (*lehrpb.NamespaceSignals, error)
	// ReportPreview adds a consumer's policy-preview counts.
	ReportPreview(ctx context.Context, req *lehrpb.ReportPreviewRequest) error
}

// Bounds of a ReportPreview request.
const (
	MaxPreviewCounts    = 64
	MaxPreviewEtagBytes = 64
)

// Options configure a Server.
type Options struct {
	// Socket is the unix socket path. Required. Its directory is created
	// (0755) if missing.
	Socket string
	// Backend answers the calls. Required.
	Backend Backend
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Gid, when not 0, is the group the socket is given to (the consumers'
	// group): the socket is mode 0660, so its group may connect. 0 keeps
	// the group it is created with.
	Gid int
	// ShutdownTimeout is how long Close lets in-flight calls finish before
	// cutting them; zero means DefaultShutdownTimeout (5 s).
	ShutdownTimeout time.Duration

	// MaxConnections bounds the connections served at once; further
	// clients wait in the socket's backlog until one closes. Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// ConnectTimeout is how long a new connection may take to speak
	// HTTP/2 before it is closed, so silent connections cannot hold the
	// slots. Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// IdleTimeout closes a connection with no call in flight for this
	// long; gRPC clients reconnect transparently on their next call. Zero
	// means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Defaults for Options.
const (
	DefaultShutdownTimeout = 5 * time.Second
	DefaultMaxConnections  = 1024
	DefaultConnectTimeout  = 10 * time.Second
	DefaultIdleTimeout     = 5 * time.Minute
)

// Server is the local API server.
type Server struct {
	opts Options
	log  *slog.Logger
	grpc *grpc.Server
	wg   sync.WaitGroup // the serving goroutine

	mu      sync.Mutex
	started bool
	closed  bool
	lis     net.Listener
	err     error // Serve's error, if it failed
}

// New returns a server; Start begins serving.
func New(opts Options) (*Server, error) {
	if opts.Socket == "" {
		return nil, errors.New("localapi: Options.Socket is required")
	}
	if opts.Backend == nil {
		return nil, errors.New("localapi: Options.Backend is required")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.grpc = grpc.NewServer(
		grpc.ConnectionTimeout(opts.ConnectTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: opts.IdleTimeout}),
	)
	lehrpb.RegisterAgentServer(s.grpc, &service{b: opts.Backend})
	// Server reflection (grpc.reflection.v1 and v1alpha), so grpcurl and
	// other gRPC tools can call the socket without the .proto files. It
	// needs no rule of its own: whoever may open the socket (its mode and
	// group) may call every method, and describing them changes nothing.
	reflection.Register(s.grpc)
	return s, nil
}

// Start listens on the socket and serves in the background. A socket file
// left by a dead agent is removed; a socket some live process still serves
// is left alone and Start fails with ErrInUse; any other file at the path
// is an error.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("localapi: server closed")
	}
	if s.started {
		return errors.New("localapi: already started")
	}
	path := s.opts.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("localapi: create socket directory: %w", err)
	}
	if err := removeStale(path); err != nil {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("localapi: listen on %s: %w", path, err)
	}
	// The listener must not unlink the path on Close if a successor already
	// replaced it; we remove it ourselves in Close.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, SocketMode); err != nil {
		lis.Close()
		os.Remove(path)
		return fmt.Errorf("localapi: chmod socket %s: %w", path, err)
	}
	if s.opts.Gid != 0 {
		if err := os.Chown(path, -1, s.opts.Gid); err != nil {
			lis.Close()
			os.Remove(path)
			return fmt.Errorf("localapi: give socket %s to group %d: %w", path, s.opts.Gid, err)
		}
	}
	s.lis = lis
	s.started = true
	s.wg.Go(func() {
		err := s.grpc.Serve(netutil.LimitListener(lis, s.opts.MaxConnections))
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("local API stopped", "socket", path, "err", err)
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	})
	s.log.Info("local API serving", "socket", path)
	return nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localapi: stat socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("localapi: %s exists and is not a socket (mode %v); refusing to remove it", path, fi.Mode())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("localapi: %s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localapi: remove stale socket %s: %w", path, err)
	}
	return nil
}

// Addr returns the socket path.
func (s *Server) Addr() string { return s.opts.Socket }

// Close stops the server: in-flight calls get Options.ShutdownTimeout to
// finish, then are cut. It removes the socket file, waits for the serving
// goroutine and returns the error serving failed with, if any. It is
// idempotent; a later call waits for the first.
func (s *Server) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	started := s.started
	s.mu.Unlock()
	if first && started {
		var stop sync.WaitGroup
		stopped := make(chan struct{})
		stop.Go(func() {
			s.grpc.GracefulStop()
			close(stopped)
		})
		t := time.NewTimer(s.opts.ShutdownTimeout)
		select {
		case <-stopped:
		case <-t.C:
			s.grpc.Stop()
		}
		t.Stop()
		stop.Wait()
		s.wg.Wait()
		if err := os.Remove(s.opts.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("localapi: remove socket: %w", err)
		}
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// service adapts Backend to lehrpb.AgentServer, validating requests.
type service struct {
	lehrpb.UnimplementedAgentServer
	b Backend
}

func invalidArg(field, format string, args ...any) error {
	return apierror.New(codes.InvalidArgument, apierror.ReasonInvalidArgument, field, format, args...)
}

func checkNamespace(field, ns string) error {
	if ns == "" {
		return apierror.New(codes.InvalidArgument, apierror.ReasonInvalidName, field,
			`namespace is required: want "domain/name"`)
	}
	if _, _, err := names.Namespace(ns); err != nil {
		return apierror.Wrap(err, codes.InvalidArgument, apierror.ReasonInvalidName, field)
	}
	return nil
}

func checkLeaseID(id string) error {
	switch {
	case id == "":
		return invalidArg("lease_id", "lease_id is required: use the id Subscribe returned")
	case len(id) > MaxLeaseIDBytes:
		return invalidArg("lease_id", "lease_id is %d bytes, at most %d allowed", len(id), MaxLeaseIDBytes)
	}
	return nil
}

// toStatus maps a Backend error to an API error.
func toStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	var ae *apierror.Error
	var tm *leases.TooManyError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &tm):
		field := "client_id"
		if tm.Client == "" {
			field = ""
		}
		return apierror.New(codes.ResourceExhausted, apierror.ReasonTooManyLeases, field, "%v", err).
			WithLimit("%d leases", tm.Limit).WithCause(err)
	case errors.Is(err, leases.ErrNotFound):
		return apierror.New(codes.NotFound, apierror.ReasonNotFound, "lease_id",
			"%v: subscribe again", err).WithCause(err)
	case errors.Is(err, ErrNotFound):
		return apierror.Wrap(err, codes.NotFound, apierror.ReasonNotFound, "namespace")
	case errors.Is(err, ErrUnavailable):
		return apierror.Wrap(err, codes.Unavailable, apierror.ReasonUnavailable, "")
	case errors.Is(err, context.Canceled):
		return apierror.New(codes.Canceled, "", "", "%s: %v", op, err).WithCause(err)
	case errors.Is(err, context.DeadlineExceeded):
		return apierror.New(codes.DeadlineExceeded, "", "", "%s: %v", op, err).WithCause(err)
	}
	return apierror.New(codes.Internal, apierror.ReasonInternal, "", "%s: %v", op, err).WithCause(err)
}

func (s *service) Subscribe(ctx context.Context, req *lehrpb.SubscribeRequest) (*lehrpb.SubscribeResponse, error) {
	if err := checkNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if n := len(req.GetClientId()); n > MaxClientIDBytes {
		return nil, invalidArg("client_id", "client_id is %d bytes, at most %d allowed", n, MaxClientIDBytes)
	}
	if sv := req.GetService(); sv != "" {
		if err := names.Service(sv); err != nil {
			return nil, invalidArg("service", "%v (or \"\" for none)", err)
		}
	}
	if max := uint32(leases.DefaultMaxTTL / time.Second); req.GetTtlSeconds() > max {
		return nil, invalidArg("ttl_seconds", "ttl_seconds is %d, at most %d allowed (0 means the agent default)",
			req.GetTtlSeconds(), max)
	}
	if u := req.GetMetricsUrl(); u != "" {
		if err := collect.CheckURL(u); err != nil {
			return nil, invalidArg("metrics_url", "%v", err)
		}
	}
	resp, err := s.b.Subscribe(ctx, req)
	return resp, toStatus("subscribe", err)
}

func (s *service) KeepAlive(ctx context.Context, req *lehrpb.KeepAliveRequest) (*lehrpb.KeepAliveResponse, error) {
	if err := checkLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	resp, err := s.b.KeepAlive(ctx, req.GetLeaseId())
	if err != nil {
		return nil, toStatus("keep alive", err)
	}
	return resp, nil
}

func (s *service) Unsubscribe(ctx context.Context, req *lehrpb.UnsubscribeRequest) (*lehrpb.UnsubscribeResponse, error) {
	if err := checkLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if err := s.b.Unsubscribe(ctx, req.GetLeaseId()); err != nil {
		return nil, toStatus("unsubscribe", err)
	}
	return &lehrpb.UnsubscribeResponse{}, nil
}

func (s *service) Get(ctx context.Context, req *lehrpb.AgentGetRequest) (*lehrpb.AgentGetResponse, error) {
	if err := checkNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if n := len(req.GetKeys()); n > MaxKeys {
		return nil, invalidArg("keys", "%d keys requested, at most %d allowed", n, MaxKeys)
	}
	for i, k := range req.GetKeys() {
		if err := names.Key(k); err != nil {
			return nil, apierror.Wrap(err, codes.InvalidArgument, apierror.ReasonInvalidName, fmt.Sprintf("keys[%d]", i))
		}
	}
	resp, err := s.b.Get(ctx, req)
	return resp, toStatus("get", err)
}

func (s *service) Status(ctx context.Context, _ *lehrpb.StatusRequest) (*lehrpb.StatusResponse, error) {
	resp, err := s.b.Status(ctx)
	return resp, toStatus("status", err)
}

func (s *service) ReportApply(ctx context.Context, req *lehrpb.ReportApplyRequest) (*lehrpb.ReportApplyResponse, error) {
	if err := checkLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if err := checkNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if req.GetVersion() == 0 {
		return nil, invalidArg("version", "version is required: the version the consumer applied or rejected (>= 1)")
	}
	if n := len(req.GetError()); n > MaxReportErrorBytes {
		return nil, invalidArg("error", "error is %d bytes, at most %d allowed", n, MaxReportErrorBytes)
	}
	if req.GetOk() && req.GetError() != "" {
		return nil, invalidArg("error", "error must be empty when ok is true")
	}
	if d := req.GetCallbackSeconds(); !(d >= 0) || math.IsInf(d, 0) {
		return nil, invalidArg("callback_seconds", "callback_seconds is %v; want a finite number of seconds >= 0", d)
	}
	if req.GetOk() && req.GetPanicked() {
		return nil, invalidArg("panicked", "a callback that panicked did not apply: ok must be false")
	}
	if err := s.b.ReportApply(ctx, req); err != nil {
		return nil, toStatus("report apply", err)
	}
	return &lehrpb.ReportApplyResponse{}, nil
}

func (s *service) Signals(ctx context.Context, req *lehrpb.AgentSignalsRequest) (*lehrpb.AgentSignalsResponse, error) {
	if err := checkNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	sig, err := s.b.Signals(ctx, req.GetNamespace())
	if err != nil {
		return nil, toStatus("signals", err)
	}
	return &lehrpb.AgentSignalsResponse{Signals: sig}, nil
}

func (s *service) ReportPreview(ctx context.Context, req *lehrpb.ReportPreviewRequest) (*lehrpb.ReportPreviewResponse, error) {
	if err := checkLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if err := checkNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	if d, n := req.GetLiveDenies(), req.GetLiveDecisions(); d > n {
		return nil, invalidArg("live_denies", "%d denials of %d live decisions; denials are a part of the decisions", d, n)
	}
	if c, n := req.GetLiveChanged(), req.GetLiveDecisions(); c > n {
		return nil, invalidArg("live_changed", "%d changed decisions of %d live decisions; changed decisions are a part of the decisions", c, n)
	}
	if n := len(req.GetCounts()); n > MaxPreviewCounts {
		return nil, invalidArg("counts", "%d counts; at most %d allowed (one per experiment and pair of etags)", n, MaxPreviewCounts)
	}
	for i, c := range req.GetCounts() {
		field := fmt.Sprintf("counts[%d]", i)
		// A consumer that does not know the comparison of a committed
		// version (preview.ComparisonKey) previews it as an experiment:
		// its counts are accepted, and dropped, rather than refusing the
		// report with every live decision in it.
		if err := names.Experiment(c.GetExperiment()); err != nil && c.GetExperiment() != preview.ComparisonKey {
			return nil, invalidArg(field+".experiment", "%v", err)
		}
		pc := c.GetCounts()
		if pc == nil {
			return nil, invalidArg(field+".counts", "counts is required")
		}
		for _, f := range []struct{ name, etag string }{{"live_etag", pc.GetLiveEtag()}, {"experiment_etag", pc.GetExperimentEtag()}} {
			if f.etag == "" || len(f.etag) > MaxPreviewEtagBytes {
				return nil, invalidArg(field+".counts."+f.name, "%s is %d bytes; want 1 to %d", f.name, len(f.etag), MaxPreviewEtagBytes)
			}
		}
	}
	if err := s.b.ReportPreview(ctx, req); err != nil {
		return nil, toStatus("report preview", err)
	}
	return &lehrpb.ReportPreviewResponse{}, nil
}
