package devcluster_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// Control knows who uses a namespace (issue 32, UCDP's "which services
// use which configuration, in which zones, how many subscribers"): each
// consumer names its service in its lease; agents count leases per
// service, distributors sum them per namespace and version, and
// GetZoneStatus answers with the zone's sum. A consumer that names none
// is counted under its program's name.
func TestZoneStatusCountsSubscribersByService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := twoHostCluster(t, ctx)
	ns := domain + "/flags"
	v1, err := c.Producer().Publish(ctx, ns, props("on", "true"))
	if err != nil {
		t.Fatal(err)
	}
	named := func(s string) func(*consumer.Options) { return func(o *consumer.Options) { o.Service = s } }
	for _, cc := range []struct {
		agent int
		mod   []func(*consumer.Options)
	}{
		{0, []func(*consumer.Options){named("checkout")}},
		{0, []func(*consumer.Options){named("checkout")}},
		{1, []func(*consumer.Options){named("checkout")}},
		{1, []func(*consumer.Options){named("search")}},
		{1, nil}, // the program's name: devcluster.test
	} {
		cl, err := c.Consumer(zoneA, cc.agent, cc.mod...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Subscribe(ctx, ns); err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
	}
	want := []*lehrpb.VersionCount{{Namespace: ns, Version: v1.GetSeq(), Agents: 2, Consumers: 5, Services: []*lehrpb.ServiceConsumers{
		{Service: "checkout", Consumers: 3}, {Service: "devcluster.test", Consumers: 1}, {Service: "search", Consumers: 1},
	}}}
	var got []*lehrpb.VersionCount
	wait.For(t, "the zone's status to count 5 consumers of 3 services", func() bool {
		st, err := c.Producer().RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zoneA})
		if err != nil {
			return false
		}
		got = nil
		for _, vc := range st.GetVersions() {
			if vc.GetNamespace() == ns {
				got = append(got, vc)
			}
		}
		return cmp.Equal(want, got, protocmp.Transform())
	})
	if t.Failed() {
		t.Logf("last seen: %v", got)
	}

	// A service name the grammar refuses is refused by the library, with
	// the field and the rule, before anything is sent.
	if _, err := c.Consumer(zoneA, 0, named("Check Out")); err == nil {
		t.Errorf("a consumer of service %q was made; want the name refused", "Check Out")
	}
}

// An agent that moved an unopenable cache aside says so up the report
// path (issue 32: the fleet page lists cache quarantines first): its
// distributor reports the host and when, and GetZoneStatus answers it.
func TestZoneStatusListsCacheQuarantines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := twoHostCluster(t, ctx)
	ns := domain + "/flags"
	if _, err := c.Producer().Publish(ctx, ns, props("on", "true")); err != nil {
		t.Fatal(err)
	}
	h := c.Agents(zoneA)[1]
	cl, err := c.Consumer(zoneA, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Subscribe(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	// A damaged MANIFEST, which fails its checksum: Badger cannot open it.
	manifest := filepath.Join(h.CacheDir(), "MANIFEST")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for i := 8; i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := h.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	var got []*lehrpb.CacheQuarantine
	wait.For(t, "the zone's status to list the quarantine", func() bool {
		st, err := c.Producer().RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zoneA})
		got = st.GetCacheQuarantines()
		return err == nil && len(got) > 0
	})
	if len(got) != 1 || got[0].GetHostId() != h.HostID || got[0].GetQuarantineTime().AsTime().Before(before.Add(-time.Second)) {
		t.Errorf("cache quarantines %v; want %s's alone, after %v", got, h.HostID, before)
	}
}

// twoHostCluster starts zone-a with two agents, reporting every 200 ms.
func twoHostCluster(t *testing.T, ctx context.Context) *devcluster.Cluster {
	t.Helper()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Dir: t.TempDir(), Zones: []string{zoneA}, AgentsPerZone: 2, Domains: []string{domain},
		ReportInterval: 200 * time.Millisecond, Logger: controltest.Logger(t, slog.LevelError),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}
