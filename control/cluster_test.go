package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// TestPublishThroughMemberLoss publishes in a loop against control on a
// 3-member etcd cluster while one member (the leader, to make it hard) is
// stopped and later restarted. Every acknowledged publish must be readable
// afterwards, in order, none lost and none duplicated, and the producer must
// see retryable errors at worst.
func TestPublishThroughMemberLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Members log errors while one is down; expected here, so silenced.
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 3, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints()})
	cl := srv.Client
	createDomain(t, cl, "ha", nil)

	const (
		total     = 60
		stopAt    = 15
		restartAt = 40
		ns        = "ha/ns"
	)
	var (
		acked    []uint64
		retried  = map[codes.Code]int{}
		stopped  = -1
		checksum = map[uint64]string{}
	)
	for i := range total {
		switch i {
		case stopAt:
			stopped = leader(t, cluster)
			t.Logf("stopping member %d (the leader) before publish %d", stopped, i)
			cluster.Stop(stopped)
		case restartAt:
			t.Logf("restarting member %d before publish %d", stopped, i)
			if err := cluster.Restart(ctx, stopped); err != nil {
				t.Fatalf("Restart(%d): %v", stopped, err)
			}
		}
		req := &lehrpb.PublishRequest{
			Namespace:  ns,
			Properties: []*lehrpb.Property{prop("n", "application/json", fmt.Sprint(i))},
			RequestId:  fmt.Sprintf("publish-%d", i),
			Message:    fmt.Sprintf("publish %d", i),
		}
		v, err := publishRetrying(ctx, cl, req, retried)
		if err != nil {
			t.Fatalf("publish %d: %v (after retries %v)", i, err, retried)
		}
		acked = append(acked, v.GetSeq())
		checksum[v.GetSeq()] = v.GetChecksum()
	}
	t.Logf("retryable errors seen: %v", retried)

	want := make([]uint64, total)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if diff := cmp.Diff(want, acked); diff != "" {
		t.Errorf("acknowledged versions (-want +got):\n%s", diff)
	}
	h := history(t, cl, ns, 25)
	got := make([]uint64, len(h))
	for i, v := range h {
		got[len(h)-1-i] = v.GetSeq()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history, oldest first (-want +got):\n%s", diff)
	}
	for _, v := range h {
		i := v.GetSeq() - 1
		if v.GetMessage() != fmt.Sprintf("publish %d", i) || v.GetChecksum() != checksum[v.GetSeq()] {
			t.Errorf("version %d = %q %s; want publish %d with the acknowledged checksum %s", v.GetSeq(), v.GetMessage(), v.GetChecksum(), i, checksum[v.GetSeq()])
		}
		g := getVersion(t, cl, ns, v.GetSeq())
		if got := string(g.GetProperties()[0].GetValue()); got != fmt.Sprint(i) {
			t.Errorf("version %d holds n=%s, want %d", v.GetSeq(), got, i)
		}
	}
}

// publishRetrying publishes req, retrying with the same request_id on
// retryable errors (counted in retried). A non-retryable error is returned.
// Each attempt has a short deadline so that attempts during the leader
// election time out and are retried: a commit may then land after its
// caller gave up, which is what request_id must make harmless.
func publishRetrying(ctx context.Context, cl lehrpb.ControlClient, req *lehrpb.PublishRequest, retried map[codes.Code]int) (*lehrpb.VersionInfo, error) {
	backoff := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 750*time.Millisecond)
		resp, err := cl.Publish(actx, req)
		cancel()
		if err == nil {
			return resp.GetVersion(), nil
		}
		e := apierror.FromError(err)
		if !e.Retryable() {
			return nil, fmt.Errorf("non-retryable error: %w", e)
		}
		retried[e.Code]++
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), e)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// leader returns the index of the cluster's leader.
func leader(t *testing.T, c *embedetcd.Cluster) int {
	t.Helper()
	var found int
	wait.For(t, "an etcd leader", func() bool {
		for i, ep := range c.Endpoints() {
			cli, err := embedetcd.NewClient(testCtx(t), []string{ep})
			if err != nil {
				continue
			}
			sctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			cli.Close()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
				found = i
				return true
			}
		}
		return false
	})
	return found
}
