package control_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestQuorumLossFailsFast stops two of three etcd members under control:
// with quorum lost, a publish and a read — over the raw API and through
// the producer client, whose caller waits a minute — must fail within
// control's store timeout (plus the producer's retries), UNAVAILABLE, with
// a message saying the store lost quorum and no request_id advice. Once
// the members are back, the next publish succeeds.
func TestQuorumLossFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Members log errors while quorum is lost; expected here, so silenced.
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 3, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	// Control logs every call it could not serve; expected here too. A
	// 5 s bound (the default is 10 s) keeps the test short and the
	// difference with a hang (the old 13.8 s) plain.
	const bound = 5 * time.Second
	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints(), StoreTimeout: bound, Logger: controltest.Logger(t, slog.LevelError+4)})
	cl := srv.Client
	createDomain(t, cl, "q", nil)
	publish(t, cl, "q/ns", prop("n", "application/json", "1"))
	pc, err := producer.New(producer.Options{Address: srv.Addr, Author: "alice"})
	if err != nil {
		t.Fatalf("producer.New: %v", err)
	}
	defer pc.Close()

	// Slack for a loaded machine; every call's own deadline is a minute.
	const slack = 5 * time.Second
	const attempts = 5 // the producer's default RetryPolicy.MaxAttempts
	cluster.Stop(0)
	cluster.Stop(1)
	t.Log("stopped members 0 and 1 of 3: quorum is lost")

	for _, c := range []struct {
		name   string
		within time.Duration
		call   func(ctx context.Context) error
	}{
		{"Publish", bound + slack, func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "q/ns", Author: "alice", RequestId: "quorum-1",
				Properties: []*lehrpb.Property{prop("n", "application/json", "2")}})
			return err
		}},
		{"Get", bound + slack, func(ctx context.Context) error {
			_, err := cl.Get(ctx, &lehrpb.GetRequest{Namespace: "q/ns"})
			return err
		}},
		// The producer retries UNAVAILABLE: at worst each attempt waits
		// out the bound, and the backoffs between them add about 1.5 s.
		{"producer Publish", time.Duration(attempts)*bound + 2*time.Second + slack, func(ctx context.Context) error {
			_, err := pc.Publish(ctx, "q/ns", []producer.Property{{Key: "n", Value: []byte("3"), ContentType: "application/json"}})
			return err
		}},
		{"producer Get", time.Duration(attempts)*bound + 2*time.Second + slack, func(ctx context.Context) error {
			_, err := pc.Get(ctx, "q/ns")
			return err
		}},
	} {
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		start := time.Now()
		err := c.call(cctx)
		took := time.Since(start)
		ccancel()
		t.Logf("%s without quorum: %v after %v", c.name, err, took.Round(time.Millisecond))
		e := apierror.FromError(err)
		switch {
		case err == nil:
			t.Errorf("%s without quorum succeeded", c.name)
			continue
		case e.Code != codes.Unavailable || e.Reason != apierror.ReasonUnavailable:
			t.Errorf("%s without quorum = %v; want UNAVAILABLE (reason %s) from control", c.name, err, apierror.ReasonUnavailable)
		case !strings.Contains(e.Message, "quorum"):
			t.Errorf("%s without quorum says %q; want it to say the store lost quorum", c.name, e.Message)
		case strings.Contains(e.Message, "request_id"):
			t.Errorf("%s without quorum says %q; want no request_id advice", c.name, e.Message)
		}
		if took > c.within {
			t.Errorf("%s without quorum took %v; want an answer within %v (store timeout %v)", c.name, took, c.within, bound)
		}
	}

	for _, i := range []int{0, 1} {
		if err := cluster.Restart(ctx, i); err != nil {
			t.Fatalf("Restart(%d): %v", i, err)
		}
	}
	t.Log("restarted members 0 and 1: quorum is back")
	// The first calls may still meet the election: publishRetrying
	// retries them with the same request_id until ctx ends.
	v, err := publishRetrying(ctx, cl, &lehrpb.PublishRequest{Namespace: "q/ns", Author: "alice", RequestId: "quorum-back",
		Properties: []*lehrpb.Property{prop("n", "application/json", "4")}}, map[codes.Code]int{})
	if err != nil {
		t.Fatalf("publish with quorum back: %v", err)
	}
	got := getVersion(t, cl, "q/ns", 0)
	if got.GetVersion().GetSeq() != v.GetSeq() || string(got.GetProperties()[0].GetValue()) != "4" {
		t.Errorf("latest after quorum came back = version %d %q; want version %d n=4", got.GetVersion().GetSeq(), got.GetProperties()[0].GetValue(), v.GetSeq())
	}
}
