package bench

// The peers Lehr is compared with: etcd watch (embedded etcd, watchers
// through client/v3) and NATS JetStream KV watch (nats-server embedded as a
// library, watchers through nats.go). Each subscriber has its own client
// connection, as each host would (up to 2,000 connections: see
// watchersPerConn), and all subscribers connect through one
// counting TCP proxy so their bytes on the wire can be measured.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"lehr.dev/lehr/control/embedetcd"
)

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

// etcdPeer is an embedded single-member etcd, fsync on, like control's.
type etcdPeer struct {
	srv    *embedetcd.Server
	writer *clientv3.Client
	mu     sync.Mutex
	subs   []*clientv3.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startEtcdPeer(ctx context.Context, dir string, log *slog.Logger) (*etcdPeer, error) {
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: filepath.Join(dir, "etcd-peer"), Logger: log.With("component", "etcd-peer"), LogLevel: "error"})
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	w, err := srv.Client(ctx)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &etcdPeer{srv: srv, writer: w}, nil
}

func (p *etcdPeer) name() string { return "etcd" }

func (p *etcdPeer) addr() string {
	ep := p.srv.Endpoints()[0]
	if i := len("http://"); len(ep) > i && ep[:i] == "http://" {
		return ep[i:]
	}
	return ep
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
	per := watchersPerConn(n)
	var c *clientv3.Client
	for i := range n {
		if i%per != 0 {
			p.watch(wctx, c, i, prefix, rev, ev)
			continue
		}
		var err error
		c, err = clientv3.New(clientv3.Config{
			Endpoints:            []string{"http://" + proxyAddr},
			DialTimeout:          30 * time.Second,
			DialKeepAliveTime:    30 * time.Second,
			MaxCallRecvMsgSize:   64 << 20,
			Logger:               zap.NewNop(),
			BackoffWaitBetween:   20 * time.Millisecond,
			PermitWithoutStream:  true,
			AutoSyncInterval:     0,
			RejectOldCluster:     false,
			DialKeepAliveTimeout: 10 * time.Second,
		})
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
	p.writer.Close()
	p.srv.Close()
}

// natsPeer is an embedded nats-server with JetStream on disk, fsync on
// every write (SyncAlways: as durable as etcd and Lehr), and one KV bucket.
type natsPeer struct {
	srv    *server.Server
	wconn  *nats.Conn
	kv     jetstream.KeyValue
	bucket string

	mu    sync.Mutex
	conns []*nats.Conn
	wg    sync.WaitGroup
}

func startNATSPeer(ctx context.Context, dir string) (*natsPeer, error) {
	srv, err := server.NewServer(&server.Options{
		Host:       "127.0.0.1",
		Port:       -1, // random
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "nats"),
		SyncAlways: true,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server not ready within 30s")
	}
	nc, err := nats.Connect(srv.ClientURL())
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench", Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, fmt.Errorf("create KV bucket: %w", err)
	}
	return &natsPeer{srv: srv, wconn: nc, kv: kv, bucket: "bench"}, nil
}

func (p *natsPeer) name() string { return "nats" }

func (p *natsPeer) addr() string { return p.srv.Addr().String() }

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
	per := watchersPerConn(n)
	var kv jetstream.KeyValue
	for i := range n {
		if i%per == 0 {
			nc, err := nats.Connect("nats://"+proxyAddr, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1), nats.ReconnectJitter(0, 0))
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
		w, err := kv.Watch(context.Background(), natsKey(prefix)+">", jetstream.UpdatesOnly())
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
	p.wconn.Close()
	p.srv.Shutdown()
	p.srv.WaitForShutdown()
}
