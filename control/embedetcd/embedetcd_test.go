package embedetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// A private member listens on unix sockets in a directory only its user
// may enter, survives a restart over the sockets the previous run left,
// and falls back to a private temporary directory when the path is too
// long for a socket (issue 12: the embedded etcd was a loopback TCP port
// any local user could read and write).
func TestPrivateMemberListensOnUnixSocketsOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"short path", func(t *testing.T) string { return filepath.Join(t.TempDir(), "etcd") }},
		{"path too long for a socket", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 40), "etcd")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			dir := tc.dir(t)
			var sockDir string
			for round := range 2 {
				s, err := Start(ctx, Options{Dir: dir, Logger: testLogger(t), NoSync: true, Private: true})
				if err != nil {
					t.Fatalf("Start (round %d): %v", round, err)
				}
				eps := s.Endpoints()
				if len(eps) != 1 || !strings.HasPrefix(eps[0], "unix://") {
					t.Errorf("a private member serves clients on %v; want a unix socket only", eps)
				}
				// The peer port takes no connection without a
				// certificate of the member's own CA.
				peer := strings.TrimPrefix(s.PeerURL(), "https://")
				conn, err := tls.Dial("tcp", peer, &tls.Config{InsecureSkipVerify: true})
				if err == nil {
					_, err = conn.Write([]byte("GET /members HTTP/1.1\r\nHost: x\r\n\r\n"))
					if err == nil {
						_, err = conn.Read(make([]byte, 1))
					}
					conn.Close()
				}
				if err == nil {
					t.Errorf("the peer port %s answered a client without a certificate", peer)
				}
				sockDir = filepath.Dir(strings.TrimPrefix(eps[0], "unix://"))
				fi, err := os.Stat(sockDir)
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("socket directory %s: %v, %v; want mode 0700", sockDir, fi.Mode(), err)
				}
				if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
					t.Errorf("data directory %s: %v; want mode 0700", dir, err)
				}
				cli, err := s.Client(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cli.Put(ctx, "k", fmt.Sprint(round)); err != nil {
					t.Fatalf("Put over the socket: %v", err)
				}
				if got := mustGet(t, ctx, cli, "k"); got != fmt.Sprint(round) {
					t.Errorf("Get = %q", got)
				}
				cli.Close()
				s.Close()
			}
			if len(dir)+len(".sock/client") > maxSocketPath {
				if _, err := os.Stat(sockDir); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("temporary socket directory %s left after Close: %v", sockDir, err)
				}
			}
		})
	}
}

// The in-process client is the same store as a socket client's: writes,
// reads, leases and watches (with previous values, as control's goal watch
// asks) seen from either side.
func TestInProcessClientSharesTheMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Dir: t.TempDir(), Logger: testLogger(t), NoSync: true, Private: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	sock, err := s.Client(ctx)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	defer sock.Close()
	in := s.InProcessClient()
	defer in.Close()

	wch := in.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if _, err := sock.Put(ctx, "w/a", "1"); err != nil {
		t.Fatalf("Put through the socket: %v", err)
	}
	if _, err := in.Txn(ctx).If(clientv3.Compare(clientv3.Value("w/a"), "=", "1")).Then(clientv3.OpPut("w/a", "2")).Commit(); err != nil {
		t.Fatalf("Txn in process: %v", err)
	}
	if got := mustGet(t, ctx, sock, "w/a"); got != "2" {
		t.Errorf("socket client reads %q after the in-process write, want 2", got)
	}
	if resp, err := in.Get(ctx, "w/a", clientv3.WithSerializable()); err != nil || string(resp.Kvs[0].Value) != "2" {
		t.Errorf("serializable in-process Get = %v, %v; want 2", resp, err)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, ev := range wr.Events {
				prev := ""
				if ev.PrevKv != nil {
					prev = string(ev.PrevKv.Value)
				}
				seen = append(seen, prev+">"+string(ev.Kv.Value))
			}
		case <-ctx.Done():
			t.Fatalf("watch saw %v, want two events", seen)
		}
	}
	if want := []string{">1", "1>2"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("watch events %v, want %v", seen, want)
	}

	lease, err := in.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("Grant in process: %v", err)
	}
	if _, err := in.Put(ctx, "l", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("Put with lease: %v", err)
	}
	if _, err := sock.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("Revoke through the socket: %v", err)
	}
	if resp, err := in.Get(ctx, "l"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("key of a revoked lease: %v, %v; want gone", resp, err)
	}
}

// TestCompactAtStart: a member whose database is mostly free pages (its
// keys deleted and compacted away) is rewritten without them before etcd
// opens it; the data, the revision and the cluster survive; a database
// with little free is left alone; a copy a crash left is removed.
func TestCompactAtStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func(frac float64) *Server {
		t.Helper()
		s, err := Start(ctx, Options{Dir: dir, Logger: testLogger(t), NoSync: true, CompactAtStart: frac})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		return s
	}
	s := start(0.1)
	if got := s.Compacted(); got.Compacted || got.Before.Size != 0 {
		t.Errorf("first start of an empty dir: Compacted() = %+v, want nothing done", got)
	}
	cli, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("big/%03d", i), big); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	if _, err := cli.Put(ctx, "keep", "v1"); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, "big/", clientv3.WithPrefix())
	if err != nil || del.Deleted != 200 {
		t.Fatalf("Delete: %v (%d deleted)", err, del.Deleted)
	}
	rev := del.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	cli.Close()
	s.Close()
	// A copy an interrupted compaction left behind.
	if err := os.WriteFile(DBPath(dir)+compactSuffix, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}

	s = start(0.1)
	got := s.Compacted()
	if !got.Compacted || got.Before.Free() < 12<<20 || got.After.Size > 2<<20 {
		t.Errorf("restart after deleting 12.5 MiB: Compacted() = %+v, want the database rewritten without its 12.5 MiB of free pages", got)
	}
	if _, err := os.Stat(DBPath(dir) + compactSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover copy: Stat = %v, want it removed", err)
	}
	cli, err = s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := mustGet(t, ctx, cli, "keep"); v != "v1" {
		t.Errorf("keep = %q after the compaction, want v1", v)
	}
	resp, err := cli.Put(ctx, "after", "x")
	if err != nil {
		t.Fatalf("Put after the compaction: %v", err)
	}
	if resp.Header.Revision != rev+1 {
		t.Errorf("revision after the compaction = %d, want %d (the next one)", resp.Header.Revision, rev+1)
	}
	st, err := cli.Status(ctx, s.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.DbSize > 2<<20 {
		t.Errorf("etcd's DbSize = %d after the compaction, want under 2 MiB (it was %d)", st.DbSize, got.Before.Size)
	}
	cli.Close()
	s.Close()

	s = start(0.1)
	defer s.Close()
	if got := s.Compacted(); got.Compacted {
		t.Errorf("restart of a compacted database: Compacted() = %+v, want left alone", got)
	}
}
