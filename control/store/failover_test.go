package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestRestartKeepsVersionsAndGoals(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	start := func() (*embedetcd.Server, *Store) {
		t.Helper()
		srv, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		cli, err := srv.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return srv, New(cli, Options{Logger: quietLogger()})
	}
	srv, s := start()
	mustDomain(t, s, "d")
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	v1 := randomSnap(t, 4, 300<<10)
	v2 := snap(t, "k", "v2")
	commit(t, s, Commit{Namespace: "d/keep", Create: true, Content: v1})
	commit(t, s, Commit{Namespace: "d/keep", ExpectedLatest: 1, Content: v2, GoalReason: "publish"})
	srv.Close()

	srv, s = start()
	defer srv.Close()
	readBack(t, s, "d/keep", 1, v1)
	readBack(t, s, "d/keep", 2, v2)
	goals, _, err := s.Goals(ctx, "z", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(goals) != 1 || goals[0].GetVersion() != 2 || goals[0].GetReason() != "publish" {
		t.Errorf("goals after restart = %v, want d/keep at 2", goals)
	}
	if _, err := s.GetDomain(ctx, "d"); err != nil {
		t.Errorf("GetDomain after restart: %v", err)
	}
}

// TestCommitsSurviveMemberLoss commits in a loop against a 3-member cluster
// while the leader is stopped and restarted. Commits are retried with their
// request id when etcd is unavailable; afterwards every acknowledged commit
// is readable and no version is duplicated or skipped.
func TestCommitsSurviveMemberLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	c, err := embedetcd.StartCluster(ctx, t.TempDir(), 3, quietLogger())
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer c.Close()
	cli, err := embedetcd.NewClient(ctx, c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := New(cli, Options{Logger: quietLogger()})
	if _, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateZone(ctx, "z"); err != nil {
		t.Fatal(err)
	}

	leader := func() int {
		for i, ep := range c.Endpoints() {
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, ep)
			scancel()
			if err == nil && st.Leader == st.Header.MemberId {
				return i
			}
		}
		return 0
	}

	const n = 30
	want := make([]content.Snapshot, n+1)
	retries := 0
	stopped := -1
	var stopDone chan struct{}
	for i := 1; i <= n; i++ {
		switch i {
		case 8:
			// Stop the leader while commits keep going, so some may be in
			// flight when it goes.
			stopped = leader()
			stopDone = make(chan struct{})
			go func() { c.Stop(stopped); close(stopDone) }()
		case 20:
			<-stopDone
			if err := c.Restart(ctx, stopped); err != nil {
				t.Fatalf("Restart(%d): %v", stopped, err)
			}
		}
		want[i] = snap(t, "n", fmt.Sprint(i), "pad", "x")
		cm := Commit{
			Namespace: "d/ha", Create: true, ExpectedLatest: uint64(i - 1), Content: want[i],
			RequestID: fmt.Sprintf("req-%d", i),
		}
		for {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			info, err := s.Commit(actx, cm)
			acancel()
			if err == nil {
				if info.GetSeq() != uint64(i) {
					t.Fatalf("commit %d acknowledged as seq %d", i, info.GetSeq())
				}
				break
			}
			if !IsUnavailable(err) || ctx.Err() != nil {
				t.Fatalf("commit %d: %v (IsUnavailable false)", i, err)
			}
			retries++
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("%d commits, %d retries while a member was down", n, retries)

	hist, err := s.History(ctx, "d/ha", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != n {
		t.Fatalf("History has %d versions, want %d", len(hist), n)
	}
	for i := 1; i <= n; i++ {
		readBack(t, s, "d/ha", uint64(i), want[i])
	}
	goals, _, err := s.Goals(ctx, "z", "d/ha")
	if err != nil || len(goals) != 1 || goals[0].GetVersion() != n {
		t.Errorf("goal = %v, %v; want version %d", goals, err, n)
	}
	var ce *ConflictError
	if _, err := s.Commit(ctx, Commit{Namespace: "d/ha", ExpectedLatest: 3, Content: want[1]}); !errors.As(err, &ce) || ce.Current != n {
		t.Errorf("stale commit after failover: %v, want conflict with current %d", err, n)
	}
}
