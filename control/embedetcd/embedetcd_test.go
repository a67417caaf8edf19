package embedetcd

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"lehr.dev/lehr/testenv/wait"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Logf("%s", p)
	return len(p), nil
}

func mustGet(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("Get(%q): got %d keys, want 1", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func TestSingleMemberRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()

	s, err := Start(ctx, Options{Dir: dir, Logger: testLogger(t), NoSync: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	cli, err := s.Client(ctx)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := mustGet(t, ctx, cli, "k"); got != "v1" {
		t.Errorf("Get(k) = %q, want %q", got, "v1")
	}
	cli.Close()
	s.Close()
	s.Close() // idempotent

	s2, err := Start(ctx, Options{Dir: dir, Logger: testLogger(t), NoSync: true})
	if err != nil {
		t.Fatalf("Start again on %s: %v", dir, err)
	}
	defer s2.Close()
	cli2, err := s2.Client(ctx)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	defer cli2.Close()
	if got := mustGet(t, ctx, cli2, "k"); got != "v1" {
		t.Errorf("after restart Get(k) = %q, want %q", got, "v1")
	}
}

func TestDefaultMaxRequestBytesEnforced(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Dir: t.TempDir(), Logger: testLogger(t), NoSync: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	cli, err := s.Client(ctx)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "small", string(make([]byte, 1<<20))); err != nil {
		t.Errorf("Put of 1 MiB: %v, want success", err)
	}
	if _, err := cli.Put(ctx, "big", string(make([]byte, 2<<20))); err == nil {
		t.Errorf("Put of 2 MiB succeeded, want etcd's request-too-large error")
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no dir", Options{}},
		{"bad log level", Options{Dir: t.TempDir(), LogLevel: "loud"}},
		{"auto peer port in a cluster", Options{Dir: t.TempDir(), InitialCluster: "default=http://127.0.0.1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(ctx, tc.opts)
			if err == nil {
				s.Close()
				t.Fatalf("Start(%+v) succeeded, want error", tc.opts)
			}
		})
	}
}

func TestClusterSurvivesOneMemberDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, err := StartCluster(ctx, t.TempDir(), 3, testLogger(t))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer c.Close()
	if got := len(c.Endpoints()); got != 3 {
		t.Fatalf("len(Endpoints()) = %d, want 3", got)
	}
	cli, err := NewClient(ctx, c.Endpoints())
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer cli.Close()

	put := func(key, val string) {
		t.Helper()
		// A write racing the loss of the leader may fail; the cluster must
		// accept it again once a new leader is elected.
		wait.Until(t, fmt.Sprintf("Put(%q) to succeed", key), func() error {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			defer rcancel()
			_, err := cli.Put(rctx, key, val)
			return err
		})
	}
	put("before", "1")
	for i := range 3 {
		c.Stop(i)
		for j := range 5 {
			put(fmt.Sprintf("down%d/%d", i, j), "x")
		}
		if err := c.Restart(ctx, i); err != nil {
			t.Fatalf("Restart(%d): %v", i, err)
		}
	}
	// The restarted member serves everything written while it was down.
	one, err := NewClient(ctx, c.Endpoints()[:1])
	if err != nil {
		t.Fatalf("NewClient(member 0): %v", err)
	}
	defer one.Close()
	wait.Until(t, "member 0 to hold the 15 keys written while it was down", func() error {
		resp, err := one.Get(ctx, "down", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 15 {
			return nil
		}
		return fmt.Errorf("count = %v (err %v), want 15", resp, err)
	})
	if got := mustGet(t, ctx, one, "before"); got != "1" {
		t.Errorf("Get(before) = %q, want 1", got)
	}
	if err := c.Restart(ctx, 0); err == nil {
		t.Errorf("Restart of a running member succeeded, want error")
	}
}
