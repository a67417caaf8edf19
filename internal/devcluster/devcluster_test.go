package devcluster_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/devcluster"
	"lehr.dev/lehr/proto/lehrpb"
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
	c, err := devcluster.Start(ctx, devcluster.Options{
		Domains: []string{"demo"},
		Logger:  controltest.Logger(t, slog.LevelWarn),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	dir := c.Dir()
	defer c.Close()
	if got, want := c.Zones(), devcluster.DefaultZones; strings.Join(got, ",") != strings.Join(want, ",") {
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
	if _, err := c.Producer().Publish(ctx, "demo/hello", []producer.Property{{Key: "greeting", Value: []byte("hi")}}); err != nil {
		t.Fatalf("Publish: %v", err)
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
}
