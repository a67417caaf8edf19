package wire

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// QUIC transport defaults of ServerQUICConfig and ClientQUICConfig.
const (
	// DefaultKeepAlivePeriod is how often an agent's idle connection sends
	// a keepalive with the default silence timeout (a third of it), unless
	// its distributor advises a longer interval (MaxKeepaliveInterval,
	// Liveness). The keepalive is a Ping on the control stream, answered
	// by a Pong, which keeps both sides' idle timers (and any NAT binding
	// on the way) fresh. A distributor restarted on the same address
	// answers the first keepalive after its restart with a stateless
	// reset, so the agent reconnects within one interval.
	DefaultKeepAlivePeriod = time.Second
	// DefaultSilenceTimeout is how long an agent hears nothing from its
	// distributor before it closes the connection and fails over
	// (Liveness): how quickly it notices a silent distributor (a crashed
	// host, a partition). Three keepalive periods, so a lost keepalive or
	// acknowledgement or two is not a failover.
	DefaultSilenceTimeout = 3 * time.Second
	// MaxKeepaliveInterval bounds the keepalive interval a distributor may
	// advise (Welcome.keepalive_interval): with it, the silence timeout of
	// an agent of a very large distributor is at most 30 s.
	MaxKeepaliveInterval = 10 * time.Second
	// serverMaxIdleTimeout is the distributor's QUIC idle timeout, after
	// which it forgets a connection it no longer hears: three of the
	// longest keepalive intervals it may advise, so a lost keepalive or
	// two, or a distributor too busy to read its agents' keepalives for a
	// few seconds, does not drop connections their agents still hold —
	// whose next packet it would answer with a stateless reset, which
	// agents take for its restart. The connection's idle timeout is the
	// smaller of the two sides', and the agent offers more (SetSilenceTimeout),
	// so this one applies.
	serverMaxIdleTimeout = 3 * MaxKeepaliveInterval
	// idleTimeoutFactor sizes the agent's QUIC idle timeout from the
	// longest silence timeout it may come to use (SetSilenceTimeout).
	idleTimeoutFactor = 3
	// DefaultHandshakeTimeout bounds the QUIC/TLS handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxUpdateStreams is how many update streams may be open at
	// once on one connection (one per namespace in flight).
	DefaultMaxUpdateStreams = 1024
)

// Flow-control windows of the two sides. Receive windows bound how much a
// peer may send ahead of the reader, so they bound the memory one
// connection can make the receiver buffer, and they do not allocate by
// themselves (quic-go buffers only the data that actually arrives).
const (
	// The distributor receives only control frames (Hello, Subscribe, Ack,
	// Report…; at most DefaultMaxControlFrame each, usually ~100 B) and
	// reads them as they arrive: a small window suffices, and with
	// thousands of agents per distributor it keeps one misbehaving agent
	// from parking megabytes there. quic-go grows a window towards its
	// maximum when the reader keeps up, so a 1 MiB Hello still flows.
	serverStreamWindow        = 64 << 10
	serverMaxStreamWindow     = 1 << 20
	serverConnectionWindow    = 64 << 10
	serverMaxConnectionWindow = 1 << 20
	// The agent receives updates of up to DefaultMaxUpdateFrame (64 MiB)
	// on concurrent streams: windows large enough for multi-megabyte
	// snapshots at LAN speed.
	clientStreamWindow        = 1 << 20
	clientMaxStreamWindow     = 16 << 20
	clientConnectionWindow    = 1536 << 10 // 1.5 × the stream window, as quic-go scales its defaults
	clientMaxConnectionWindow = 64 << 20
)

// ServerQUICConfig returns the distributor's transport configuration: a
// 20 s idle timeout and a 10 s handshake timeout, no keepalives of its own
// (agents send them), exactly one bidirectional stream per connection (the
// agent's control stream) and no unidirectional ones — quic-go itself
// refuses any other stream an agent opens with a stream-limit error — and
// small receive windows (64 KiB, growing to 1 MiB) since agents send only
// control frames. The caller may change the returned value.
func ServerQUICConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           DefaultHandshakeTimeout,
		MaxIdleTimeout:                 serverMaxIdleTimeout,
		MaxIncomingStreams:             1,
		MaxIncomingUniStreams:          -1, // none
		InitialStreamReceiveWindow:     serverStreamWindow,
		MaxStreamReceiveWindow:         serverMaxStreamWindow,
		InitialConnectionReceiveWindow: serverConnectionWindow,
		MaxConnectionReceiveWindow:     serverMaxConnectionWindow,
	}
}

// ClientQUICConfig returns the agent's transport configuration: no QUIC
// keepalives (the agent sends its own, Liveness), a 90 s idle timeout
// (SetSilenceTimeout with DefaultSilenceTimeout; the distributor's 30 s
// applies), a 10 s handshake timeout, no bidirectional stream opened by
// the distributor, up to 1024 concurrent unidirectional update streams,
// and receive windows large enough for multi-megabyte snapshots (1 MiB
// growing to 16 MiB per stream, 64 MiB per connection). The caller may
// change the returned value.
func ClientQUICConfig() *quic.Config {
	c := &quic.Config{
		HandshakeIdleTimeout:           DefaultHandshakeTimeout,
		MaxIncomingStreams:             -1, // distributors open only update streams
		MaxIncomingUniStreams:          DefaultMaxUpdateStreams,
		InitialStreamReceiveWindow:     clientStreamWindow,
		MaxStreamReceiveWindow:         clientMaxStreamWindow,
		InitialConnectionReceiveWindow: clientConnectionWindow,
		MaxConnectionReceiveWindow:     clientMaxConnectionWindow,
	}
	SetSilenceTimeout(c, DefaultSilenceTimeout)
	return c
}

// SetSilenceTimeout configures c for an agent whose own silence timeout is
// d (Liveness): a QUIC idle timeout of three times the longest silence
// timeout the agent may come to use (d, or three of the longest keepalive
// intervals a distributor may advise), so that QUIC's idle timer never
// ends a connection the agent still judges alive; and no QUIC keepalives,
// as the agent sends its own at an interval that may change during the
// connection.
func SetSilenceTimeout(c *quic.Config, d time.Duration) {
	c.MaxIdleTimeout = idleTimeoutFactor * max(d, 3*MaxKeepaliveInterval)
	c.KeepAlivePeriod = 0
}

// probeTimeout is QUIC's probe timeout (RFC 9002 §6.2.1) from conn's
// round-trip estimates, with the default max_ack_delay (25 ms).
func probeTimeout(st quic.ConnectionStats) time.Duration {
	return st.SmoothedRTT + max(4*st.MeanDeviation, time.Millisecond) + 25*time.Millisecond
}

// ServerTLSConfig returns a copy of base set up for the distributor's side
// of the protocol: TLS 1.3 at least, ALPN "lehr/1", and TLS 1.3 session
// tickets an agent can resume with (see ClientTLSConfig). base carries the
// certificate and, for mutual TLS, ClientAuth and ClientCAs.
//
// Resumption skips the certificates and their signatures — a quarter of a
// handshake's CPU at both ends (BenchmarkHandshake) — and keeps the
// ephemeral key exchange (psk_dhe_ke), so the traffic keys stay forward
// secret; no early data is ever accepted. The session-ticket key is
// derived from the first certificate's private key (KeyFromCertificate),
// so tickets survive a restart of the distributor (the moment every agent
// reconnects at once) with no key file of its own, and whoever could read
// a ticket key could as well impersonate the distributor with its private
// key. A new key (a renewed certificate) invalidates every ticket: the next
// connection is a full handshake. (A base without a private key — a
// GetCertificate callback — keeps crypto/tls's own keys, which do not
// survive a restart.) On resumption crypto/tls still checks the client
// certificate's expiry and its chain against the ClientCAs of now; a
// ticket lives at most 7 days.
func ServerTLSConfig(base *tls.Config) *tls.Config {
	c := protocolTLS(base)
	c.SessionTicketsDisabled = false
	if key, ok := KeyFromCertificate(c, sessionTicketKeyLabel); ok {
		c.SetSessionTicketKeys([][32]byte{key})
	}
	return c
}

// sessionTicketKeyLabel is the session-ticket key's label for
// KeyFromCertificate: changing it invalidates every ticket issued before.
const sessionTicketKeyLabel = "lehr distributor TLS session ticket key v1"

// KeyFromCertificate derives a 32-byte key for label from the private key
// of cfg's first certificate: SHA-256 of the label, a zero byte and the
// key's PKCS #8 encoding. A distributor restarted with the same
// certificate derives the same keys (its QUIC stateless-reset key, its
// session-ticket key); ok is false when cfg has no usable private key.
func KeyFromCertificate(cfg *tls.Config, label string) (key [32]byte, ok bool) {
	if cfg == nil || len(cfg.Certificates) == 0 || cfg.Certificates[0].PrivateKey == nil {
		return key, false
	}
	der, err := x509.MarshalPKCS8PrivateKey(cfg.Certificates[0].PrivateKey)
	if err != nil {
		return key, false
	}
	h := sha256.New()
	h.Write([]byte(label))
	h.Write([]byte{0})
	h.Write(der)
	return [32]byte(h.Sum(nil)), true
}

// clientSessions is how many distributors' TLS sessions an agent keeps to
// resume with (ClientTLSConfig).
const clientSessions = 16

// ClientTLSConfig returns a copy of base set up for the agent's side of the
// protocol: TLS 1.3 at least, ALPN "lehr/1", and a cache of TLS sessions
// (clientSessions) so that a reconnect resumes the session of the last
// connection to that distributor (see ServerTLSConfig). base carries the
// client certificate and RootCAs. A base with a ClientSessionCache keeps
// it: make the config once per agent, not per dial, or no session is ever
// resumed.
func ClientTLSConfig(base *tls.Config) *tls.Config {
	c := protocolTLS(base)
	c.SessionTicketsDisabled = false
	if c.ClientSessionCache == nil {
		c.ClientSessionCache = newSessionCache(clientSessions)
	}
	return c
}

// sessionDropAfter is how many failed handshakes in a row a cached session
// survives (sessionCache).
const sessionDropAfter = 8

// sessionCache is an LRU cache of TLS sessions that keeps a session through
// a few failed handshakes. crypto/tls drops the session after any
// handshake that offered it fails — so that a corrupt one cannot fail
// every later handshake — but a distributor in a reconnect storm refuses
// most first attempts (fanout's admission bound), or they time out, and
// dropping the session then made most agents' eventual handshake a full
// one: a storm of 3,000 agents resumed only 781 sessions. A session is
// dropped after sessionDropAfter failures in a row instead; a new ticket
// (every completed handshake brings one) starts the count again.
type sessionCache struct {
	lru tls.ClientSessionCache

	mu       sync.Mutex
	failures map[string]int
}

func newSessionCache(n int) *sessionCache {
	return &sessionCache{lru: tls.NewLRUClientSessionCache(n), failures: map[string]int{}}
}

// Get implements tls.ClientSessionCache.
func (c *sessionCache) Get(key string) (*tls.ClientSessionState, bool) { return c.lru.Get(key) }

// Put implements tls.ClientSessionCache: cs nil is crypto/tls dropping the
// session after a failed handshake.
func (c *sessionCache) Put(key string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs != nil {
		delete(c.failures, key)
		c.lru.Put(key, cs)
		return
	}
	c.failures[key]++
	if c.failures[key] >= sessionDropAfter {
		delete(c.failures, key)
		c.lru.Put(key, nil)
	}
}

// protocolTLS returns a copy of base with what both sides need: TLS 1.3 at
// least and ALPN "lehr/1".
func protocolTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS13)
	c.NextProtos = []string{ALPN}
	return c
}

// CloseConn closes conn after err with CodeFor(err) and err's text as the
// reason (shortened to fit a packet). It returns the connection's close
// error.
func CloseConn(conn *quic.Conn, err error) error {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return conn.CloseWithError(CodeFor(err), msg)
}

// smallUpdate is the largest update frame SendUpdate sends first.
const smallUpdate = 64 << 10

// queuedUpdate is the largest update frame SendUpdate queues whole without
// waiting (quic-go's SendStream.TryWriteAll), when the stream's flow
// control allows: one that fits in the packet-sized buffer of quic-go's
// pooled STREAM frames (its protocol.MaxPacketBufferSize, 1452 bytes in
// v0.65), so that queuing it copies it once and allocates nothing, as
// quic-go's Write does with a frame of that size.
const queuedUpdate = 1452

// sendChunk is how much of a frame SendUpdate hands to the stream at a
// time: the unit in which it sees progress (SendUpdate's stall bound).
const sendChunk = 64 << 10

// ErrStalled is the error (matched with errors.Is) of a SendUpdate whose
// stream took no bytes for its stall bound: the agent neither granted a
// stream nor read what was sent. Such an agent is stuck, not slow, and the
// distributor ends the connection so that it reconnects.
var ErrStalled = errors.New("the agent took no update bytes")

// SendUpdate opens a fresh unidirectional stream on conn, writes frame —
// one Update frame, as AppendFrame encodes it — and closes the stream.
// Ending ctx resets the stream with StreamCodeCancelled and returns ctx's
// cause. Delivery is confirmed only by the agent's Ack.
//
// stall, if positive, bounds progress rather than the whole write, since
// a large snapshot on a lossy link legitimately takes minutes: waiting
// for the agent's stream credit, and each chunk of sendChunk bytes, may
// take at most stall. Past it the stream is reset and the error matches
// [ErrStalled]: an agent that stopped accepting streams or reading them
// would otherwise hold the write — and the update, never answered —
// forever, while its control stream keeps the connection alive.
//
// A frame of at most smallUpdate bytes goes before larger ones still
// sending on conn (QUIC stream urgency 2 against the default 3): a
// one-key patch waits for no other namespace's snapshot — another
// domain's flood, say — only for the bandwidth of the small updates.
//
// A fan-out's common case — stream credit at hand and a frame that fits
// one packet, which the stream's flow control takes whole — neither
// waits nor arms a timer: the frame is queued and the stream closed at
// once (quic-go's OpenUniStream and TryWriteAll), as many times a second
// as there are agents.
func SendUpdate(ctx context.Context, conn *quic.Conn, frame []byte, stall time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wire: open update stream: %w", context.Cause(ctx))
	}
	s, err := conn.OpenUniStream()
	if err != nil {
		if _, limited := errors.AsType[*quic.StreamLimitReachedError](err); !limited {
			return fmt.Errorf("wire: open update stream: %w", err)
		}
		if s, err = openUniStreamSync(ctx, conn, stall); err != nil {
			return err
		}
	}
	if len(frame) <= smallUpdate {
		s.SetPriority(2, true)
	}
	if len(frame) <= queuedUpdate {
		switch err := s.TryWriteAll(frame); {
		case err == nil:
			if err := s.Close(); err != nil {
				return fmt.Errorf("wire: close update stream %d: %w", s.StreamID(), err)
			}
			return nil
		case !errors.Is(err, quic.ErrWouldBlock):
			s.CancelWrite(StreamCodeCancelled)
			return fmt.Errorf("wire: write update stream %d: %w", s.StreamID(), err)
		}
		// No flow-control credit for it now: written as a larger one.
	}
	stop := context.AfterFunc(ctx, func() { s.CancelWrite(StreamCodeCancelled) })
	defer stop()
	for rest := frame; len(rest) > 0; {
		chunk := rest[:min(len(rest), sendChunk)]
		if stall > 0 {
			_ = s.SetWriteDeadline(time.Now().Add(stall))
		}
		_, err := s.Write(chunk)
		if err != nil {
			s.CancelWrite(StreamCodeCancelled)
			switch {
			case ctx.Err() != nil:
				err = context.Cause(ctx)
			case errors.Is(err, os.ErrDeadlineExceeded):
				err = fmt.Errorf("%d of %d bytes written, none for %v: %w", len(frame)-len(rest), len(frame), stall, ErrStalled)
			}
			return fmt.Errorf("wire: write update stream %d: %w", s.StreamID(), err)
		}
		rest = rest[len(chunk):]
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("wire: close update stream %d: %w", s.StreamID(), err)
	}
	return nil
}

// openUniStreamSync waits for the agent's stream credit for at most stall
// (no bound if stall is not positive) and opens a unidirectional stream.
func openUniStreamSync(ctx context.Context, conn *quic.Conn, stall time.Duration) (*quic.SendStream, error) {
	octx, cancel := ctx, context.CancelFunc(func() {})
	if stall > 0 {
		octx, cancel = context.WithTimeoutCause(ctx, stall, ErrStalled)
	}
	defer cancel()
	s, err := conn.OpenUniStreamSync(octx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(octx), ErrStalled) {
			return nil, fmt.Errorf("wire: open update stream: no stream credit for %v: %w", stall, ErrStalled)
		}
		return nil, fmt.Errorf("wire: open update stream: %w", err)
	}
	return s, nil
}

// ReadUpdateStream reads the one Update of an update stream and checks the
// stream ends right after it. On a frame error it abandons the stream with
// StreamCodeRejected and returns the [*FrameError] (the caller then closes
// the connection with CloseConn); ending ctx abandons it with
// StreamCodeCancelled and returns ctx's error. A stream reset by the
// distributor (a superseded update) gives the *quic.StreamError.
func ReadUpdateStream(ctx context.Context, s *quic.ReceiveStream, lim Limits) (*lehrpb.Update, error) {
	stop := context.AfterFunc(ctx, func() { s.CancelRead(StreamCodeCancelled) })
	defer stop()
	d := NewDecoder(s, DecoderOptions{Limits: lim, Stream: StreamUpdate})
	msg, err := d.Decode()
	if err == nil {
		if _, err = d.Decode(); err == io.EOF {
			return msg.(*lehrpb.Update), nil
		}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("wire: read update stream %d: %w", s.StreamID(), context.Cause(ctx))
	}
	var fe *FrameError
	if errors.As(err, &fe) {
		s.CancelRead(StreamCodeRejected)
	}
	return nil, fmt.Errorf("wire: read update stream %d: %w", s.StreamID(), err)
}

// Control is the control stream of one connection, from either side. Send
// may be called from several goroutines; Recv from one goroutine at a time.
type Control struct {
	s   *quic.Stream
	dec *Decoder

	mu  sync.Mutex // serialises Send
	enc *Encoder
}

// controlReadBuffer is the read buffer of a control stream. Control
// frames are small (an Ack is ~130 B) and a distributor holds one stream
// per agent: a small buffer saves KiBs per connected agent, and larger
// frames bypass it.
const controlReadBuffer = 512

// goodbyeTimeout bounds the write of a Goodbye.
const goodbyeTimeout = time.Second

func newControl(s *quic.Stream, lim Limits, reads Stream) *Control {
	return &Control{
		s:   s,
		dec: NewDecoder(bufio.NewReaderSize(s, controlReadBuffer), DecoderOptions{Limits: lim, Stream: reads}),
		enc: NewEncoder(s, lim),
	}
}

// Send writes msg as one frame. An invalid message is refused with a
// [*FrameError] and nothing is sent.
func (c *Control) Send(msg proto.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enc.Encode(msg)
}

// Recv reads the next frame, enforcing the frame order of this side of the
// stream. It blocks until a frame arrives, the stream ends (io.EOF) or the
// connection closes; a [*FrameError] means the peer violated the protocol
// and the connection should be closed with CloseConn.
func (c *Control) Recv() (proto.Message, error) {
	return c.dec.Decode()
}

// Goodbye sends a Goodbye announcing the code the connection is about to be
// closed with. The caller closes the connection afterwards (CloseConn or
// conn.CloseWithError with the same code), ideally after giving the peer a
// moment to close first so the Goodbye is not lost. The write is bounded
// (1 s), and a Send blocked on flow control is unblocked, so a peer that
// stopped reading cannot hold up a close; later Sends fail.
func (c *Control) Goodbye(code quic.ApplicationErrorCode, reason string, retryAfter time.Duration) error {
	_ = c.s.SetWriteDeadline(time.Now().Add(goodbyeTimeout))
	g := &lehrpb.Goodbye{Code: uint64(code), Reason: reason}
	if retryAfter > 0 {
		g.RetryAfter = durationpb.New(retryAfter)
	}
	return c.Send(g)
}

// Close closes the send direction of the stream (the peer reads io.EOF).
// It does not close the connection.
func (c *Control) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.Close()
}

// OpenControl is the agent's side of the handshake: it opens the control
// stream on conn, sends hello and waits for the Welcome. The Welcome's
// version must be within hello's range. A Goodbye instead of a Welcome
// gives a [*GoodbyeError]. ctx bounds the wait; on any error the caller
// closes the connection (CloseConn).
func OpenControl(ctx context.Context, conn *quic.Conn, hello *lehrpb.Hello, lim Limits) (*Control, *lehrpb.Welcome, error) {
	if err := Validate(hello); err != nil {
		return nil, nil, fmt.Errorf("wire: hello: %w", err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: open control stream: %w", err)
	}
	c := newControl(s, lim, StreamControlFromDistributor)
	if err := c.Send(hello); err != nil {
		return nil, nil, err
	}
	msg, err := recvWithin(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: wait for Welcome: %w", err)
	}
	switch m := msg.(type) {
	case *lehrpb.Welcome:
		r := VersionRange{Min: hello.GetMinProtocolVersion(), Max: hello.GetProtocolVersion()}
		if r.Min == 0 {
			r.Min = r.Max
		}
		if err := r.Accept(m); err != nil {
			return nil, nil, err
		}
		return c, m, nil
	case *lehrpb.Goodbye:
		return nil, nil, goodbyeError(m)
	}
	return nil, nil, fmt.Errorf("wire: wait for Welcome: got %T", msg) // unreachable: the decoder allows only these two
}

// AcceptControl is the distributor's side of the handshake: it accepts the
// control stream on conn and reads the Hello. The caller then checks the
// agent (identity, zone), calls [Negotiate] and sends a Welcome with
// Control.Send — or closes the connection with CloseConn. ctx bounds the
// wait for the stream and the Hello (see CodeHandshakeTimeout).
func AcceptControl(ctx context.Context, conn *quic.Conn, lim Limits) (*Control, *lehrpb.Hello, error) {
	s, err := conn.AcceptStream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: accept control stream: %w", err)
	}
	c := newControl(s, lim, StreamControlFromAgent)
	msg, err := recvWithin(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: wait for Hello: %w", err)
	}
	return c, msg.(*lehrpb.Hello), nil // the decoder allows only Hello first
}

// recvWithin reads one frame, giving up when ctx ends.
func recvWithin(ctx context.Context, c *Control) (proto.Message, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.s.SetReadDeadline(time.Now()) })
	msg, err := c.Recv()
	if !stop() {
		// The deadline may have been set; clear it for later reads.
		_ = c.s.SetReadDeadline(time.Time{})
		if err != nil {
			return nil, context.Cause(ctx)
		}
	}
	return msg, err
}

func goodbyeError(g *lehrpb.Goodbye) *GoodbyeError {
	return &GoodbyeError{
		Code:       quic.ApplicationErrorCode(g.GetCode()),
		Reason:     g.GetReason(),
		RetryAfter: g.GetRetryAfter().AsDuration(),
	}
}

// GoodbyeErr converts a received Goodbye into the error it reports.
func GoodbyeErr(g *lehrpb.Goodbye) error { return goodbyeError(g) }
