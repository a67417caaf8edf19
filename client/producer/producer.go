package producer

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/backoff"
	"lehr.dev/lehr/internal/controladdr"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultAddress is the control plane address used when Options.Address is
// empty: the default listen address of "lehr control".
const DefaultAddress = "127.0.0.1:7400"

// DefaultMaxMessageBytes is the default largest gRPC message the client
// sends or receives. A namespace may hold up to 16 MiB by default; 64 MiB
// leaves room for domains that raise the cap.
const DefaultMaxMessageBytes = 64 << 20

// Options configures a Client. The zero value connects to DefaultAddress
// over plaintext loopback with the default retry policy.
type Options struct {
	// Address is the control plane's "host:port", or a comma-separated
	// list of them, one per control replica; default DefaultAddress. Each
	// name is resolved to all its addresses; calls go to whichever replica
	// is up, so losing one costs a retry, not an outage. A "unix:///path"
	// target is also accepted and counts as local.
	Address string
	// TLS configures transport security. nil means plaintext, which New
	// allows only when Address is a loopback address or a unix socket;
	// any other address without TLS is refused. Set Certificates for
	// mutual TLS.
	TLS *tls.Config
	// Author is the author asserted on every call ("lehr --as"). Control
	// records it only for a caller it cannot identify, in dev mode; a
	// caller it identifies (a client certificate's Lehr identity, a local
	// account on its unix socket) is recorded as that identity, and a
	// write asserting another author is refused with PERMISSION_DENIED.
	// Empty means none.
	Author string
	// Retry says how retryable errors are retried. The zero value is the
	// default policy.
	Retry RetryPolicy
	// MaxMessageBytes is the largest gRPC message sent or received; default
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Logger receives retry and watch reconnect logs; default
	// slog.Default().
	Logger *slog.Logger
	// DialOptions are appended to the client's own dial options, e.g. an
	// interceptor in tests. Most callers leave it nil.
	DialOptions []grpc.DialOption
}

// RetryPolicy bounds the retries of one call. Only errors whose Retryable
// method reports true are retried (unavailable, deadline exceeded at the
// server, aborted, rate limited); everything else returns at once. Writes
// keep the same request_id across attempts, so a retry never duplicates a
// version.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts of one call, including
	// the first; default 5. 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; default 100ms.
	// Each next wait doubles, up to MaxBackoff, and is jittered to a random
	// duration between half and all of it.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts; default 5s.
	MaxBackoff time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	return p
}

// backoff returns the jittered wait before retry number n (0 for the first).
func (p RetryPolicy) backoff(n int) time.Duration {
	return backoff.Policy{Min: p.InitialBackoff, Max: p.MaxBackoff}.Equal(n)
}

// Client is a connection to the control plane. It is safe for concurrent use.
// Create it with New and release it with Close.
type Client struct {
	opts  Options
	addrs controladdr.Addresses
	conn  *grpc.ClientConn
	rpc   lehrpb.ControlClient
	log   *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// New returns a Client for opts.Address. It does not wait for the connection;
// the first call does, and retries while control is unavailable. New fails
// if the address is not loopback and opts.TLS is nil.
func New(opts Options) (*Client, error) {
	if opts.Address == "" {
		opts.Address = DefaultAddress
	}
	opts.Retry = opts.Retry.withDefaults()
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	addrs, err := controladdr.Parse(opts.Address)
	if err != nil {
		return nil, invalidArg("address", "%v", err).WithCause(err)
	}
	var creds credentials.TransportCredentials
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	} else {
		if !addrs.Local() {
			return nil, invalidArg("address",
				"refusing plaintext to %s: plaintext is allowed only to loopback addresses (127.0.0.1, ::1, localhost) or a unix socket; configure TLS (Options.TLS, or lehr --tls-ca/--tls-cert/--tls-key)",
				opts.Address)
		}
		creds = insecure.NewCredentials()
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(checkUTF8Unary),
		grpc.WithChainStreamInterceptor(checkUTF8Stream),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(opts.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(opts.MaxMessageBytes),
		),
	}
	target, aopts := addrs.Dial()
	dopts = append(dopts, aopts...)
	dopts = append(dopts, opts.DialOptions...)
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, invalidArg("address", "dial %s: %v", opts.Address, err).WithCause(err)
	}
	return &Client{
		opts:  opts,
		addrs: addrs,
		conn:  conn,
		rpc:   lehrpb.NewControlClient(conn),
		log:   opts.Logger.With("control", opts.Address),
	}, nil
}

// Close releases the connection. Calls in flight fail with ErrCanceled.
// Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}

// Address returns the control plane address the client dials, as given.
func (c *Client) Address() string { return c.opts.Address }

// RPC returns the underlying generated client, for calls this package does
// not wrap. Its errors are raw gRPC statuses; convert them with
// apierror.FromError.
func (c *Client) RPC() lehrpb.ControlClient { return c.rpc }

// authorMetadataKey is the gRPC metadata key by which the client asserts
// Options.Author on every call, including those whose request has no author
// field (CreateDomain). It must equal control/service.AuthorMetadataKey.
const authorMetadataKey = "lehr-author"

// withAuthor adds the asserted author to ctx's outgoing metadata. gRPC
// metadata values must be printable ASCII; other authors travel only in
// the request fields that carry one.
func (c *Client) withAuthor(ctx context.Context) context.Context {
	a := c.opts.Author
	if a == "" {
		return ctx
	}
	for i := 0; i < len(a); i++ {
		if a[i] < 0x20 || a[i] > 0x7e {
			return ctx
		}
	}
	return metadata.AppendToOutgoingContext(ctx, authorMetadataKey, a)
}

// newRequestID returns a fresh idempotency token: 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// call runs fn until it succeeds, fails with a non-retryable error, runs out
// of attempts or ctx is done. The returned error wraps an *Error and names
// what was attempted.
func (c *Client) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	p := c.opts.Retry
	var last *Error
	probed := false
	for attempt := 0; attempt < p.MaxAttempts; attempt++ {
		if attempt > 0 {
			wait := p.backoff(attempt - 1)
			c.log.Debug("retrying", "call", what, "attempt", attempt+1, "wait", wait, "err", last)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("producer: %s: %w (after %d attempts, last error: %v)", what, apierror.FromError(ctx.Err()), attempt, last)
			case <-t.C:
			}
		}
		err := fn(c.withAuthor(ctx))
		if err == nil {
			return nil
		}
		last = apierror.FromError(err)
		if ctx.Err() != nil {
			// The caller gave up; report that, not the transport's view of it.
			if !errors.Is(last, ErrCanceled) && !errors.Is(last, ErrDeadlineExceeded) {
				last = apierror.FromError(ctx.Err())
			}
			break
		}
		if last.Code == codes.Unavailable && !probed {
			probed = true
			if refused := c.tlsRefusal(ctx); refused != nil {
				last = refused
			}
		}
		if !last.Retryable() {
			break
		}
	}
	return fmt.Errorf("producer: %s: %w", what, last)
}

// tlsRefusal says, when TLS with control fails because one side refuses
// the other's certificate, which and what to do (an error with reason
// CERTIFICATE_REFUSED), and nil otherwise. A TLS 1.3 server refuses a
// client certificate only after the client's handshake, so gRPC sees a
// broken pipe and calls control unavailable; tlsconfig.Diagnose dials
// once more and reads control's answer.
func (c *Client) tlsRefusal(ctx context.Context) *Error {
	if c.opts.TLS == nil {
		return nil
	}
	list := c.addrs.List
	if t := c.addrs.Target; t != "" {
		if strings.HasPrefix(t, "unix") {
			return nil
		}
		list = []string{strings.TrimPrefix(strings.TrimPrefix(t, "dns:///"), "passthrough:///")}
	}
	for _, addr := range list {
		err := tlsconfig.Diagnose(ctx, addr, c.opts.TLS, "h2")
		var re *tlsconfig.RefusedError
		if !errors.As(err, &re) {
			continue
		}
		return apierror.New(codes.Unauthenticated, apierror.ReasonCertificateRefused, "",
			"TLS with control at %s fails: %s (Options.TLS; with lehr, --tls-cert and --tls-key give the client certificate — a user's, from 'lehr certs issue --dir DIR --name NAME --role user' — and --tls-ca the CA that issued control's)",
			addr, re.Reason).WithCause(err)
	}
	return nil
}
