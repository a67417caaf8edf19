package agent_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/demoservice"
	"lehr.dev/lehr/testenv/wait"
)

const (
	zone   = "zone-a"
	domain = "app"
	host   = "host-1"
)

// harness runs a real control plane (embedded etcd) and real distributors
// of one zone on loopback, and agents against them.
type harness struct {
	t     *testing.T
	pkiD  string
	ca    *pki.CA
	ctl   *controltest.Server
	dists []*dist
}

type dist struct {
	d    *distributor.Distributor
	addr string
	done chan error
	once sync.Once
}

func (d *dist) stop(t *testing.T) {
	d.once.Do(func() {
		d.d.Close()
		if err := <-d.done; err != nil {
			t.Errorf("distributor Run: %v", err)
		}
	})
}

func newHarness(t *testing.T, distributors int) *harness {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "lehr-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, pkiD: dir, ca: ca}
	h.ctl = controltest.StartControl(t, control.Options{})
	// Tests patch in bursts (100 in a row): a rate above the default,
	// which the test's caller may set (a fleet admin in dev mode).
	if _, err := h.ctl.Client.CreateDomain(ctx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: domain,
		Quotas: &lehrpb.Quotas{PublishesPerSecond: 1000, PublishBurst: 1000}}}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	if _, err := h.ctl.Client.CreateZone(ctx(t), &lehrpb.CreateZoneRequest{Name: zone}); err != nil {
		t.Fatalf("CreateZone: %v", err)
	}
	for i := range distributors {
		h.dists = append(h.dists, h.startDist(fmt.Sprintf("dist-%d", i)))
	}
	return h
}

func (h *harness) tls(name string, kind pki.Kind) *tls.Config {
	h.t.Helper()
	id := tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: name}.URI()
	if kind == pki.Client {
		id = tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: name}.URI()
	}
	c, k, err := h.ca.IssueURIFiles(filepath.Join(h.pkiD, "leaf"), name, kind, nil, id, time.Hour)
	if err != nil {
		h.t.Fatal(err)
	}
	caFile := filepath.Join(h.pkiD, "ca", pki.CACertFile)
	var tc *tls.Config
	if kind == pki.Server {
		tc, err = tlsconfig.Server(c, k, caFile)
	} else {
		tc, err = tlsconfig.Client(c, k, caFile, "127.0.0.1")
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return tc
}

func (h *harness) startDist(id string) *dist {
	h.t.Helper()
	d, err := distributor.New(distributor.Options{
		Zone: zone, ID: id, ControlAddr: h.ctl.Addr, Listen: "127.0.0.1:0",
		TLS: h.tls("distributor", pki.Server), Logger: controltest.Logger(h.t, slog.LevelError),
		ReportInterval: time.Second,
	})
	if err != nil {
		h.t.Fatalf("distributor.New: %v", err)
	}
	x := &dist{d: d, done: make(chan error, 1)}
	go func() { x.done <- d.Run(context.Background()) }()
	h.t.Cleanup(func() { x.stop(h.t) })
	select {
	case <-d.Ready():
	case err := <-x.done:
		h.t.Fatalf("distributor %s ended before ready: %v", id, err)
	case <-time.After(60 * time.Second):
		h.t.Fatalf("distributor %s not ready", id)
	}
	x.addr = d.Addr().String()
	return x
}

func (h *harness) addrs() []string {
	var out []string
	for _, d := range h.dists {
		out = append(out, d.addr)
	}
	return out
}

// snapshotBytes sums the snapshot bytes every distributor has sent.
func (h *harness) snapshotBytes() uint64 {
	var n uint64
	for _, d := range h.dists {
		n += d.d.Stats().SnapshotBytes
	}
	return n
}

func (h *harness) publish(ns string, props map[string]string) *lehrpb.VersionInfo {
	h.t.Helper()
	var ps []*lehrpb.Property
	for k, v := range props {
		ps = append(ps, &lehrpb.Property{Key: k, Value: []byte(v)})
	}
	resp, err := h.ctl.Client.Publish(ctx(h.t), &lehrpb.PublishRequest{Namespace: ns, Properties: ps, Message: "test"})
	if err != nil {
		h.t.Fatalf("Publish %s: %v", ns, err)
	}
	return resp.GetVersion()
}

func (h *harness) patch(ns string, base uint64, set map[string]string) *lehrpb.VersionInfo {
	h.t.Helper()
	var ps []*lehrpb.Property
	for k, v := range set {
		ps = append(ps, &lehrpb.Property{Key: k, Value: []byte(v)})
	}
	resp, err := h.ctl.Client.Patch(ctx(h.t), &lehrpb.PatchRequest{Namespace: ns, BaseVersion: base, Set: ps})
	if err != nil {
		h.t.Fatalf("Patch %s@%d: %v", ns, base, err)
	}
	return resp.GetVersion()
}

// runningAgent is an agent running in the test with a local API client.
type runningAgent struct {
	a      *agent.Agent
	api    lehrpb.AgentClient
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (r *runningAgent) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
}

func (h *harness) startAgent(dataDir string, distributors []string, mod ...func(*agent.Options)) *runningAgent {
	h.t.Helper()
	opts := agent.Options{
		HostID: host, Zone: zone, Distributors: distributors, TLS: h.tls(host, pki.Client),
		DataDir: dataDir, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Logger: controltest.Logger(h.t, slog.LevelError), NoSync: true,
	}
	for _, m := range mod {
		m(&opts)
	}
	a, err := agent.New(opts)
	if err != nil {
		h.t.Fatalf("agent.New: %v", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(runCtx) }()
	h.t.Cleanup(func() { r.stop(h.t) })
	select {
	case <-a.Ready():
	case err := <-r.done:
		r.done <- nil // for stop at cleanup
		h.t.Fatalf("agent ended before ready: %v", err)
	case <-time.After(30 * time.Second):
		h.t.Fatalf("agent not ready")
	}
	cc, err := grpc.NewClient("unix://"+a.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cc.Close() })
	r.api = lehrpb.NewAgentClient(cc)
	return r
}

// dataDir returns a data directory whose socket path fits the 108-byte
// limit of unix socket addresses.
func dataDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func propsOf(s content.Snapshot) map[string]string {
	m := map[string]string{}
	for _, p := range s.Props() {
		m[p.Key] = string(p.Value)
	}
	return m
}

// waitFile waits until the namespace file holds version v with want.
func waitFile(t *testing.T, path string, v uint64, want map[string]string) {
	t.Helper()
	var f nsfile.File
	wait.Until(t, fmt.Sprintf("file %s to reach version %d", path, v), func() error {
		var err error
		f, err = nsfile.Read(path)
		if err == nil && f.Version == v {
			return nil
		}
		return fmt.Errorf("last: version %d, err %v", f.Version, err)
	})
	if diff := cmp.Diff(want, propsOf(f.Content)); diff != "" {
		t.Fatalf("file %s at version %d: content (-want +got):\n%s", path, v, diff)
	}
}

func subscribe(t *testing.T, r *runningAgent, ns string) *lehrpb.SubscribeResponse {
	t.Helper()
	resp, err := r.api.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "test@1"})
	if err != nil {
		t.Fatalf("Subscribe %s: %v", ns, err)
	}
	return resp
}

func counter(r *runningAgent, name string) uint64 {
	return r.a.Metrics().GetOrCreateCounter(name).Get()
}

func TestPublishPatchReachFile(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	v1 := h.publish(ns, map[string]string{"a": "1", "b": "2"})
	r := h.startAgent(dataDir(t), h.addrs())

	sub := subscribe(t, r, ns)
	if want, _ := nsfile.Path(r.a.FilesDir(), ns); sub.GetPath() != want {
		t.Errorf("Subscribe path = %q, want %q", sub.GetPath(), want)
	}
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"a": "1", "b": "2"})

	v2 := h.patch(ns, v1.GetSeq(), map[string]string{"b": "3", "c": "4"})
	waitFile(t, sub.GetPath(), v2.GetSeq(), map[string]string{"a": "1", "b": "3", "c": "4"})

	got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns, Keys: []string{"b"}})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.GetVersion().GetSeq() != v2.GetSeq() || len(got.GetProperties()) != 1 || string(got.GetProperties()[0].GetValue()) != "3" {
		t.Errorf("Get(b) = %v, want version %d with b=3", got, v2.GetSeq())
	}
	st, err := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !st.GetConnected() || st.GetDistributor() != h.dists[0].addr || st.GetHostId() != host || st.GetZone() != zone {
		t.Errorf("Status = %v, want connected to %s as %s in %s", st, h.dists[0].addr, host, zone)
	}
	if len(st.GetNamespaces()) != 1 || st.GetNamespaces()[0].GetVersion() != v2.GetSeq() ||
		st.GetNamespaces()[0].GetSubscribers() != 1 || !st.GetNamespaces()[0].GetUpstream() {
		t.Errorf("Status namespaces = %v, want %s@%d with 1 subscriber, upstream", st.GetNamespaces(), ns, v2.GetSeq())
	}
	if n := counter(r, `lehr_agent_updates_applied_total{kind="snapshot"}`); n != 1 {
		t.Errorf("snapshots applied = %d, want 1", n)
	}
	if n := counter(r, `lehr_agent_updates_applied_total{kind="patch"}`); n != 1 {
		t.Errorf("patches applied = %d, want 1", n)
	}
	if _, err := r.api.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: sub.GetLeaseId(), Namespace: ns, Version: v2.GetSeq(), Ok: true}); err != nil {
		t.Fatalf("ReportApply: %v", err)
	}
	st, _ = r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if got := st.GetNamespaces()[0].GetApplied(); got != 1 {
		t.Errorf("Status applied = %d after one report, want 1", got)
	}
}

func TestRestartServesFromCacheAndResyncsWithoutSnapshot(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	props := map[string]string{}
	for i := range 50 {
		props[fmt.Sprintf("k/%02d", i)] = fmt.Sprintf("value-%d-with-some-length", i)
	}
	v1 := h.publish(ns, props)
	dir := dataDir(t)
	r := h.startAgent(dir, h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v1.GetSeq(), props)
	r.stop(t)

	// No distributor reachable: the agent still serves at once from disk.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close()
	r = h.startAgent(dir, []string{deadAddr})
	got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get with no distributor: %v", err)
	}
	if got.GetVersion().GetSeq() != v1.GetSeq() || len(got.GetProperties()) != len(props) {
		t.Errorf("Get with no distributor = version %d with %d properties, want %d with %d",
			got.GetVersion().GetSeq(), len(got.GetProperties()), v1.GetSeq(), len(props))
	}
	if st, _ := r.api.Status(ctx(t), &lehrpb.StatusRequest{}); st.GetConnected() {
		t.Errorf("Status says connected with no distributor reachable")
	}
	waitFile(t, path, v1.GetSeq(), props)
	r.stop(t)

	// Back to the real distributor: the resync costs no snapshot bytes.
	before := h.snapshotBytes()
	r = h.startAgent(dir, h.addrs())
	subscribe(t, r, ns)
	props["k/00"] = "changed"
	v2 := h.patch(ns, v1.GetSeq(), map[string]string{"k/00": "changed"})
	waitFile(t, path, v2.GetSeq(), props)
	if after := h.snapshotBytes(); after != before {
		t.Errorf("distributor snapshot bytes went from %d to %d on a restart with an intact cache, want no change", before, after)
	}
	if n := counter(r, `lehr_agent_bytes_received_total{kind="snapshot"}`); n != 0 {
		t.Errorf("agent received %d snapshot bytes after restart, want 0", n)
	}
}

// corruptCache flips the value of every property of ns in the Badger cache
// of an agent that is not running.
func corruptCache(t *testing.T, dir, ns string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "cache")).WithLogger(nil))
	if err != nil {
		t.Fatalf("open cache with Badger: %v", err)
	}
	defer db.Close()
	prefix := []byte("p/" + ns + "/")
	n := 0
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		type kv struct{ k, v []byte }
		var kvs []kv
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			v[len(v)-1] ^= 0x20 // flip case of the last byte of the value
			kvs = append(kvs, kv{it.Item().KeyCopy(nil), v})
		}
		for _, x := range kvs {
			if err := txn.Set(x.k, x.v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("corrupt cache: %v", err)
	}
	if n == 0 {
		t.Fatalf("corrupt cache: no property of %s found under %q", ns, prefix)
	}
}

func TestCorruptCacheIsRefetchedAndNeverReachesTheFile(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	props := map[string]string{"a": "alpha", "b": "beta"}
	v1 := h.publish(ns, props)
	dir := dataDir(t)
	r := h.startAgent(dir, h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v1.GetSeq(), props)
	r.stop(t)

	corruptCache(t, dir, ns)
	before := h.snapshotBytes()

	// Watch the file for the rest of the test: it must always verify and
	// always hold the published content.
	stopWatch := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		defer close(watchErr)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			f, err := nsfile.Read(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				watchErr <- fmt.Errorf("file unreadable: %w", err)
				return
			}
			if err == nil && !cmp.Equal(propsOf(f.Content), props) {
				watchErr <- fmt.Errorf("file holds %v, want %v", propsOf(f.Content), props)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	r = h.startAgent(dir, h.addrs())
	subscribe(t, r, ns)
	wait.For(t, "a fresh snapshot", func() bool { return h.snapshotBytes() > before })
	wait.For(t, "the namespace re-cached", func() bool {
		got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
		return err == nil && got.GetVersion().GetSeq() == v1.GetSeq()
	})
	got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	gotProps := map[string]string{}
	for _, p := range got.GetProperties() {
		gotProps[p.GetKey()] = string(p.GetValue())
	}
	if diff := cmp.Diff(props, gotProps); diff != "" {
		t.Errorf("Get after repair (-want +got):\n%s", diff)
	}
	if n := counter(r, "lehr_agent_cache_corruptions_total"); n != 1 {
		t.Errorf("corruptions = %d, want 1", n)
	}
	// The watch ends before the next version, which it would take for
	// corrupt content. A later patch lands on the repaired copy.
	close(stopWatch)
	if err := <-watchErr; err != nil {
		t.Fatal(err)
	}
	v2 := h.patch(ns, v1.GetSeq(), map[string]string{"a": "ALPHA"})
	waitFile(t, path, v2.GetSeq(), map[string]string{"a": "ALPHA", "b": "beta"})
}

func TestFailoverToSecondDistributor(t *testing.T) {
	h := newHarness(t, 2)
	ns := domain + "/cfg"
	props := map[string]string{}
	for i := range 30 {
		props[fmt.Sprintf("k%02d", i)] = "some-value"
	}
	v1 := h.publish(ns, props)
	r := h.startAgent(dataDir(t), h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v1.GetSeq(), props)
	st, _ := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if st.GetDistributor() != h.dists[0].addr {
		t.Fatalf("connected to %q, want the first distributor %s", st.GetDistributor(), h.dists[0].addr)
	}

	h.dists[0].stop(t)
	v := v1
	for i := range 3 {
		props["k00"] = fmt.Sprint("after-failover-", i)
		v = h.patch(ns, v.GetSeq(), map[string]string{"k00": props["k00"]})
		waitFile(t, path, v.GetSeq(), props)
	}
	st, _ = r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if !st.GetConnected() || st.GetDistributor() != h.dists[1].addr {
		t.Errorf("after failover: connected=%v to %q, want %s", st.GetConnected(), st.GetDistributor(), h.dists[1].addr)
	}
	if n := counter(r, "lehr_agent_failovers_total"); n != 1 {
		t.Errorf("failovers = %d, want 1", n)
	}
	if n := h.dists[1].d.Stats().SnapshotBytes; n != 0 {
		t.Errorf("second distributor sent %d snapshot bytes to an agent with an intact cache, want 0", n)
	}
}

func TestNamespaceWithoutLeaseIsNeverRequested(t *testing.T) {
	h := newHarness(t, 1)
	wanted, other := domain+"/wanted", domain+"/other"
	h.publish(other, map[string]string{"x": "1"})
	w1 := h.publish(wanted, map[string]string{"a": "1"})
	r := h.startAgent(dataDir(t), h.addrs())
	path := subscribe(t, r, wanted).GetPath()
	waitFile(t, path, w1.GetSeq(), map[string]string{"a": "1"})
	h.publish(other, map[string]string{"x": "2"})
	w2 := h.publish(wanted, map[string]string{"a": "2"})
	waitFile(t, path, w2.GetSeq(), map[string]string{"a": "2"})

	_, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: other})
	if e := apierror.FromError(err); e == nil || e.Code != codes.NotFound {
		t.Errorf("Get(%s) = %v, want NOT_FOUND: it was never subscribed", other, err)
	}
	otherPath, _ := nsfile.Path(r.a.FilesDir(), other)
	if _, err := os.Stat(otherPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file of an unsubscribed namespace exists (stat err %v)", err)
	}
	_, counts := h.dists[0].d.Convergence()
	for _, c := range counts {
		if c.Namespace == other && c.Agents > 0 {
			t.Errorf("distributor counts %d agents holding %s", c.Agents, other)
		}
	}
}

func TestBurstOfPatchesEndsAtLatestInOrder(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	props := map[string]string{"n": "0"}
	v := h.publish(ns, props)
	r := h.startAgent(dataDir(t), h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v.GetSeq(), props)

	// Watch the file: versions never go backwards, and version base+i
	// holds n=i.
	baseSeq := v.GetSeq()
	stop := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		defer close(watchErr)
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := nsfile.Read(path)
			if err != nil {
				watchErr <- err
				return
			}
			if f.Version < last {
				watchErr <- fmt.Errorf("file went from version %d back to %d", last, f.Version)
				return
			}
			if want := fmt.Sprint(f.Version - baseSeq); string(f.Content.Props()[0].Value) != want {
				watchErr <- fmt.Errorf("file version %d has n=%s, want %s", f.Version, f.Content.Props()[0].Value, want)
				return
			}
			last = f.Version
			time.Sleep(time.Millisecond)
		}
	}()
	for i := 1; i <= 100; i++ {
		v = h.patch(ns, v.GetSeq(), map[string]string{"n": fmt.Sprint(i)})
	}
	waitFile(t, path, v.GetSeq(), map[string]string{"n": "100"})
	close(stop)
	if err := <-watchErr; err != nil {
		t.Fatal(err)
	}
	if v.GetSeq() != baseSeq+100 {
		t.Fatalf("control made version %d, want %d", v.GetSeq(), baseSeq+100)
	}
}

// fakeClock is a lease clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestLeaseExpiryDropsFileAfterGrace(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	v1 := h.publish(ns, map[string]string{"a": "1"})
	clk := &fakeClock{now: time.Unix(1_000_000, 0)}
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) {
		o.Now = clk.Now
		o.LeaseTTL = 10 * time.Second
		o.UnsubscribeGrace = time.Minute
	})
	sub := subscribe(t, r, ns)
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"a": "1"})
	if sub.GetTtlSeconds() != 10 {
		t.Errorf("granted TTL %d, want 10", sub.GetTtlSeconds())
	}

	clk.Advance(11 * time.Second) // lease expired, grace running
	_, err := r.api.KeepAlive(ctx(t), &lehrpb.KeepAliveRequest{LeaseId: sub.GetLeaseId()})
	if e := apierror.FromError(err); e == nil || e.Code != codes.NotFound {
		t.Errorf("KeepAlive after TTL: %v, want NOT_FOUND", err)
	}
	// A lease that lapses (a consumer that crashed) is reported upwards:
	// the distributor's health summary and host detail show it.
	wait.For(t, "the lapsed lease in the distributor's health", func() bool {
		health, hosts, _ := h.dists[0].d.Health()
		for _, x := range health {
			if x.GetNamespace() == ns && x.GetLeasesExpired() == 1 {
				return len(hosts) == 1 && hosts[0].GetReport().GetLeasesExpired() == 1
			}
		}
		return false
	})
	v2 := h.patch(ns, v1.GetSeq(), map[string]string{"a": "2"})
	waitFile(t, sub.GetPath(), v2.GetSeq(), map[string]string{"a": "2"}) // still subscribed in grace

	clk.Advance(time.Minute)
	wait.For(t, "file removed after grace", func() bool {
		_, err := os.Stat(sub.GetPath())
		return errors.Is(err, fs.ErrNotExist)
	})
	wait.For(t, "upstream unsubscribed", func() bool {
		st, err := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
		if err != nil {
			return false
		}
		for _, n := range st.GetNamespaces() {
			if n.GetNamespace() == ns && n.GetUpstream() {
				return false
			}
		}
		return true
	})
	// The cache keeps the version: a new lease rewrites the file at once.
	sub = subscribe(t, r, ns)
	if sub.GetVersion() != v2.GetSeq() {
		t.Errorf("re-Subscribe reports version %d in the file, want %d (from the cache)", sub.GetVersion(), v2.GetSeq())
	}
	waitFile(t, sub.GetPath(), v2.GetSeq(), map[string]string{"a": "2"})
}

func TestOptionsValidation(t *testing.T) {
	good := agent.Options{Zone: zone, Distributors: []string{"127.0.0.1:7410"}, TLS: &tls.Config{}, DataDir: t.TempDir()}
	tests := []struct {
		name string
		mod  func(*agent.Options)
	}{
		{"no zone", func(o *agent.Options) { o.Zone = "" }},
		{"bad zone", func(o *agent.Options) { o.Zone = "Zone A" }},
		{"no distributors", func(o *agent.Options) { o.Distributors = nil }},
		{"bad distributor", func(o *agent.Options) { o.Distributors = []string{"no-port"} }},
		{"no TLS", func(o *agent.Options) { o.TLS = nil }},
		{"no data dir", func(o *agent.Options) { o.DataDir = "" }},
		{"negative TTL", func(o *agent.Options) { o.LeaseTTL = -time.Second }},
		{"silence timeout too short", func(o *agent.Options) { o.SilenceTimeout = 100 * time.Millisecond }},
		{"silence timeout too long", func(o *agent.Options) { o.SilenceTimeout = time.Hour }},
		{"negative silence timeout", func(o *agent.Options) { o.SilenceTimeout = -time.Second }},
		{"negative consumer group", func(o *agent.Options) { o.ConsumerGid = -1 }},
		{"signals interval not whole seconds", func(o *agent.Options) { o.SignalsInterval = 1500 * time.Millisecond }},
	}
	for _, tc := range tests {
		o := good
		tc.mod(&o)
		if _, err := agent.New(o); err == nil {
			t.Errorf("%s: New succeeded, want an error", tc.name)
		}
	}
	a, err := agent.New(good)
	if err != nil {
		t.Fatalf("New(good): %v", err)
	}
	if want := filepath.Join(good.DataDir, "agent.sock"); a.Socket() != want {
		t.Errorf("default socket %q, want %q", a.Socket(), want)
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close before Run: %v", err)
	}
}

// TestPatchCarriesVersionInfo: the distributor sends the agent compact
// patches (wire.CapCompactUpdate) — a one-key change of a 1 KiB value fits
// the wire budget of 1.1 × changed + 128 B — and the agent still writes
// who, why and when into the file and serves the whole VersionInfo,
// refilled from the update and the content, through its local API.
func TestPatchCarriesVersionInfo(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/info"
	base := map[string]string{"hot": string(make([]byte, 1024))}
	for i := range 8 {
		base[fmt.Sprintf("filler/%d", i)] = fmt.Sprint(make([]byte, 2048))
	}
	v1 := h.publish(ns, base)
	r := h.startAgent(dataDir(t), h.addrs())
	sub := subscribe(t, r, ns)
	waitFile(t, sub.GetPath(), v1.GetSeq(), base)

	hot := string(bytes.Repeat([]byte("h"), 1024))
	before := h.dists[0].d.Stats()
	resp, err := h.ctl.Client.Patch(ctx(t), &lehrpb.PatchRequest{Namespace: ns, BaseVersion: v1.GetSeq(),
		Set: []*lehrpb.Property{{Key: "hot", Value: []byte(hot)}}, Message: "turn up the heat", Author: "alice"})
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	v2 := resp.GetVersion()
	base["hot"] = hot
	waitFile(t, sub.GetPath(), v2.GetSeq(), base)

	after := h.dists[0].d.Stats()
	if n := after.PatchPushes - before.PatchPushes; n != 1 {
		t.Fatalf("patch pushes = %d, want 1", n)
	}
	changed := len("hot") + len(hot)
	// Control's signature travels with every version: 64 bytes and the
	// key id ("ed25519:" and 16 hex digits), each with its field tag and
	// length.
	const signature = 2 + ed25519.SignatureSize + 2 + len("ed25519:0123456789abcdef")
	if got, budget := float64(after.PatchBytes-before.PatchBytes), 1.1*float64(changed)+128+float64(signature); got > budget {
		t.Errorf("one-key patch frame = %.0f B, want <= 1.1 × %d + 128 + %d (signature) = %.1f B", got, changed, signature, budget)
	}

	f, err := nsfile.Read(sub.GetPath())
	if err != nil {
		t.Fatalf("read file: %v", err)
	}
	gotFile := []any{f.Namespace, f.Version, f.Checksum, f.Author, f.Message, f.CreateTime.UTC()}
	wantFile := []any{ns, v2.GetSeq(), v2.GetChecksum(), v2.GetAuthor(), "turn up the heat", v2.GetCreateTime().AsTime()}
	if diff := cmp.Diff(wantFile, gotFile); diff != "" {
		t.Errorf("file namespace, version, checksum, author, message, time (-want +got):\n%s", diff)
	}
	if v2.GetAuthor() == "" {
		t.Errorf("control recorded no author for %s@%d", ns, v2.GetSeq())
	}

	got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// transport_identity is an audit detail that stays with control.
	want := proto.Clone(v2).(*lehrpb.VersionInfo)
	want.TransportIdentity = ""
	if diff := cmp.Diff(want, got.GetVersion(), protocmp.Transform()); diff != "" {
		t.Errorf("Get version info (-want +got):\n%s", diff)
	}
}

// TestMetricsEndpoint: /metrics serves the agent's own set and the
// process's Go runtime and process metrics.
func TestMetricsEndpoint(t *testing.T) {
	h := newHarness(t, 1)
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) { o.MetricsListen = "127.0.0.1:0" })
	var addr net.Addr
	wait.For(t, "metrics listener", func() bool { addr = r.a.MetricsAddr(); return addr != nil })
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, err %v", resp.StatusCode, err)
	}
	for _, want := range []string{"lehr_agent_", "go_goroutines ", "go_memstats_heap_inuse_bytes ", "process_resident_memory_bytes "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The agent keeps per-interval signals of a namespace its consumer holds:
// the version held, the consumer's reports, and the requests its declared
// metrics endpoint (a real demo service) served — what a distributor gets
// when it asks for them.
func TestSignals(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/sig"
	v1 := h.publish(ns, map[string]string{"a": "1"})
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) { o.SignalsInterval = time.Second })

	_, metricsURL := startDemo(t, demoservice.Options{})
	sub, err := r.api.Subscribe(ctx(t), &lehrpb.SubscribeRequest{Namespace: ns, ClientId: "demo@1", MetricsUrl: metricsURL})
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"a": "1"})
	if _, err := r.api.ReportApply(ctx(t), &lehrpb.ReportApplyRequest{LeaseId: sub.GetLeaseId(), Namespace: ns, Version: v1.GetSeq(), Ok: true, CallbackSeconds: 0.25}); err != nil {
		t.Fatal(err)
	}
	var sig *lehrpb.NamespaceSignals
	wait.For(t, "an interval at version 1", func() bool {
		resp, err := r.api.Signals(ctx(t), &lehrpb.AgentSignalsRequest{Namespace: ns})
		return err == nil && slices.Contains(resp.GetSignals().GetVersions(), v1.GetSeq())
	})
	v2 := h.patch(ns, v1.GetSeq(), map[string]string{"a": "2"})
	waitFile(t, sub.GetPath(), v2.GetSeq(), map[string]string{"a": "2"})

	sum := func(name string) (s float64) {
		for _, sr := range sig.GetSeries() {
			if sr.GetName() == name {
				for _, v := range sr.GetValues() {
					if !math.IsNaN(v) {
						s += v
					}
				}
			}
		}
		return s
	}
	wait.For(t, "signals with requests, the report and version 2", func() bool {
		resp, err := r.api.Signals(ctx(t), &lehrpb.AgentSignalsRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		sig = resp.GetSignals()
		return sum(canary.MetricRequests) > 0 && sum(canary.MetricConsumerApplies) == 1 && slices.Contains(sig.GetVersions(), v2.GetSeq())
	})
	if got := sum(canary.MetricCallbackSeconds); got != 0.25 {
		t.Errorf("callback seconds %v; want 0.25", got)
	}
	if sig.GetIntervalSeconds() != 1 || sig.GetFirst()%1 != 0 || !slices.Contains(sig.GetVersions(), v1.GetSeq()) {
		t.Errorf("interval %d, versions %v; want 1 s intervals holding %d then %d", sig.GetIntervalSeconds(), sig.GetVersions(), v1.GetSeq(), v2.GetSeq())
	}
	if err := signals.Validate("signals", sig); err != nil {
		t.Errorf("the agent's signals are not valid on the wire: %v", err)
	}
	wait.For(t, "a scrape counted", func() bool { return counter(r, `lehr_agent_scrapes_total{result="ok"}`) > 0 })
}

// The consumers' counts of live policy decisions become the agent's
// signals: policy_decisions, policy_denies and, from consumers that count
// them, policy_changed (the decisions the version a committed experiment
// replaced would have decided otherwise). A report without live_changed
// — a consumer that does not count it — leaves policy_changed alone, so
// a host of such consumers never tells a canary analysis that nothing
// changed. Such a consumer also reports the comparison's pair counts as
// an experiment's: the report is accepted, the live decisions kept.
func TestPolicyChangedSignal(t *testing.T) {
	h := newHarness(t, 1)
	rules := map[string]string{"all": `{"effect": "allow", "condition": "true"}`}
	counted, uncounted := domain+"/counted", domain+"/uncounted"
	v1 := h.publish(counted, rules)
	h.publish(uncounted, rules)
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) { o.SignalsInterval = time.Second })
	for _, tc := range []struct {
		ns      string
		changed *uint64
	}{
		{counted, proto.Uint64(4)},
		{uncounted, nil},
	} {
		sub := subscribe(t, r, tc.ns)
		waitFile(t, sub.GetPath(), v1.GetSeq(), rules)
		req := &lehrpb.ReportPreviewRequest{LeaseId: sub.GetLeaseId(), Namespace: tc.ns, LiveDecisions: 10, LiveDenies: 3, LiveChanged: tc.changed}
		if tc.changed == nil {
			req.Counts = []*lehrpb.HostPreviewCounts{{Experiment: preview.ComparisonKey, Counts: &lehrpb.PreviewCounts{LiveEtag: "v2", ExperimentEtag: "v1", AllowDeny: 4, AllowAllow: 6}}}
		}
		if _, err := r.api.ReportPreview(ctx(t), req); err != nil {
			t.Fatal(err)
		}
		var series map[string]float64
		wait.For(t, tc.ns+": an interval with the decisions", func() bool {
			resp, err := r.api.Signals(ctx(t), &lehrpb.AgentSignalsRequest{Namespace: tc.ns})
			if err != nil {
				return false
			}
			series = map[string]float64{}
			for _, sr := range resp.GetSignals().GetSeries() {
				for _, v := range sr.GetValues() {
					if !math.IsNaN(v) {
						series[sr.GetName()] += v
					}
				}
			}
			return series[canary.MetricPolicyDecisions] == 10
		})
		got, seen := series[canary.MetricPolicyChanged]
		if series[canary.MetricPolicyDenies] != 3 || seen != (tc.changed != nil) || seen && got != float64(*tc.changed) {
			t.Errorf("%s: signals %v; want 10 decisions, 3 denies and policy_changed %v (nil: no such signal)", tc.ns, series, tc.changed)
		}
	}
}

// Who may read what: the data directory lets the consumers' group pass
// through (0710), the files directory is 0750 and the files 0640 — only
// the agent's user and the consumers' group read configuration — and the
// socket and every file belong to the consumers' group when one is set
// (checked as root, the only user who may give a file to any group).
func TestFilePermissions(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/secret"
	v1 := h.publish(ns, map[string]string{"password": "hunter2"})
	gid := 0
	if os.Geteuid() == 0 {
		gid = 4242
	}
	dir := dataDir(t)
	r := h.startAgent(dir, h.addrs(), func(o *agent.Options) { o.ConsumerGid = gid })
	sub := subscribe(t, r, ns)
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"password": "hunter2"})
	for _, tc := range []struct {
		path string
		mode fs.FileMode
	}{
		{dir, 0o710},
		{r.a.FilesDir(), 0o750},
		{filepath.Dir(sub.GetPath()), 0o750},
		{sub.GetPath(), 0o640},
		{r.a.Socket(), 0o660},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.mode {
			t.Errorf("%s: mode %v; want %v", tc.path, fi.Mode().Perm(), tc.mode)
		}
		if got := fi.Sys().(*syscall.Stat_t).Gid; gid != 0 && got != uint32(gid) {
			t.Errorf("%s: group %d; want the consumers' group %d", tc.path, got, gid)
		}
	}
}
