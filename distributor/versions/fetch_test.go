package versions_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// The tests of this file run the cache against a real control plane.

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publishN(t *testing.T, cl lehrpb.ControlClient, ns string, n int) []*lehrpb.VersionInfo {
	t.Helper()
	if _, err := cl.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
	var out []*lehrpb.VersionInfo
	for i := 1; i <= n; i++ {
		resp, err := cl.Publish(ctxT(t), &lehrpb.PublishRequest{Namespace: ns, Properties: []*lehrpb.Property{
			{Key: "big", Value: []byte("a value shared by every version, so deltas are small")},
			{Key: "i", Value: []byte(fmt.Sprint(i))},
		}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetVersion())
	}
	return out
}

// A goal whose newest cached predecessor was compacted away at control is
// fetched whole: a delta from a base control no longer has fails with
// NOT_FOUND, and the cache must not retry that delta forever (issue 8,
// defect 4).
func TestDeltaFromACompactedBaseFallsBackToAWholeFetch(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{
		Retention:       store.Retention{KeepLast: 1, KeepFor: time.Nanosecond},
		CompactInterval: 20 * time.Millisecond,
	})
	const ns = "d/app"
	vs := publishN(t, srv.Client, ns, 1)
	c := versions.New(versions.Options{Client: srv.Client, Logger: quietLogger()})
	if _, err := c.Get(ctxT(t), ns, content.Ref{Seq: 1, Checksum: vs[0].GetChecksum()}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 4; i++ {
		resp, err := srv.Client.Publish(ctxT(t), &lehrpb.PublishRequest{Namespace: ns, Properties: []*lehrpb.Property{{Key: "i", Value: []byte(fmt.Sprint(i))}}})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, resp.GetVersion())
	}
	wait.For(t, "control to compact version 1 away", func() bool {
		_, err := srv.Client.FetchVersion(ctxT(t), &lehrpb.FetchVersionRequest{Namespace: ns, Version: 1})
		return err != nil
	})
	v, err := c.Get(ctxT(t), ns, content.Ref{Seq: 4, Checksum: vs[3].GetChecksum()})
	if err != nil {
		t.Fatalf("Get(%s@4) with base 1 compacted: %v", ns, err)
	}
	if v.Checksum != vs[3].GetChecksum() {
		t.Errorf("Get returned checksum %s, want %s", v.Checksum, vs[3].GetChecksum())
	}
}

// A cached version whose checksum is not the one asked for (control's
// store was restored from a backup: same number, other content) is not
// served; the version is fetched again (issue 8, defect 2).
func TestCachedVersionWithAnotherChecksumIsRefetched(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	const ns = "d/app"
	vs := publishN(t, srv.Client, ns, 3)
	c := versions.New(versions.Options{Client: srv.Client, Logger: quietLogger()})
	stale, _ := content.New([]content.Property{{Key: "i", Value: []byte("before the restore")}})
	if err := c.Put(&content.Version{Namespace: ns, Seq: 3, Checksum: stale.Checksum(), Content: stale}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctxT(t), ns, content.Ref{Seq: 3, Checksum: vs[2].GetChecksum()})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if v.Checksum != vs[2].GetChecksum() {
		t.Fatalf("Get served checksum %s from the cache; want control's %s", v.Checksum, vs[2].GetChecksum())
	}
	if got, ok := c.Lookup(ns, 3); !ok || got.Checksum != vs[2].GetChecksum() {
		t.Errorf("the cache keeps %v; want control's version 3", got)
	}
}

// gatedClient holds FetchVersion calls until released: a fault wrapper
// around the real control client.
type gatedClient struct {
	versions.Client
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedClient) FetchVersion(ctx context.Context, in *lehrpb.FetchVersionRequest, opts ...grpc.CallOption) (*lehrpb.FetchVersionResponse, error) {
	g.once.Do(func() { close(g.started) })
	<-g.release
	return g.Client.FetchVersion(ctx, in, opts...)
}

// Concurrent Gets share one fetch, and the caller that started it going
// away (an agent disconnecting) does not fail everyone else's (issue 8,
// defect 8).
func TestSharedFetchOutlivesItsFirstCaller(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	const ns = "d/app"
	vs := publishN(t, srv.Client, ns, 1)
	g := &gatedClient{Client: srv.Client, started: make(chan struct{}), release: make(chan struct{})}
	c := versions.New(versions.Options{Client: g, Logger: quietLogger()})

	first, cancelFirst := context.WithCancel(ctxT(t))
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Get(first, ns, content.Ref{Seq: 1, Checksum: vs[0].GetChecksum()})
		firstErr <- err
	}()
	<-g.started
	second := make(chan error, 1)
	go func() {
		v, err := c.Get(ctxT(t), ns, content.Ref{Seq: 1, Checksum: vs[0].GetChecksum()})
		if err == nil && v.Checksum != vs[0].GetChecksum() {
			err = errors.New("wrong version")
		}
		second <- err
	}()
	cancelFirst()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("first Get after its context was cancelled = %v, want context.Canceled", err)
	}
	close(g.release)
	if err := <-second; err != nil {
		t.Errorf("second Get failed with the first caller's cancellation: %v", err)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A delta control sends with a goal event builds the new version from the
// cached base when it applies and verifies; anything else caches nothing
// and leaves the version to be fetched.
func TestOffer(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	const ns = "d/app"
	vs := publishN(t, srv.Client, ns, 3)
	c := versions.New(versions.Options{Client: srv.Client, Logger: quietLogger()})
	t.Cleanup(func() { c.Close() })
	base, err := c.Get(ctxT(t), ns, content.Ref{Seq: 1, Checksum: vs[0].GetChecksum()})
	if err != nil {
		t.Fatal(err)
	}
	delta := func(from, to uint64) *lehrpb.FetchDeltaResponse {
		d, err := srv.Client.FetchDelta(ctxT(t), &lehrpb.FetchDeltaRequest{Namespace: ns, From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		d.Kind = lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED // as sent with a goal event
		return d
	}
	tampered := delta(1, 2)
	tampered.Set[0].Value = []byte("not what control published")
	otherBase := delta(1, 2)
	otherBase.From.Checksum = vs[1].GetChecksum()

	for _, tc := range []struct {
		name    string
		d       *lehrpb.FetchDeltaResponse
		wantErr bool
		cached  bool // version d.to is cached afterwards
		offered uint64
	}{
		{"base not cached", delta(2, 3), false, false, 0},
		{"base cached with another checksum", otherBase, false, false, 0},
		{"content that fails its checksum", tampered, true, false, 0},
		{"applies", delta(1, 2), false, true, 1},
		{"already cached", delta(1, 2), false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Offer(ns, tc.d)
			if (err != nil) != tc.wantErr || tc.wantErr && !errors.Is(err, versions.ErrChecksum) {
				t.Errorf("Offer: %v; want an error: %v (ErrChecksum)", err, tc.wantErr)
			}
			v, ok := c.Lookup(ns, tc.d.GetTo().GetSeq())
			if ok != tc.cached {
				t.Fatalf("version %d cached: %v, want %v", tc.d.GetTo().GetSeq(), ok, tc.cached)
			}
			if ok && (v.Checksum != tc.d.GetTo().GetChecksum() || v.Kind != base.Kind) {
				t.Errorf("built %s kind %v, want %s kind %v", v.Checksum, v.Kind, tc.d.GetTo().GetChecksum(), base.Kind)
			}
			if st := c.Stats(); st.Offered != tc.offered || st.Deltas != 0 || st.Fetches != 1 {
				t.Errorf("stats %+v: want %d offered, no delta fetched, one version fetched whole", st, tc.offered)
			}
		})
	}
}
