package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// shared is one embedded etcd for the tests that do not restart it; each
// test uses its own key prefix.
var shared struct {
	srv *embedetcd.Server
	cli *clientv3.Client
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lehr-store-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, NoSync: true, Logger: quietLogger()})
	if err == nil {
		shared.srv = srv
		shared.cli, err = embedetcd.NewClient(ctx, srv.Endpoints())
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	shared.cli.Close()
	srv.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
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

// prefixRuns numbers the prefixes handed out, so a test run again in the
// same process (go test -count=N) starts from empty keys too.
var prefixRuns atomic.Int64

// testPrefix is a key prefix unique to this run of t.
func testPrefix(t *testing.T) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/test/%s/%d/", name, prefixRuns.Add(1))
}

// newTestStore returns a Store on the shared etcd under a prefix of its own.
func newTestStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = testPrefix(t)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	return New(shared.cli, opts)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustDomain creates a domain.
func mustDomain(t *testing.T, s *Store, name string) {
	t.Helper()
	if _, err := s.CreateDomain(testCtx(t), &lehrpb.Domain{Name: name}); err != nil {
		t.Fatalf("CreateDomain(%s): %v", name, err)
	}
}

// snap builds a snapshot from key=value pairs.
func snap(t *testing.T, kv ...string) content.Snapshot {
	t.Helper()
	var props []content.Property
	for i := 0; i+1 < len(kv); i += 2 {
		props = append(props, content.Property{Key: kv[i], ContentType: "text/plain", Value: []byte(kv[i+1])})
	}
	s, err := content.New(props)
	if err != nil {
		t.Fatalf("content.New: %v", err)
	}
	return s
}

// randomSnap builds n properties of size bytes of random data each.
func randomSnap(t *testing.T, n, size int) content.Snapshot {
	t.Helper()
	props := make([]content.Property, n)
	for i := range props {
		v := make([]byte, size)
		rand.Read(v)
		props[i] = content.Property{Key: fmt.Sprintf("blob/%03d", i), ContentType: "application/octet-stream", Value: v}
	}
	s, err := content.New(props)
	if err != nil {
		t.Fatalf("content.New: %v", err)
	}
	return s
}

// commit commits and fails the test on error.
func commit(t *testing.T, s *Store, c Commit) *lehrpb.VersionInfo {
	t.Helper()
	info, err := s.Commit(testCtx(t), c)
	if err != nil {
		t.Fatalf("Commit(%s, expected %d): %v", c.Namespace, c.ExpectedLatest, err)
	}
	return info
}

// countBlobs counts the blob keys of ns.
func countBlobs(t *testing.T, s *Store, ns string) int {
	t.Helper()
	resp, err := s.cli.Get(testCtx(t), s.lay.blobsPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count blobs: %v", err)
	}
	return int(resp.Count)
}

// readBack reads version seq and checks it equals want.
func readBack(t *testing.T, s *Store, ns string, seq uint64, want content.Snapshot) {
	t.Helper()
	info, got, err := s.Content(testCtx(t), ns, seq)
	if err != nil {
		t.Fatalf("Content(%s, %d): %v", ns, seq, err)
	}
	if !got.Equal(want) {
		t.Fatalf("Content(%s, %d): content differs: got %d properties, want %d", ns, seq, got.Len(), want.Len())
	}
	if info.GetChecksum() != want.Checksum() {
		t.Fatalf("Content(%s, %d): checksum %s, want %s", ns, seq, info.GetChecksum(), want.Checksum())
	}
}

func testCtxTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}
