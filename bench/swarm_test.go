package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/testenv/devcluster"
)

// TestSwarmRedialsLostConnections: with Keep (the fan-out), the swarm's
// simulated agents redial a connection they lose, as the real agent does.
// They once did not (only after "redial"), so an agent whose connection
// ended during the fan-out never received another update and every later
// update waited out its limit.
func TestSwarmRedialsLostConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane, distributor and swarm process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(ctx, devcluster.Options{
		Dir: t.TempDir(), Zones: []string{benchZone}, Domains: []string{benchDomain},
		AgentsPerZone: -1, Logger: controltest.Logger(t, 4),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dist := cl.Distributors(benchZone)[0]
	ns := benchDomain + "/swarm"
	v, err := cl.Producer().Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	col := newCollector(n)
	sw, conn, err := startSwarm(ctx, swarmConfig{
		Addr: dist.Addr(), CADir: filepath.Join(cl.Dir(), "pki", "ca"), N: n, Prefix: "swarmtest",
		Zone: benchZone, Subs: []string{ns}, Parallel: n, Keep: true,
	}, func(ev swarmEvent) {
		if ev.NS == ns && !ev.Refused {
			col.record(ev.I, ev.Version, ev.T)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.quit()
	if conn.Failed > 0 {
		t.Fatalf("%d agents failed to connect: %s", conn.Failed, conn.Err)
	}
	if ok, err := col.wait(ctx, v.GetSeq(), time.Minute); !ok || err != nil {
		t.Fatalf("first version not at every agent (err %v)", err)
	}

	// Every connection ends with the distributor; the agents must come
	// back to its successor on their own.
	if err := dist.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := dist.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	v2, err := cl.Producer().Patch(ctx, ns, v.GetSeq(), producer.Patch{Set: []producer.Property{{Key: "k", Value: []byte("2")}}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := col.wait(ctx, v2.GetSeq(), time.Minute); !ok || err != nil {
		lat, missed, _ := col.result(v2.GetSeq(), time.Now())
		t.Fatalf("version %d reached %d of %d agents within a minute of the distributor's restart (missed %d, err %v)", v2.GetSeq(), len(lat), n, missed, err)
	}
	st, err := sw.command(ctx, "stats", "stats")
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost != n || st.Alive != n {
		t.Errorf("stats: lost %d, alive %d; want %d lost (one per agent) and %d alive (by error: %v)", st.Lost, st.Alive, n, n, fmt.Sprint(st.LostBy))
	}
}
