package bench

// The peers as real server processes, for the fair race: etcd's and
// nats-server's own main packages, built from the modules go.mod already
// requires (etcd's server is a tool there; nats-server's main imports only
// its server package, which the embedded peer uses), so they are the very
// versions the embedded peers run, built from the module cache without
// network, root or Debian's older packages (Debian bookworm ships etcd
// 3.4 and nats-server 2.9; go.mod has etcd 3.7.3 and nats-server 2.15.2).

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"lehr.dev/lehr/testenv/cpupin"
)

// The main packages the peers' server processes are built from.
const (
	etcdMainPackage = "go.etcd.io/etcd/server/v3"
	natsMainPackage = "github.com/nats-io/nats-server/v2"
)

// buildMain builds the main package pkg of the module graph into
// dir/name, reading go.mod and go.sum as they are.
func buildMain(ctx context.Context, dir, name, pkg string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", pkg, err, out)
	}
	return bin, nil
}

// startPinned starts bin with args as a daemon on cpus (cpupin.Wrap);
// metricsAddr is where it serves /metrics, if it does.
func startPinned(name, bin, logPath, metricsAddr string, cpus cpupin.Set, args []string) (*daemon, error) {
	wbin, wargs, err := cpupin.Wrap(cpus, bin, args)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	return startDaemon(name, wbin, logPath, metricsAddr, wargs)
}

// startEtcdProc starts the etcd peer as a server process of bin on cpus,
// as the embedded peer is configured (startEtcdPeer): one member, fsync
// on, periodic compaction, TLS 1.3 with client certificates unless ctx
// says plaintext.
func startEtcdProc(ctx context.Context, dir, bin string, cpus cpupin.Set) (*etcdPeer, error) {
	p := &etcdPeer{closing: new(atomic.Bool), scheme: "http"}
	var tlsArgs []string
	if peerTLSFrom(ctx) {
		pki, err := newPeerPKI(filepath.Join(dir, "etcd-pki"), "etcd")
		if err != nil {
			return nil, err
		}
		p.pki, p.scheme = pki, "https"
		tlsArgs = []string{"--cert-file", pki.certFile, "--key-file", pki.keyFile, "--trusted-ca-file", pki.caFile,
			"--client-cert-auth", "--tls-min-version", "TLS1.3"}
	}
	caddr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	paddr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	p.serverAddr = caddr
	curl := (&url.URL{Scheme: p.scheme, Host: caddr}).String()
	purl := (&url.URL{Scheme: "http", Host: paddr}).String()
	args := append([]string{"--name", "etcd-peer", "--data-dir", filepath.Join(dir, "etcd-peer"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "etcd-peer=" + purl, "--initial-cluster-state", "new",
		"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h",
		"--log-level", "error"}, tlsArgs...)
	if p.proc, err = startPinned("etcd", bin, filepath.Join(dir, "etcd.log"), "", cpus, args); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		err := p.ping(ctx)
		if err == nil {
			return p, nil
		}
		if aerr := p.proc.alive(); aerr != nil {
			return nil, aerr
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			p.stopServer()
			return nil, fmt.Errorf("etcd process did not serve within %v: %w", startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ping opens the writer if it is not open and reads through it.
func (p *etcdPeer) ping(ctx context.Context) error {
	if p.writer == nil {
		w, err := p.client(p.serverAddr)
		if err != nil {
			return err
		}
		p.writer = w
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := p.writer.Get(cctx, "/ping")
	return err
}

// startNATSProc starts the NATS peer as a nats-server process of bin on
// cpus, configured as the embedded peer is (startNATSPeer): JetStream on
// disk with sync always, the same consumer limit and payload size, TLS 1.3
// with verified client certificates unless ctx says plaintext.
func startNATSProc(ctx context.Context, dir, bin string, cpus cpupin.Set) (*natsPeer, error) {
	p := &natsPeer{bucket: "bench"}
	addr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	p.serverAddr = addr
	var conf strings.Builder
	fmt.Fprintf(&conf, "listen: %q\nmax_payload: %d\n", addr, 8<<20)
	fmt.Fprintf(&conf, "jetstream {\n  store_dir: %q\n  sync_interval: always\n  limits {\n    default_max_consumers: %d\n  }\n}\n",
		filepath.Join(dir, "nats"), natsMaxConsumers)
	if peerTLSFrom(ctx) {
		pki, err := newPeerPKI(filepath.Join(dir, "nats-pki"), "nats")
		if err != nil {
			return nil, err
		}
		p.pki = pki
		fmt.Fprintf(&conf, "tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: %g\n  min_version: \"1.3\"\n}\n",
			pki.certFile, pki.keyFile, pki.caFile, natsTLSTimeout.Seconds())
	}
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	if p.proc, err = startPinned("nats-server", bin, filepath.Join(dir, "nats.log"), "", cpus, []string{"--config", confPath}); err != nil {
		return nil, err
	}
	fail := func(err error) (*natsPeer, error) {
		if p.wconn != nil {
			p.wconn.Close()
		}
		p.proc.stop(time.Minute)
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		nc, err := p.connect(addr)
		if err == nil {
			p.wconn = nc
			break
		}
		if aerr := p.proc.alive(); aerr != nil {
			return fail(aerr)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fail(fmt.Errorf("nats-server process did not serve within %v: %w", startTimeout, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	js, err := jetstream.New(p.wconn)
	if err != nil {
		return fail(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: p.bucket, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		return fail(fmt.Errorf("create KV bucket: %w", err))
	}
	p.kv = kv
	p.watching, p.stopWatches = context.WithCancel(context.Background())
	return p, nil
}

// watchConfig makes a subscriber process watch a peer instead of running
// simulated agents (swarmConfig.Watch).
type watchConfig struct {
	// System is "etcd" or "nats".
	System string `json:"system"`
	// Addr is the server's client address.
	Addr string `json:"addr"`
	// CA, Cert and Key are the client's TLS files; empty: plaintext.
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// Prefix is the key prefix every subscriber watches.
	Prefix string `json:"prefix"`
	// Bucket is the NATS KV bucket.
	Bucket string `json:"bucket,omitempty"`
	// PerConn is how many subscribers share a connection.
	PerConn int `json:"per_conn"`
}

// watchConfigOf returns the configuration that has a subscriber process
// watch prefix on pr with perConn subscribers per connection.
func watchConfigOf(pr peer, prefix string, perConn int) watchConfig {
	wc := watchConfig{System: pr.name(), Addr: pr.addr(), Prefix: prefix, PerConn: perConn}
	var pki *peerPKI
	switch p := pr.(type) {
	case *etcdPeer:
		pki = p.pki
	case *natsPeer:
		pki, wc.Bucket = p.pki, p.bucket
	}
	if pki != nil {
		wc.CA, wc.Cert, wc.Key = pki.caFile, pki.clientCert, pki.clientKey
	}
	return wc
}

// watchClient returns the client side of the peer wc names, in a
// subscriber process: subscribe and close work, put does not.
func watchClient(ctx context.Context, wc watchConfig) (peer, error) {
	var pki *peerPKI
	if wc.Cert != "" {
		var err error
		if pki, err = clientPKI(wc.Cert, wc.Key, wc.CA); err != nil {
			return nil, err
		}
	}
	switch wc.System {
	case "etcd":
		p := &etcdPeer{closing: new(atomic.Bool), serverAddr: wc.Addr, scheme: "http", pki: pki, perConn: wc.PerConn}
		if pki != nil {
			p.scheme = "https"
		}
		// The writer only reads the revision the watches start after.
		w, err := p.client(wc.Addr)
		if err != nil {
			return nil, err
		}
		p.writer = w
		return p, nil
	case "nats":
		p := &natsPeer{serverAddr: wc.Addr, bucket: wc.Bucket, pki: pki, perConn: wc.PerConn}
		p.watching, p.stopWatches = context.WithCancel(context.Background())
		return p, nil
	}
	return nil, fmt.Errorf("watch: unknown system %q", wc.System)
}
