package devcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
)

func TestOptionsRejected(t *testing.T) {
	tests := []struct {
		name string
		opts devcluster.Options
		want string
	}{
		{"bad zone", devcluster.Options{Zones: []string{"Bad Zone"}}, "Options.Zones[0]"},
		{"duplicate zone", devcluster.Options{Zones: []string{"z-a", "z-a"}}, "appears twice"},
		{"bad domain", devcluster.Options{Domains: []string{"no/slash"}}, "Options.Domains[0]"},
		{"negative distributors", devcluster.Options{DistributorsPerZone: -1}, "DistributorsPerZone"},
		{"negative lease", devcluster.Options{LeaseTTL: -time.Second}, "LeaseTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.opts.Dir = dir
			c, err := devcluster.Start(context.Background(), tt.opts)
			if err == nil {
				c.Close()
				t.Fatalf("Start(%+v) = nil error, want one mentioning %q", tt.opts, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start error = %q, want it to mention %q", err, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("rejected Start wrote %d entries into Dir, want none", len(ents))
			}
		})
	}
}

// TestStartAndClose starts the default shape in a temporary directory,
// checks every daemon is up and that Close removes what Start made.
func TestStartAndClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	goroutines := runtime.NumGoroutine()
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync:               true, // a test cluster need not survive a machine crash
		Domains:              []string{"demo"},
		Logger:               controltest.Logger(t, slog.LevelWarn),
		ControlMetricsListen: "127.0.0.1:0",
		DistributorMetrics:   true,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	dir := c.Dir()
	defer c.Close()
	if got, want := c.Zones(), devcluster.DefaultZones(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Zones() = %v, want %v", got, want)
	}
	zs, err := c.Producer().ListZones(ctx)
	if err != nil {
		t.Fatalf("ListZones: %v", err)
	}
	if len(zs) != 2 {
		t.Errorf("control has %d zones, want 2", len(zs))
	}
	for _, z := range c.Zones() {
		ds, as := c.Distributors(z), c.Agents(z)
		if len(ds) != 1 || len(as) != 1 {
			t.Fatalf("zone %s: %d distributors and %d agents, want 1 and 1", z, len(ds), len(as))
		}
		if len(as[0].Socket()) > 104 {
			t.Errorf("socket path %s is %d bytes, too long for a unix socket", as[0].Socket(), len(as[0].Socket()))
		}
		st, err := as[0].Local().Status(ctx, &lehrpb.StatusRequest{})
		if err != nil {
			t.Fatalf("agent %s Status: %v", as[0].HostID, err)
		}
		if st.GetHostId() != as[0].HostID || st.GetZone() != z {
			t.Errorf("agent Status host %q zone %q, want %q %q", st.GetHostId(), st.GetZone(), as[0].HostID, z)
		}
	}
	v, err := c.Producer().Publish(ctx, "demo/hello", []producer.Property{{Key: "greeting", Value: []byte("hi")}})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}

	// Metrics endpoints answer.
	metricsURLs := []string{"http://" + c.ControlMetricsAddr() + "/metrics"}
	for _, z := range c.Zones() {
		metricsURLs = append(metricsURLs, "http://"+c.Distributors(z)[0].MetricsAddr()+"/metrics")
	}
	for _, u := range metricsURLs {
		resp, err := http.Get(u)
		if err != nil {
			t.Errorf("GET %s: %v", u, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("lehr_")) {
			t.Errorf("GET %s: status %d, %d bytes without lehr_ metrics", u, resp.StatusCode, len(body))
		}
	}

	// A simulated agent with a host certificate from HostTLS is accepted
	// by a distributor of its zone (mutual TLS, a host identity) and receives
	// the version.
	tlsCfg, err := c.HostTLS(c.Zones()[0], "sim-host-1")
	if err != nil {
		t.Fatalf("HostTLS: %v", err)
	}
	d := c.Distributors(c.Zones()[0])[0]
	sim, err := agenttest.Dial(ctx, agenttest.Options{
		Addr: d.Addr(), TLS: tlsCfg, HostID: "sim-host-1", Zone: d.Zone,
		Subscriptions: []string{"demo/hello"}, Logger: controltest.Logger(t, slog.LevelWarn),
	})
	if err != nil {
		t.Fatalf("agenttest.Dial: %v", err)
	}
	if err := sim.WaitVersion(ctx, "demo/hello", v.GetSeq()); err != nil {
		t.Errorf("simulated agent never got demo/hello@%d: %v", v.GetSeq(), err)
	}
	sim.Close()

	// Every daemon stops and starts again.
	for _, z := range c.Zones() {
		d, a := c.Distributors(z)[0], c.Agents(z)[0]
		if err := d.Stop(); err != nil {
			t.Errorf("stop %s: %v", d.ID, err)
		}
		if d.Running() || d.Distributor() != nil {
			t.Errorf("%s runs after Stop", d.ID)
		}
		if err := d.Restart(ctx); err != nil {
			t.Fatalf("restart %s: %v", d.ID, err)
		}
		if err := d.Restart(ctx); err == nil {
			t.Errorf("restarting running %s: nil error, want one", d.ID)
		}
		if err := a.Stop(); err != nil {
			t.Errorf("stop %s: %v", a.HostID, err)
		}
		if err := a.Restart(ctx); err != nil {
			t.Fatalf("restart %s: %v", a.HostID, err)
		}
	}
	addr := c.ControlAddr()
	if err := c.StopControl(); err != nil {
		t.Errorf("StopControl: %v", err)
	}
	if err := c.RestartControl(ctx); err != nil {
		t.Fatalf("RestartControl: %v", err)
	}
	if c.ControlAddr() != addr {
		t.Errorf("control restarted on %s, want %s", c.ControlAddr(), addr)
	}
	if _, err := c.Producer().Get(ctx, "demo/hello"); err != nil {
		t.Errorf("Get after RestartControl: %v", err)
	}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left the temporary directory %s behind (stat: %v)", dir, err)
	}
	// Close waited for every goroutine: the count returns to where it was
	// (library goroutines of closed connections may take a moment to end).
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before Start; still running:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
}

// TestRestartOnSameDir stops a whole cluster and starts it again on the
// same directory, as "lehr dev" does between runs: the CA, control's data
// and the agents' caches are reused, so consumers are served from disk at
// once and the new distributors send no snapshot. The directory is long
// enough that sockets must live elsewhere.
func TestRestartOnSameDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-directory-name-", 4))
	opts := devcluster.Options{
		NoSync:  true, // a test cluster need not survive a machine crash
		Dir:     dir,
		Zones:   []string{"zone-a"},
		Domains: []string{"demo"},
		// Debug: under load this test once saw a patch after the
		// restart not reach the consumer in 2 minutes (twice in a day,
		// not reproduced alone); if it fails again, the daemons' story
		// is in its log.
		Logger: controltest.Logger(t, slog.LevelDebug),
	}
	const ns = "demo/settings"

	c, err := devcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Close()
	a := c.Agents("zone-a")[0]
	sock := a.Socket()
	if strings.HasPrefix(sock, dir) || len(sock) > 100 {
		t.Errorf("socket %s: want a short path outside the long Dir", sock)
	}
	// Several properties, so that a one-key patch is smaller than a
	// snapshot (distributors send whichever is smaller).
	props := []producer.Property{{Key: "color", Value: []byte("blue")}}
	for i := range 8 {
		props = append(props, producer.Property{Key: fmt.Sprintf("other/%d", i), Value: []byte(strings.Repeat("v", 100))})
	}
	v1, err := c.Producer().Publish(ctx, ns, props)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	cl, err := c.Consumer("zone-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cl.Subscribe(ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if _, err := sub.Next(ctx, nil); err != nil {
		t.Fatalf("first version: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("Close left the socket %s (stat: %v)", sock, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "ca", "ca.crt")); err != nil {
		t.Fatalf("Close removed the caller's Dir: %v", err)
	}

	c, err = devcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	defer c.Close()
	a = c.Agents("zone-a")[0]
	got, err := a.Local().Get(ctx, &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Get from the cache of the previous run: %v", err)
	}
	if got.GetVersion().GetSeq() != v1.GetSeq() {
		t.Errorf("cached version = %d, want %d", got.GetVersion().GetSeq(), v1.GetSeq())
	}
	cl, err = c.Consumer("zone-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	sub, err = cl.Subscribe(ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if v, _ := sub.View().Get("color"); string(v) != "blue" {
		t.Errorf("view right after the second start: color = %q, want blue from disk", v)
	}
	v2, err := c.Producer().Patch(ctx, ns, v1.GetSeq(), producer.Patch{Set: []producer.Property{{Key: "color", Value: []byte("green")}}})
	if err != nil {
		t.Fatalf("Patch after restart: %v", err)
	}
	view, err := sub.Next(ctx, sub.View())
	for err == nil && view.Version() < v2.GetSeq() {
		view, err = sub.Next(ctx, view)
	}
	if err != nil {
		t.Fatalf("waiting for v%d: %v", v2.GetSeq(), err)
	}
	if v, _ := view.Get("color"); string(v) != "green" {
		t.Errorf("after the patch: color = %q, want green", v)
	}
	if st := c.Distributors("zone-a")[0].Stats(); st.SnapshotBytes != 0 || st.PatchBytes == 0 {
		t.Errorf("new distributor sent %d snapshot and %d patch bytes; want 0 and some (the agent's cache was intact)", st.SnapshotBytes, st.PatchBytes)
	}
}
