// Package embedetcd runs etcd inside the current process, for control's
// default single-member deployment ("one command, no setup") and for tests
// that need a real etcd, including a multi-member cluster whose members can
// be stopped and restarted to exercise failover.
//
// Imported by control and control/backup (lehr control restore); agents
// and distributors never link etcd.
package embedetcd

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"lehr.dev/lehr/internal/pki"
)

// DefaultMaxRequestBytes is etcd's own default request size limit (1.5 MiB).
// It is kept as the default so that callers writing large values are
// exercised against the same limit an external etcd enforces.
const DefaultMaxRequestBytes = embed.DefaultMaxRequestBytes

// autoURL is the URL form that asks Start to pick a free loopback port.
const autoURL = "http://127.0.0.1:0"

// Defaults of Options.CompactionBatchLimit and
// Options.SnapshotCatchUpEntries.
const (
	DefaultCompactionBatchLimit   = 64
	DefaultSnapshotCatchUpEntries = 100
)

// DefaultProgressNotifyInterval is the default
// Options.ProgressNotifyInterval: well within the hourly auto-compaction.
const DefaultProgressNotifyInterval = time.Minute

// Options configures Start. Only Dir is required.
type Options struct {
	// Dir is the data directory; it is created if missing. Starting again on
	// the same Dir recovers the data stored there.
	Dir string
	// Name is the member name, default "default".
	Name string
	// ClientURL and PeerURL are the URLs the member listens on and
	// advertises. The default "http://127.0.0.1:0" picks a free loopback
	// port; a URL with port 0 is resolved to a concrete port before etcd
	// starts, because a member's peer URL must be known to the whole
	// cluster in advance. If binding a picked port fails (another process
	// took it in between) Start retries with new ports.
	ClientURL, PeerURL string
	// InitialCluster is etcd's --initial-cluster ("m0=http://...,m1=...");
	// default: this member alone. It is ignored when Dir already holds data.
	InitialCluster string
	// ClusterState is "new" (default) or "existing".
	ClusterState string
	// Logger receives etcd's own log entries at or above LogLevel; default
	// slog.Default().
	Logger *slog.Logger
	// LogLevel is the lowest etcd log level passed to Logger: "debug",
	// "info", "warn" or "error" (default). etcd is chatty; raise the
	// verbosity only when debugging etcd itself.
	LogLevel string
	// MaxRequestBytes is the largest client request etcd accepts; default
	// DefaultMaxRequestBytes (1.5 MiB).
	MaxRequestBytes uint
	// QuotaBackendBytes is etcd's backend quota: the size its database
	// may reach before etcd refuses writes and raises its NOSPACE alarm.
	// 0: etcd's default (2 GiB).
	QuotaBackendBytes int64
	// CompactionBatchLimit bounds the revisions one step of etcd's
	// revision compaction deletes; default DefaultCompactionBatchLimit.
	// Deleting a revision rewrites the database page that holds it, and
	// next to a large value that is the value too, so a step grows the
	// database by up to this many of Lehr's largest values (512 KiB)
	// before the pages it freed are reused: the reserve a store keeps
	// under its quota must hold that (control/store, space.go).
	CompactionBatchLimit int
	// SnapshotCatchUpEntries is how many raft entries etcd keeps in
	// memory for a slow follower; default
	// DefaultSnapshotCatchUpEntries. Entries are up to a request each
	// (Lehr stages blobs in 1 MiB transactions), so etcd's default of
	// 5,000 held gigabytes under a flood of large publishes.
	SnapshotCatchUpEntries uint64
	// AutoCompaction is how much MVCC history etcd keeps: it compacts
	// revisions older than this, periodically. Without it every overwritten
	// value stays in etcd's database until the backend quota is exhausted.
	// Watches resuming from a compacted revision fail (the store reports
	// ErrRevisionGone and watchers restart from the current state).
	// Default one hour; negative disables auto-compaction.
	AutoCompaction time.Duration
	// ProgressNotifyInterval is how often etcd tells watchers that asked
	// for progress notifications how far it has got when nothing they
	// watch changed; zero means DefaultProgressNotifyInterval (1 minute).
	// Lehr's goal watches ask, so a quiet zone's resume revision keeps up
	// with etcd's and a reconnect after a compaction resumes.
	ProgressNotifyInterval time.Duration
	// NoSync disables fsync of etcd's WAL and database. Data survives a
	// process restart but not a machine crash. The zero value is durable;
	// tests only.
	NoSync bool
	// Private makes the member reachable only through unix sockets in a
	// directory only this process's user may enter (mode 0700): Dir +
	// ".sock", or, when that path is too long for a socket, a fresh
	// directory under the system's temporary directory that Close removes.
	// ClientURL and PeerURL are ignored: the client API is a unix socket
	// there, and the peer API (which etcd cannot serve on a filesystem
	// socket) a loopback port that requires TLS with a client certificate
	// from a CA made for the member and kept in that directory, so nobody
	// can connect to it. A loopback TCP port is open to every local user;
	// control's embedded etcd runs private so that no other user of the
	// machine can read or write its keys.
	Private bool
	// CompactAtStart, when above 0, rewrites the member's database without
	// its free pages before etcd opens it, when at least this fraction of
	// the file is free (0.1: a tenth): etcd's defragmentation, done while
	// nobody waits on the member (an online one stalls every request for
	// about a second per GiB). Server.Compacted says what it did.
	CompactAtStart float64

	// peerTLS is the peer TLS of a Private member.
	peerTLS *transport.TLSInfo
}

// maxSocketPath bounds a unix socket path (108 bytes on Linux, 104 on
// some BSDs, with room for the terminating NUL).
const maxSocketPath = 100

// Server is one running embedded etcd member.
type Server struct {
	opts      Options // resolved: concrete URLs, defaults applied
	tempDir   string  // a Private member's socket directory to remove, if temporary
	etcd      *embed.Etcd
	closing   *atomic.Bool // silences etcd's expected shutdown errors
	closeOnce sync.Once
	compacted CompactResult
}

// Start starts an etcd member and waits until it is ready to serve clients
// (for a new multi-member cluster: until a quorum has formed) or ctx is done.
// On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("embedetcd: Options.Dir is required")
	}
	if opts.Name == "" {
		opts.Name = "default"
	}
	if opts.ClientURL == "" {
		opts.ClientURL = autoURL
	}
	if opts.PeerURL == "" {
		opts.PeerURL = autoURL
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.ClusterState == "" {
		opts.ClusterState = embed.ClusterStateFlagNew
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "error"
	}
	if opts.AutoCompaction == 0 {
		opts.AutoCompaction = time.Hour
	}
	var compacted CompactResult
	if opts.CompactAtStart > 0 {
		var err error
		if compacted, err = compactDB(ctx, opts.Dir, opts.CompactAtStart, opts.Logger); err != nil {
			return nil, fmt.Errorf("embedetcd: %w", err)
		}
	}
	s, err := startAny(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.compacted = compacted
	return s, nil
}

// startAny starts the member Start's defaulted opts describe.
func startAny(ctx context.Context, opts Options) (*Server, error) {
	if opts.Private {
		return startPrivate(ctx, opts)
	}
	auto := hasPortZero(opts.ClientURL) || hasPortZero(opts.PeerURL)
	if auto && opts.InitialCluster != "" && hasPortZero(opts.PeerURL) {
		return nil, errors.New("embedetcd: Options.PeerURL must have a concrete port when InitialCluster is set")
	}
	const attempts = 5
	var err error
	for range attempts {
		resolved := opts
		if resolved.ClientURL, err = resolvePort(opts.ClientURL); err != nil {
			return nil, err
		}
		if resolved.PeerURL, err = resolvePort(opts.PeerURL); err != nil {
			return nil, err
		}
		var s *Server
		s, err = start(ctx, resolved)
		if err == nil {
			return s, nil
		}
		if !auto || !isAddrInUse(err) || ctx.Err() != nil {
			return nil, err
		}
		opts.Logger.Debug("embedetcd: picked port was taken, retrying", "err", err)
	}
	return nil, err
}

// startPrivate starts a member on unix sockets in a 0700 directory.
func startPrivate(ctx context.Context, opts Options) (*Server, error) {
	dir, temp := opts.Dir+".sock", ""
	if len(dir)+len("/client") > maxSocketPath {
		t, err := os.MkdirTemp("", "lehr-etcd-")
		if err != nil {
			return nil, fmt.Errorf("embedetcd: socket directory: %w", err)
		}
		dir, temp = t, t
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedetcd: socket directory: %w", err)
	}
	// An existing directory may have been made with other modes.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedetcd: socket directory: %w", err)
	}
	client := filepath.Join(dir, "client")
	// A socket a crash left behind would fail the listen.
	if err := os.Remove(client); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("embedetcd: remove stale socket: %w", err)
	}
	fail := func(err error) (*Server, error) {
		if temp != "" {
			os.RemoveAll(temp)
		}
		return nil, err
	}
	tlsDir := filepath.Join(dir, "peer-tls")
	ca, err := pki.NewCA(tlsDir, "lehr-etcd-peers-"+opts.Name, peerTLSValidity)
	if err != nil {
		return fail(fmt.Errorf("embedetcd: peer CA: %w", err))
	}
	certFile, keyFile, err := ca.IssueFiles(tlsDir, "peer", pki.Both, []string{"127.0.0.1"}, peerTLSValidity)
	if err != nil {
		return fail(fmt.Errorf("embedetcd: peer certificate: %w", err))
	}
	opts.peerTLS = &transport.TLSInfo{
		CertFile: certFile, KeyFile: keyFile, TrustedCAFile: filepath.Join(tlsDir, pki.CACertFile),
		ClientCertAuth: true,
	}
	opts.ClientURL = "unix://" + client
	const attempts = 5
	for range attempts {
		if opts.PeerURL, err = resolvePort("https://127.0.0.1:0"); err != nil {
			return fail(err)
		}
		var s *Server
		if s, err = start(ctx, opts); err == nil {
			s.tempDir = temp
			return s, nil
		}
		if !isAddrInUse(err) || ctx.Err() != nil {
			break
		}
	}
	return fail(err)
}

// peerTLSValidity is how long a private member's peer certificates last;
// they are made again when missing, and only this member uses them.
const peerTLSValidity = 10 * 365 * 24 * time.Hour

func start(ctx context.Context, opts Options) (*Server, error) {
	curl, err := url.Parse(opts.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: parse ClientURL %q: %w", opts.ClientURL, err)
	}
	purl, err := url.Parse(opts.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: parse PeerURL %q: %w", opts.PeerURL, err)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedetcd: create data dir: %w", err)
	}
	lvl, err := zapcore.ParseLevel(opts.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: Options.LogLevel %q: want debug, info, warn or error", opts.LogLevel)
	}

	cfg := embed.NewConfig()
	cfg.Name = opts.Name
	cfg.Dir = opts.Dir
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	if opts.peerTLS != nil {
		cfg.PeerTLSInfo = *opts.peerTLS
	}
	cfg.InitialCluster = opts.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(opts.Name)
	}
	cfg.ClusterState = opts.ClusterState
	cfg.MaxRequestBytes = opts.MaxRequestBytes
	cfg.QuotaBackendBytes = opts.QuotaBackendBytes
	cfg.CompactionBatchLimit = cmp.Or(opts.CompactionBatchLimit, DefaultCompactionBatchLimit)
	cfg.SnapshotCatchUpEntries = cmp.Or(opts.SnapshotCatchUpEntries, DefaultSnapshotCatchUpEntries)
	cfg.UnsafeNoFsync = opts.NoSync
	if opts.AutoCompaction >= 0 {
		cfg.AutoCompactionMode = embed.CompactorModePeriodic
		cfg.AutoCompactionRetention = opts.AutoCompaction.String()
	}
	cfg.LogLevel = opts.LogLevel
	cfg.WatchProgressNotifyInterval = opts.ProgressNotifyInterval
	if cfg.WatchProgressNotifyInterval <= 0 {
		cfg.WatchProgressNotifyInterval = DefaultProgressNotifyInterval
	}
	closing := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(&slogCore{
		logger:  opts.Logger.With("component", "etcd", "member", opts.Name),
		level:   lvl,
		closing: closing,
	}))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start member %s: %w", opts.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedetcd: member %s failed while starting: %w", opts.Name, err)
	case <-e.Server.StopNotify():
		closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedetcd: member %s stopped while starting", opts.Name)
	case <-ctx.Done():
		closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedetcd: wait for member %s to be ready: %w", opts.Name, ctx.Err())
	}
	return &Server{opts: opts, etcd: e, closing: closing}, nil
}

// Compacted says whether Options.CompactAtStart rewrote the database
// before the member started, and its sizes.
func (s *Server) Compacted() CompactResult { return s.compacted }

// Endpoints returns the client URLs of the member.
func (s *Server) Endpoints() []string { return []string{s.opts.ClientURL} }

// PeerURL returns the peer URL of the member.
func (s *Server) PeerURL() string { return s.opts.PeerURL }

// Dir returns the data directory.
func (s *Server) Dir() string { return s.opts.Dir }

// Err reports a fatal error of the running member (for example losing its
// listener). It is closed after Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Client returns a new client of this member that the caller must close.
// ctx bounds the dial only.
func (s *Server) Client(ctx context.Context) (*clientv3.Client, error) {
	return NewClient(ctx, s.Endpoints())
}

// InProcessClient returns a client that calls the member directly, in
// this process, through etcd's own server interfaces (v3client): no
// socket, no HTTP/2 framing, no encoding of requests. It reads and writes
// exactly as a client of Client does, only with less latency: control's
// publishes make several etcd requests in a row (bench/results/HISTORY.md,
// "Publish: fewer etcd requests, and etcd in process"). The caller must
// Close it before the member.
func (s *Server) InProcessClient() *clientv3.Client { return v3client.New(s.etcd.Server) }

// Close stops the member and waits for it to release its data directory
// and ports. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.etcd.Close()
		// Drain errors reported while closing; errc is closed by Close.
		for range s.etcd.Err() {
		}
		if s.tempDir != "" {
			os.RemoveAll(s.tempDir)
		}
	})
	return nil
}

// NewClient dials etcd at endpoints with Lehr's defaults: the client's own
// zap logging is off (errors surface as returned errors instead) and the
// request size limit matches etcd's default. ctx bounds the dial only.
func NewClient(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	return NewTLSClient(ctx, endpoints, nil)
}

// NewTLSClient is NewClient over TLS with tlsCfg (its CA, and the client
// certificate an etcd requiring client certificates checks); nil means
// plaintext.
func NewTLSClient(ctx context.Context, endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: 10 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		// Fail over between members quickly; the server keeps a watch
		// stream alive with its own keepalives too.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("embedetcd: dial %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

func hasPortZero(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Port() == "0"
}

// resolvePort replaces port 0 in raw with a port that was free a moment ago.
func resolvePort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("embedetcd: parse URL %q: %w", raw, err)
	}
	if u.Port() != "0" {
		return raw, nil
	}
	port, err := freePort(u.Hostname())
	if err != nil {
		return "", err
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	return u.String(), nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("embedetcd: pick a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
