package bench

// The peers Lehr is compared with: etcd watch (embedded etcd, watchers
// through client/v3) and NATS JetStream KV watch (nats-server embedded as a
// library, watchers through nats.go). Each subscriber has its own client
// connection, as each host would (up to 2,000 connections: see
// watchersPerConn), and all subscribers connect through one
// counting TCP proxy so their bytes on the wire can be measured.
//
// Transport security: Lehr's agents always speak QUIC with mutual TLS 1.3,
// so by default the peers do the same over TCP: each peer server gets its
// own CA (internal/pki, ECDSA P-256 like Lehr's), a server certificate
// and a client certificate; the server accepts TLS 1.3 only and requires
// and verifies the client certificate, and every subscriber connection
// makes its own full handshake presenting it (no session resumption, as
// for a Lehr agent). Options.PeerPlaintext runs the peers without TLS, as
// the harness did before; each row records which (Row.Transport). The
// setting travels in the scenario's context (withPeerTLS), so every
// scenario that starts a peer follows the run's choice.
//
// The fair race runs the same peers as server processes instead
// (peerproc.go: startEtcdProc, startNATSProc), with their watchers in a
// subscriber process (watchClient, run by the swarm child).

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Transports recorded in Row.Transport.
const (
	// TransportLehr is Lehr's agent ↔ distributor transport.
	TransportLehr = "quic+tls1.3+client-cert"
	// TransportPeerTLS is the peers' transport with Options.PeerPlaintext
	// unset (the default): TCP, TLS 1.3 only, client certificate required
	// and verified by the server.
	TransportPeerTLS = "tcp+tls1.3+client-cert"
	// TransportPeerPlaintext is the peers' transport with
	// Options.PeerPlaintext set.
	TransportPeerPlaintext = "tcp+plaintext"
)

// peerTLSKey is the context key of the peers' transport security.
type peerTLSKey struct{}

// withPeerTLS returns ctx carrying whether peers run TLS (true) or
// plaintext.
func withPeerTLS(ctx context.Context, on bool) context.Context {
	return context.WithValue(ctx, peerTLSKey{}, on)
}

// peerTLSFrom reports whether peers started under ctx run TLS; true unless
// withPeerTLS said otherwise.
func peerTLSFrom(ctx context.Context) bool {
	on, ok := ctx.Value(peerTLSKey{}).(bool)
	return !ok || on
}

// peerTransport is the Row.Transport of a peer under the given setting.
func peerTransport(tlsOn bool) string {
	if tlsOn {
		return TransportPeerTLS
	}
	return TransportPeerPlaintext
}

// peerPKI is one peer server's certificates: a CA of its own, a server
// certificate for 127.0.0.1 (also valid for client authentication, which
// etcd needs for its own gateway connection to itself) and the client
// certificate every subscriber and the writer present.
type peerPKI struct {
	certFile, keyFile, caFile string
	// clientCert and clientKey are the client certificate's files (a
	// subscriber process loads them: clientFiles).
	clientCert, clientKey string
	server, client        *tls.Config
}

func newPeerPKI(dir, name string) (*peerPKI, error) {
	const validity = 24 * time.Hour
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), name+"-bench-ca", validity)
	if err != nil {
		return nil, fmt.Errorf("%s CA: %w", name, err)
	}
	p := &peerPKI{caFile: filepath.Join(dir, "ca", pki.CACertFile)}
	if p.certFile, p.keyFile, err = ca.IssueFiles(dir, name+"-server", pki.Both, []string{"127.0.0.1"}, validity); err != nil {
		return nil, fmt.Errorf("%s server certificate: %w", name, err)
	}
	cliCert, cliKey, err := ca.IssueFiles(dir, name+"-client", pki.Client, nil, validity)
	if err != nil {
		return nil, fmt.Errorf("%s client certificate: %w", name, err)
	}
	if p.server, err = tlsconfig.Server(p.certFile, p.keyFile, p.caFile); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if p.client, err = tlsconfig.Client(cliCert, cliKey, p.caFile, "127.0.0.1"); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.clientCert, p.clientKey = cliCert, cliKey
	return p, nil
}

// clientPKI loads the client side of a peer's PKI from its files, in a
// subscriber process.
func clientPKI(certFile, keyFile, caFile string) (*peerPKI, error) {
	c, err := tlsconfig.Client(certFile, keyFile, caFile, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return &peerPKI{caFile: caFile, clientCert: certFile, clientKey: keyFile, client: c}, nil
}

// peerEvent is called by a subscriber for every change it is notified of:
// subscriber index, key, the value's sequence (its first 8 bytes, as
// valueSource writes them) and when it was notified.
type peerEvent func(i int, key string, seq uint64, at time.Time)

// peer is a key-value store with watches.
type peer interface {
	// name is "etcd" or "nats".
	name() string
	// setup writes the namespace's initial keys (prefix + key).
	put(ctx context.Context, key string, val []byte) error
	// subscribe connects n subscribers through proxy, each watching every
	// key under prefix from now on.
	subscribe(ctx context.Context, n int, proxyAddr, prefix string, ev peerEvent) error
	// addr is the address clients dial (the proxy's target).
	addr() string
	// transport is TransportPeerTLS or TransportPeerPlaintext.
	transport() string
	// close stops subscribers, the writer and the server.
	close()
}

// seqOf returns the sequence valueSource wrote into val.
func seqOf(val []byte) uint64 {
	if len(val) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(val)
}

// etcdPeer is an embedded single-member etcd, fsync on, like control's;
// clients use TLS 1.3 with a client certificate unless ctx says plaintext.
type etcdPeer struct {
	e       *embed.Etcd
	closing *atomic.Bool // drops etcd's expected shutdown errors
	// proc is the etcd server process, when the server is not embedded
	// (e is nil; the fair race); serverAddr is then its client address.
	// Without either, the peer is a subscriber process's client side.
	proc       *daemon
	serverAddr string
	scheme     string   // "https" or "http"
	pki        *peerPKI // nil in plaintext
	// perConn is how many subscribers share a client connection; 0:
	// watchersPerConn.
	perConn int
	writer  *clientv3.Client
	mu      sync.Mutex
	subs    []*clientv3.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startEtcdPeer starts the etcd peer in dir with the transport security of
// ctx (see withPeerTLS). It runs etcd's embed package directly rather than
// control/embedetcd, which serves plaintext only.
func startEtcdPeer(ctx context.Context, dir string, log *slog.Logger) (*etcdPeer, error) {
	p := &etcdPeer{closing: new(atomic.Bool), scheme: "http"}
	cfg := embed.NewConfig()
	cfg.Name = "etcd-peer"
	cfg.Dir = filepath.Join(dir, "etcd-peer")
	if peerTLSFrom(ctx) {
		pki, err := newPeerPKI(filepath.Join(dir, "etcd-pki"), "etcd")
		if err != nil {
			return nil, err
		}
		p.pki, p.scheme = pki, "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: pki.certFile, KeyFile: pki.keyFile, TrustedCAFile: pki.caFile, ClientCertAuth: true}
		cfg.TlsMinVersion = "TLS1.3"
	}
	// Port 0: the listeners pick free ports; a single member never dials its
	// own peer URL, so the unresolved advertised URLs are harmless.
	curl := url.URL{Scheme: p.scheme, Host: "127.0.0.1:0"}
	purl := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	cfg.LogLevel = "error"
	elog := log.With("component", "etcd-peer")
	closing := p.closing
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(writerFunc(func(b []byte) (int, error) {
			if !closing.Load() {
				elog.Error(strings.TrimSpace(string(b)))
			}
			return len(b), nil
		})),
		zapcore.ErrorLevel)))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	p.e = e
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		p.stopServer()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-ctx.Done():
		p.stopServer()
		return nil, fmt.Errorf("wait for etcd: %w", ctx.Err())
	}
	w, err := p.client(p.addr())
	if err != nil {
		p.stopServer()
		return nil, fmt.Errorf("etcd writer: %w", err)
	}
	p.writer = w
	return p, nil
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// client returns a client of the peer dialling addr (the server or a
// relay), with the peer's transport security.
func (p *etcdPeer) client(addr string) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            []string{p.scheme + "://" + addr},
		DialTimeout:          30 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		MaxCallRecvMsgSize:   64 << 20,
		Logger:               zap.NewNop(),
		BackoffWaitBetween:   20 * time.Millisecond,
		PermitWithoutStream:  true,
	}
	if p.pki != nil {
		cfg.TLS = p.pki.client.Clone()
	}
	return clientv3.New(cfg)
}

func (p *etcdPeer) stopServer() {
	p.closing.Store(true)
	if p.proc != nil {
		p.proc.stop(time.Minute)
	}
	if p.e == nil {
		return
	}
	p.e.Close()
	for range p.e.Err() {
	}
}

func (p *etcdPeer) name() string { return "etcd" }

func (p *etcdPeer) transport() string { return peerTransport(p.pki != nil) }

func (p *etcdPeer) addr() string {
	if p.e == nil {
		return p.serverAddr
	}
	return p.e.Clients[0].Addr().String()
}

func (p *etcdPeer) put(ctx context.Context, key string, val []byte) error {
	_, err := p.writer.Put(ctx, key, string(val))
	return err
}

func (p *etcdPeer) subscribe(ctx context.Context, n int, proxyAddr, prefix string, ev peerEvent) error {
	wctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	if p.cancel == nil {
		p.cancel = cancel
	} else {
		prev := p.cancel
		p.cancel = func() { prev(); cancel() }
	}
	p.mu.Unlock()
	rev := int64(0)
	if r, err := p.writer.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		rev = r.Header.Revision + 1
	}
	per := p.perConn
	if per <= 0 {
		per = watchersPerConn(n)
	}
	var c *clientv3.Client
	for i := range n {
		if i%per != 0 {
			p.watch(wctx, c, i, prefix, rev, ev)
			continue
		}
		var err error
		c, err = p.client(proxyAddr)
		if err != nil {
			return fmt.Errorf("etcd subscriber %d: %w", i, err)
		}
		p.mu.Lock()
		p.subs = append(p.subs, c)
		p.mu.Unlock()
		p.watch(wctx, c, i, prefix, rev, ev)
	}
	return nil
}

// watch starts subscriber i's watch on c.
func (p *etcdPeer) watch(ctx context.Context, c *clientv3.Client, i int, prefix string, rev int64, ev peerEvent) {
	wch := c.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for resp := range wch {
			now := time.Now()
			for _, e := range resp.Events {
				ev(i, string(e.Kv.Key), seqOf(e.Kv.Value), now)
			}
		}
	}()
}

// watchersPerConn is how many subscribers share one client connection:
// one each up to 2,000 subscribers; above, as many as keep the
// connections at 2,000, because both ends of every connection live in the
// bench process and 10,000 would exceed its file descriptor limit.
func watchersPerConn(n int) int {
	return max(1, (n+1999)/2000)
}

func (p *etcdPeer) close() {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	subs := p.subs
	p.mu.Unlock()
	for _, c := range subs {
		c.Close()
	}
	p.wg.Wait()
	if p.writer != nil {
		p.writer.Close()
	}
	p.stopServer()
}

// natsMaxConsumers is the embedded nats-server's per-stream consumer limit
// (JetStreamLimits.DefaultMaxConsumers, "jetstream { limits {
// default_max_consumers } }" in a server configuration file). Every KV watch
// is an ordered consumer of the bucket's stream (KV_bench). nats-server
// applies a default of 1,000 consumers per stream (JSDefaultMaxConsumersPerStream)
// when neither the stream nor the account sets a limit, and a KV bucket's
// stream sets none (MaxConsumers -1), so the 1,001st watch failed with
// "maximum consumers limit reached". The limit here allows 10,000 watchers
// with room for the ordered consumers that nats.go re-creates after a
// reconnect (storm) while the abandoned ones live out their inactivity
// threshold. The account's own JetStream limits stay unlimited (-1), the
// default for an embedded server without operator configuration.
const natsMaxConsumers = 50_000

// natsTLSTimeout bounds a client's TLS handshake on the NATS peer. The
// server's default (2 s) is shorter than 10,000 simultaneous handshakes
// take on 2 cores, which would turn a slow storm into failures; Lehr's
// distributor has no such deadline below its QUIC handshake timeout.
const natsTLSTimeout = 30 * time.Second

// natsPeer is an embedded nats-server with JetStream on disk, fsync on
// every write (SyncAlways: as durable as etcd and Lehr), and one KV bucket;
// clients use TLS 1.3 with a client certificate unless ctx says plaintext.
type natsPeer struct {
	srv *server.Server
	// proc is the nats-server process, when the server is not embedded
	// (srv is nil; the fair race); serverAddr is then its client address.
	// Without either, the peer is a subscriber process's client side.
	proc       *daemon
	serverAddr string
	// perConn is how many subscribers share a client connection; 0:
	// watchersPerConn.
	perConn int
	pki     *peerPKI // nil in plaintext
	wconn   *nats.Conn
	kv      jetstream.KeyValue
	bucket  string

	// watching is the watchers' context, ended by close: nats.go waits
	// on it in a goroutine per watcher, which would otherwise keep each
	// watcher and its connection reachable for the life of the process.
	watching    context.Context
	stopWatches context.CancelFunc

	mu    sync.Mutex
	conns []*nats.Conn
	wg    sync.WaitGroup
}

// startNATSPeer starts the NATS peer in dir with the transport security of
// ctx (see withPeerTLS).
func startNATSPeer(ctx context.Context, dir string) (*natsPeer, error) {
	opts := &server.Options{
		Host:       "127.0.0.1",
		Port:       -1, // random
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "nats"),
		SyncAlways: true,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 8 << 20,
		JetStreamLimits: server.JSLimitOpts{
			DefaultMaxConsumers: natsMaxConsumers,
		},
	}
	p := &natsPeer{bucket: "bench"}
	if peerTLSFrom(ctx) {
		pki, err := newPeerPKI(filepath.Join(dir, "nats-pki"), "nats")
		if err != nil {
			return nil, err
		}
		p.pki = pki
		// pki.ServerTLS requires and verifies client certificates
		// (tls.RequireAndVerifyClientCert), which nats-server reports as
		// tls_verify; TLS 1.3 only.
		opts.TLSConfig = pki.server.Clone()
		opts.TLSVerify = true
		opts.TLSTimeout = natsTLSTimeout.Seconds()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	p.srv = srv
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server not ready within 30s")
	}
	nc, err := p.connect(srv.Addr().String())
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: p.bucket, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, fmt.Errorf("create KV bucket: %w", err)
	}
	p.wconn, p.kv = nc, kv
	p.watching, p.stopWatches = context.WithCancel(context.Background())
	return p, nil
}

// connect opens a client connection to addr (the server or a relay) with
// the peer's transport security and a fast, endless reconnect.
func (p *natsPeer) connect(addr string) (*nats.Conn, error) {
	opts := []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.MaxReconnects(-1), nats.ReconnectJitter(0, 0)}
	if p.pki != nil {
		opts = append(opts, nats.Secure(p.pki.client.Clone()))
	}
	return nats.Connect("nats://"+addr, opts...)
}

func (p *natsPeer) name() string { return "nats" }

func (p *natsPeer) transport() string { return peerTransport(p.pki != nil) }

func (p *natsPeer) addr() string {
	if p.srv == nil {
		return p.serverAddr
	}
	return p.srv.Addr().String()
}

// natsKey maps a path-like key to a NATS KV key: no leading "/", "/" → ".".
func natsKey(key string) string {
	b := []byte(strings.TrimPrefix(key, "/"))
	for i, c := range b {
		if c == '/' {
			b[i] = '.'
		}
	}
	return string(b)
}

func (p *natsPeer) put(ctx context.Context, key string, val []byte) error {
	_, err := p.kv.Put(ctx, natsKey(key), val)
	return err
}

func (p *natsPeer) subscribe(ctx context.Context, n int, proxyAddr, prefix string, ev peerEvent) error {
	per := p.perConn
	if per <= 0 {
		per = watchersPerConn(n)
	}
	var kv jetstream.KeyValue
	for i := range n {
		if i%per == 0 {
			nc, err := p.connect(proxyAddr)
			if err != nil {
				return fmt.Errorf("nats subscriber %d: %w", i, err)
			}
			p.mu.Lock()
			p.conns = append(p.conns, nc)
			p.mu.Unlock()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			if kv, err = js.KeyValue(ctx, p.bucket); err != nil {
				return fmt.Errorf("nats subscriber %d: bucket: %w", i, err)
			}
		}
		w, err := kv.Watch(p.watching, natsKey(prefix)+">", jetstream.UpdatesOnly())
		if err != nil {
			return fmt.Errorf("nats subscriber %d: watch: %w", i, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for e := range w.Updates() {
				if e == nil {
					continue
				}
				ev(i, e.Key(), seqOf(e.Value()), time.Now())
			}
		}()
	}
	return nil
}

func (p *natsPeer) close() {
	p.mu.Lock()
	cs := p.conns
	p.mu.Unlock()
	// Closing a connection ends its watchers' update channels. (Stopping a
	// watcher first would ask the server to delete its consumer, which waits
	// out a timeout when the subscriber's relay is already gone.)
	for _, c := range cs {
		c.Close()
	}
	p.wg.Wait()
	p.stopWatches() // after the connections closed, so no watcher waits on the server
	if p.wconn != nil {
		p.wconn.Close()
	}
	if p.proc != nil {
		p.proc.stop(time.Minute)
	}
	if p.srv != nil {
		p.srv.Shutdown()
		p.srv.WaitForShutdown()
	}
}
