// Package httpapi serves control's HTTP/JSON API (AIP-127): the methods
// of the Control service that carry a google.api.http option
// (proto/lehr/v1/control.proto), through the grpc-gateway handlers
// generated in proto/lehrpb.
//
// It decides nothing about who may do what. Every HTTP request becomes a
// gRPC call to control's own gRPC server — through all of its
// interceptors, so the same authentication, ACLs, audit, admission and
// errors as a gRPC call — over an in-process connection (inproc.go) that
// carries the HTTP caller's transport identity: each HTTP connection gets
// its own gRPC connection whose peer is the HTTP connection's address and,
// over TLS, its TLS state with the client certificate crypto/tls verified.
// A client certificate presented to the HTTP listener is therefore who the
// caller is, exactly as on gRPC; a plaintext caller is one control cannot
// identify; and no header stands in for either.
//
// What it adds is what HTTP needs and gRPC has built in (guard.go):
// bounds on request bodies (size, time, how many at once), JSON only, and
// refusing browsers, so that no web page can borrow a browser's client
// certificate or its place on control's host.
//
// Imported by control.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/encoding/protojson"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes = 24 << 20
	DefaultMaxBodies       = 32
	DefaultMaxConns        = 256
	DefaultBodyWait        = 2 * time.Second
	DefaultBodyTimeout     = 2 * time.Minute
)

// Options configures a Server. The zero value serves plaintext with the
// defaults below.
type Options struct {
	// TLS, if set, serves HTTPS with this configuration — control's gRPC
	// one, so a client certificate is required, and verified, exactly
	// when gRPC requires one. Nil serves plaintext (control allows that
	// on loopback only).
	TLS *tls.Config
	// MaxMessageBytes bounds the gRPC messages the gateway sends and
	// receives: control's gRPC bound. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxBodyBytes bounds a request's body; a larger one is refused (413,
	// RESOURCE_EXHAUSTED/REQUEST_TOO_LARGE) before or as soon as it is
	// read past the bound. Default MaxMessageBytes * 3/2: JSON carries a
	// property's bytes in base64, a third longer than the bytes.
	MaxBodyBytes int64
	// MaxBodies bounds the requests with a body (POST, PATCH) read and
	// worked on at once, as control's admission bounds the publishes it
	// receives; one beyond waits up to BodyWait for its turn, then is
	// refused (429, RESOURCE_EXHAUSTED/RATE_LIMITED). Default
	// DefaultMaxBodies (32).
	MaxBodies int
	// BodyWait is how long a request with a body waits for one of
	// MaxBodies. Default DefaultBodyWait (2 s).
	BodyWait time.Duration
	// BodyTimeout bounds reading a body once it has one of MaxBodies, so
	// that a client sending slowly cannot hold it for ever. Default
	// DefaultBodyTimeout (2 minutes: 36 MiB at 300 KB/s).
	BodyTimeout time.Duration
	// MaxConns bounds the HTTP connections served at once (each has a
	// gRPC connection of its own); more wait to be accepted. Default
	// DefaultMaxConns (256).
	MaxConns int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Console, if set, serves the operator console (control/console)
	// under /console/, and / redirects there. Its requests are screened
	// only for the plaintext listener's host rule (guard.go): a browser
	// fetching a page is what it is for, so the console applies its own
	// rules for pages and forms. It reads and acts through CallerClient
	// with the request's context: as the HTTP caller, like the API.
	Console http.Handler
}

// Server is control's HTTP/JSON API. New starts nothing; control's gRPC
// server serves GRPCListener, and Serve serves HTTP until Shutdown or
// Close.
type Server struct {
	opts   Options
	log    *slog.Logger
	lis    *Listener
	mux    *runtime.ServeMux
	json   *runtime.JSONPb
	http   *http.Server
	bodies chan struct{} // a token per request body being worked on

	mu     sync.Mutex
	conns  map[net.Conn]*callerConn
	closed bool
}

// New returns a Server for an HTTP listener at addr (the address the
// in-process gRPC connections name as theirs). It listens on nothing.
func New(addr net.Addr, opts Options) *Server {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = int64(opts.MaxMessageBytes) * 3 / 2
	}
	if opts.MaxBodies <= 0 {
		opts.MaxBodies = DefaultMaxBodies
	}
	if opts.BodyWait <= 0 {
		opts.BodyWait = DefaultBodyWait
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		opts:   opts,
		log:    opts.Logger,
		lis:    newListener(addr),
		bodies: make(chan struct{}, opts.MaxBodies),
		conns:  map[net.Conn]*callerConn{},
		// Proto3 JSON as AIP-127 has it (lowerCamelCase names, defaults
		// left out), and a field the message does not have is an error,
		// not silently dropped: a misspelt field must not pass for unset.
		json: &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{}, UnmarshalOptions: protojson.UnmarshalOptions{}},
	}
	s.mux = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, s.json),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithOutgoingTrailerMatcher(outgoingHeader),
		runtime.WithErrorHandler(s.handleError),
		runtime.WithDisableHTTPMethodOverride(),
	)
	// Registering only fails for a nil client.
	_ = lehrpb.RegisterControlHandlerClient(context.Background(), s.mux, lehrpb.NewControlClient(router{}))
	var tlsCfg *tls.Config
	if opts.TLS != nil {
		tlsCfg = opts.TLS.Clone()
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	}
	s.http = &http.Server{
		Handler:           s,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       s.connContext,
		ConnState:         s.connState,
		// Handshake failures and the like: a scanner's noise, at DEBUG.
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	return s
}

// GRPCListener is the listener control's gRPC server serves the gateway's
// connections on. Serve it with Credentials wrapping the server's
// transport credentials.
func (s *Server) GRPCListener() net.Listener { return s.lis }

// Serve serves HTTP on l (TLS if Options.TLS is set) until Shutdown or
// Close, and then returns nil.
func (s *Server) Serve(l net.Listener) error {
	l = netutil.LimitListener(l, s.opts.MaxConns)
	var err error
	if s.opts.TLS != nil {
		err = s.http.ServeTLS(l, "", "")
	} else {
		err = s.http.Serve(l)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops taking requests and waits for those in flight (and so
// their gRPC calls) to finish, or for ctx to end, then closes the gRPC
// connections. Call it before stopping the gRPC server.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	s.closeConns()
	return err
}

// Close closes every HTTP connection and the gRPC connections at once. It
// is idempotent.
func (s *Server) Close() error {
	err := s.http.Close()
	s.closeConns()
	return err
}

// ConsolePrefix is the path under which Options.Console is served.
const ConsolePrefix = "/console/"

// ServeHTTP screens a request (guard.go), gives it its connection's gRPC
// client and hands it to the gateway's handlers, or to the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Console != nil && (strings.HasPrefix(r.URL.Path, ConsolePrefix) || r.URL.Path == "/" || r.URL.Path == "/console") {
		s.serveConsole(w, r)
		return
	}
	if code, err := screen(r, s.opts.TLS != nil); err != nil {
		s.writeError(w, code, err)
		return
	}
	// Nothing in a request says who its caller is; these would only
	// reach control as metadata nobody reads, the latter two mixing what
	// the client says with what the gateway saw.
	r.Header.Del("Authorization")
	r.Header.Del("X-Forwarded-For")
	r.Header.Del("X-Forwarded-Host")

	ctx := r.Context()
	if hasBody(r) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			s.writeError(w, http.StatusRequestEntityTooLarge, s.tooLarge())
			return
		}
		release, err := s.acquireBody(ctx)
		if err != nil {
			s.writeError(w, runtime.HTTPStatusFromCode(err.Code), err)
			return
		}
		defer release()
		// Unsupported only by a ResponseWriter of a test.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		b := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)}
		r.Body = b
		ctx = context.WithValue(ctx, bodyKey{}, b)
	}
	cc, err := s.connOf(r)
	if err != nil {
		s.writeError(w, http.StatusServiceUnavailable, apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "", "control is shutting down"))
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(ctx, clientKey{}, cc)))
}

// serveConsole hands r to the console with its connection's gRPC client;
// / and /console redirect to the console's first page.
func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request) {
	if code, err := screenHost(r, s.opts.TLS != nil); err != nil {
		s.writeError(w, code, err)
		return
	}
	if !strings.HasPrefix(r.URL.Path, ConsolePrefix) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.writeError(w, http.StatusMethodNotAllowed, apierror.New(codes.Unimplemented, apierror.ReasonInvalidArgument, "", "%s %s: only GET redirects to the console (%s)", r.Method, r.URL.Path, ConsolePrefix))
			return
		}
		http.Redirect(w, r, ConsolePrefix, http.StatusFound)
		return
	}
	r.Header.Del("Authorization")
	cc, err := s.connOf(r)
	if err != nil {
		s.writeError(w, http.StatusServiceUnavailable, apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "", "control is shutting down"))
		return
	}
	s.opts.Console.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, cc)))
}

// CallerClient is the Control API as the caller of the HTTP request whose
// context a call is made with: each call goes, on the gRPC connection of
// that request's HTTP connection, through control's gRPC server and its
// interceptors, as the gateway's calls do. A call with any other context
// fails (INTERNAL). The console (Options.Console) reads and acts through
// it.
func CallerClient() lehrpb.ControlClient { return lehrpb.NewControlClient(router{}) }

// PeerContext returns r's context with the gRPC peer its caller is known
// by on the in-process connection — its HTTP connection's addresses and,
// over TLS, the verified client certificate — for decisions made without
// a call (service.Service.MayCall).
func PeerContext(r *http.Request) context.Context {
	p := &peer.Peer{AuthInfo: authInfo(r.TLS)}
	if c, ok := r.Context().Value(connKey{}).(*callerConn); ok {
		p.Addr, p.LocalAddr = c.remote, c.local
	}
	return peer.NewContext(r.Context(), p)
}

// acquireBody takes one of MaxBodies, waiting up to BodyWait.
func (s *Server) acquireBody(ctx context.Context) (release func(), err *apierror.Error) {
	timer := time.NewTimer(s.opts.BodyWait)
	defer timer.Stop()
	select {
	case s.bodies <- struct{}{}:
		return func() { <-s.bodies }, nil
	case <-ctx.Done():
		return nil, apierror.FromError(ctx.Err())
	case <-timer.C:
		return nil, apierror.New(codes.ResourceExhausted, apierror.ReasonRateLimited, "",
			"control is reading %d HTTP request bodies at once, its most (its memory is bounded); retry in a moment", s.opts.MaxBodies)
	}
}

// clientKey marks a request's context with its connection's gRPC client.
type clientKey struct{}

// router is the gateway's gRPC client: it makes each call on the gRPC
// connection of the HTTP connection the call's request came on.
type router struct{}

func (router) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	cc, ok := ctx.Value(clientKey{}).(*grpc.ClientConn)
	if !ok {
		return apierror.New(codes.Internal, apierror.ReasonInternal, "", "httpapi: a call outside an HTTP request")
	}
	return cc.Invoke(ctx, method, args, reply, opts...)
}

func (router) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cc, ok := ctx.Value(clientKey{}).(*grpc.ClientConn)
	if !ok {
		return nil, apierror.New(codes.Internal, apierror.ReasonInternal, "", "httpapi: a call outside an HTTP request")
	}
	return cc.NewStream(ctx, desc, method, opts...)
}

// callerConn is one HTTP connection's gRPC connection to control, made at
// its first request, closed with it.
type callerConn struct {
	remote, local net.Addr

	mu     sync.Mutex
	cc     *grpc.ClientConn
	closed bool
}

type connKey struct{}

// connContext gives an accepted HTTP connection its callerConn.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	cc := &callerConn{remote: c.RemoteAddr(), local: c.LocalAddr()}
	s.mu.Lock()
	if s.closed {
		cc.closed = true
	} else {
		s.conns[c] = cc
	}
	s.mu.Unlock()
	return context.WithValue(ctx, connKey{}, cc)
}

// connState closes a connection's gRPC connection with it.
func (s *Server) connState(c net.Conn, state http.ConnState) {
	if state != http.StateClosed && state != http.StateHijacked {
		return
	}
	s.mu.Lock()
	cc := s.conns[c]
	delete(s.conns, c)
	s.mu.Unlock()
	if cc != nil {
		cc.close()
	}
}

// connOf returns the gRPC connection of r's HTTP connection, dialling it
// at the connection's first request: its caller is who the connection's
// TLS state says (r.TLS is the same for every request of a connection).
func (s *Server) connOf(r *http.Request) (*grpc.ClientConn, error) {
	c, ok := r.Context().Value(connKey{}).(*callerConn)
	if !ok {
		return nil, errors.New("httpapi: a request without a connection")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, net.ErrClosed
	}
	if c.cc != nil {
		return c.cc, nil
	}
	info := authInfo(r.TLS)
	cc, err := grpc.NewClient("passthrough:///control",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return s.lis.dial(ctx, c.remote, c.local, info)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(s.opts.MaxMessageBytes)),
	)
	if err != nil {
		return nil, err
	}
	c.cc = cc
	return cc, nil
}

func (c *callerConn) close() {
	c.mu.Lock()
	cc := c.cc
	c.cc, c.closed = nil, true
	c.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

// closeConns closes every connection's gRPC connection; connections
// accepted from now on get none.
func (s *Server) closeConns() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[net.Conn]*callerConn{}
	s.mu.Unlock()
	for _, cc := range conns {
		cc.close()
	}
}

// incomingHeader forwards the one header control reads as metadata:
// Lehr-Author, the author a caller asserts (lehr --as). It carries no
// identity — control counts it only for a caller it cannot identify, in
// dev mode, and refuses an identified caller asserting another — exactly
// as the gRPC metadata lehr-author.
func incomingHeader(h string) (string, bool) {
	if strings.EqualFold(h, "Lehr-Author") {
		return "lehr-author", true
	}
	return "", false
}

// outgoingHeader passes control's own response metadata (lehr-store-id)
// as headers of the same name.
func outgoingHeader(key string) (string, bool) {
	if strings.HasPrefix(key, "lehr-") {
		return key, true
	}
	return "", false
}
