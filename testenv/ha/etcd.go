package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/testenv/chaos"
)

// BuildEtcd builds etcd's server into dir and returns the binary's path.
// It is the etcd module Lehr embeds (go.mod lists it as a tool), so the
// members run the same etcd version as "lehr control" does on its own,
// built from the module cache without network or root.
func BuildEtcd(ctx context.Context, dir string, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	bin := filepath.Join(dir, "etcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/server/v3")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ha: build etcd: %w", err)
	}
	return bin, nil
}

// BuildEtcdutl builds etcd's offline tool, etcdutl, into dir and returns
// the binary's path: the etcdutl an operator restores an external cluster
// with (docs/operations.md, "Backup and restore"), at the etcd version
// Lehr embeds. It cannot be a dependency of Lehr's module (see
// control/backup/etcdrestore.go), so it is built from a module of its own,
// testenv/ha/etcdutl, which pins it as a tool at go.mod's etcd version;
// its dependencies come from the module cache, or the module proxy the
// first time.
func BuildEtcdutl(ctx context.Context, dir string, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	root, err := etcdutlModule(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "etcdutl")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/etcdutl/v3")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ha: build etcdutl (module %s): %w", root, err)
	}
	return bin, nil
}

// etcdutlModule is the directory of the module BuildEtcdutl builds from:
// testenv/ha/etcdutl under the main module's root.
func etcdutlModule(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("ha: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("ha: not inside a Go module")
	}
	return filepath.Join(filepath.Dir(gomod), "testenv", "ha", "etcdutl"), nil
}

// Etcd is an etcd cluster of member processes on loopback, each
// supervised as systemd would (chaos.Proc): a member that exits without
// being killed is restarted. Clients reach it over mutual TLS: each member
// serves https with a certificate of the cluster's own CA and requires a
// client certificate it issued (--client-cert-auth), as operations.md
// asks of an etcd holding every tenant's configuration.
type Etcd struct {
	Members []*Member
	// TLS are the files a client needs: the CA that issued the members'
	// certificates, and a client certificate and key it issued.
	TLS chaos.EtcdTLS

	ca  *pki.CA
	dir string
	cli *clientv3.Client
}

// Member is one etcd member process.
type Member struct {
	*chaos.Proc
	Name, ClientURL, PeerURL string
	// DataDir is the member's --data-dir. A member started on a data
	// directory that already holds a member (its WAL) ignores its
	// --initial-cluster flags: one restored by etcdutl starts as the
	// restore made it.
	DataDir string
}

// EtcdOptions configure StartEtcd.
type EtcdOptions struct {
	// Binary is the etcd server (BuildEtcd). Required.
	Binary string
	// Dir holds every member's data and log. Keep it short (the members'
	// notification sockets live under it).
	Dir string
	// Members is the cluster's size; 0 means 3.
	Members int
	Logger  *slog.Logger
}

// StartEtcd starts a new cluster and waits until every member is ready
// (joined, with a leader). ctx bounds the start; run bounds supervision.
func StartEtcd(ctx, run context.Context, opts EtcdOptions) (_ *Etcd, err error) {
	n := opts.Members
	if n == 0 {
		n = 3
	}
	e := &Etcd{dir: filepath.Join(opts.Dir, "etcd-pki")}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.ca, err = pki.NewCA(e.dir, "lehr-ha-etcd-CA", 24*time.Hour); err != nil {
		return nil, fmt.Errorf("ha: etcd CA: %w", err)
	}
	e.TLS.CA = filepath.Join(e.dir, pki.CACertFile)
	if e.TLS.Cert, e.TLS.Key, err = e.ca.IssueFiles(e.dir, "lehr-control", pki.Client, nil, 24*time.Hour); err != nil {
		return nil, fmt.Errorf("ha: etcd client certificate: %w", err)
	}
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i)}
		for _, url := range []*string{&m.ClientURL, &m.PeerURL} {
			port, err := chaos.FreeTCPPort()
			if err != nil {
				return nil, err
			}
			*url = fmt.Sprintf("http://127.0.0.1:%d", port)
		}
		m.ClientURL = "https" + strings.TrimPrefix(m.ClientURL, "http")
		e.Members = append(e.Members, m)
	}
	for _, m := range e.Members {
		dir := filepath.Join(opts.Dir, "etcd-"+m.Name)
		m.DataDir = filepath.Join(dir, "data")
		cert, key, err := e.ca.IssueFiles(e.dir, "etcd-"+m.Name, pki.Server, []string{"127.0.0.1"}, 24*time.Hour)
		if err != nil {
			return nil, fmt.Errorf("ha: etcd %s certificate: %w", m.Name, err)
		}
		if m.Proc, err = chaos.NewProc(run, "etcd "+m.Name, opts.Binary, dir, []string{
			"--name", m.Name, "--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", e.InitialCluster(), "--initial-cluster-state", "new",
			"--initial-cluster-token", "lehr-ha",
			"--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", e.TLS.CA,
		}, opts.Logger); err != nil {
			return nil, err
		}
	}
	// A member is ready once the cluster has a leader: start them all at
	// once.
	if err := e.Start(ctx, e.Members...); err != nil {
		return nil, err
	}
	tc, err := tlsconfig.Client(e.TLS.Cert, e.TLS.Key, e.TLS.CA, "")
	if err != nil {
		return nil, fmt.Errorf("ha: etcd client TLS: %w", err)
	}
	if e.cli, err = clientv3.New(clientv3.Config{
		Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tc,
	}); err != nil {
		return nil, fmt.Errorf("ha: etcd client: %w", err)
	}
	return e, nil
}

// ForeignClient issues, under dir, a client certificate and key from a CA
// the members do not trust: what a misconfigured replica would hold.
func (e *Etcd) ForeignClient(dir string) (chaos.EtcdTLS, error) {
	other, err := pki.NewCA(dir, "another-CA", time.Hour)
	if err != nil {
		return chaos.EtcdTLS{}, err
	}
	cert, key, err := other.IssueFiles(dir, "lehr-control", pki.Client, nil, time.Hour)
	return chaos.EtcdTLS{CA: e.TLS.CA, Cert: cert, Key: key}, err
}

// Endpoints are the members' client URLs.
func (e *Etcd) Endpoints() []string {
	var urls []string
	for _, m := range e.Members {
		urls = append(urls, m.ClientURL)
	}
	return urls
}

// Client is a client of every member.
func (e *Etcd) Client() *clientv3.Client { return e.cli }

// Start starts ms (members Kill left down) at once and waits until each
// is ready, which needs a quorum.
func (e *Etcd) Start(ctx context.Context, ms ...*Member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = m.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops ms at once, as "systemctl stop" does (SIGTERM, then SIGKILL
// after 10 s), and waits until each has exited; they stay down until
// Start.
func (e *Etcd) Stop(ms ...*Member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { _, errs[i] = m.Stop(10 * time.Second) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// InitialCluster is the members' --initial-cluster: name=peer URL, each.
func (e *Etcd) InitialCluster() string {
	var s []string
	for _, m := range e.Members {
		s = append(s, m.Name+"="+m.PeerURL)
	}
	return strings.Join(s, ",")
}

// statuses asks every running member for its status at once (served
// locally, without the quorum); a member that does not answer within
// 500 ms is left out.
func (e *Etcd) statuses(ctx context.Context) map[*Member]*clientv3.StatusResponse {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	out := map[*Member]*clientv3.StatusResponse{}
	var wg sync.WaitGroup
	for _, m := range e.Members {
		if !m.Running() {
			continue
		}
		wg.Go(func() {
			st, err := e.cli.Status(ctx, m.ClientURL)
			if err != nil {
				return
			}
			mu.Lock()
			out[m] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Leader returns the member that leads, and its id: a running member
// that says it leads, no other following a different one. It fails when
// there is none.
func (e *Etcd) Leader(ctx context.Context) (*Member, uint64, error) {
	sts := e.statuses(ctx)
	for m, st := range sts {
		if st.Leader == 0 || st.Leader != st.Header.GetMemberId() {
			continue
		}
		for _, other := range sts { // none follows another
			if other.Leader != 0 && other.Leader != st.Leader {
				return nil, 0, fmt.Errorf("ha: etcd members disagree on the leader (%x, %x)", st.Leader, other.Leader)
			}
		}
		return m, st.Leader, nil
	}
	return nil, 0, errors.New("ha: no running etcd member says it leads")
}

// HasLeader reports whether a running member leads, as it and any other
// member that reports a leader say, and is not in not.
func (e *Etcd) HasLeader(ctx context.Context, not map[uint64]bool) bool {
	_, id, err := e.Leader(ctx)
	return err == nil && !not[id]
}

// Healthy checks that every member runs and the cluster answers a
// linearizable read, which needs a leader and a quorum.
func (e *Etcd) Healthy(ctx context.Context) error {
	for _, m := range e.Members {
		if !m.Ready() {
			return fmt.Errorf("etcd %s is not running", m.Name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := e.cli.Get(ctx, "ha-health"); err != nil {
		return fmt.Errorf("etcd read: %w", err)
	}
	return nil
}

// Failures returns the members' unexpected exits.
func (e *Etcd) Failures() []string {
	var out []string
	for _, m := range e.Members {
		if m.Proc != nil {
			out = append(out, m.Proc.Failures()...)
		}
	}
	return out
}

// Close ends the client and every member (SIGTERM, then SIGKILL).
func (e *Etcd) Close() error {
	var err error
	if e.cli != nil {
		err = e.cli.Close()
	}
	var wg sync.WaitGroup
	for _, m := range e.Members {
		if m.Proc != nil {
			wg.Go(func() { m.Close(10 * time.Second) })
		}
	}
	wg.Wait()
	return err
}
