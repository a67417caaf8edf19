package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/proto/lehrpb"
)

func strategistScenario() Scenario {
	return Scenario{
		Name:  "strategist",
		Title: "control's cost against the catalog, the rollout strategist on: etcd requests and CPU per second with N namespaces, nothing published, then one rollout in flight (issue 30)",
		Run:   runStrategist,
	}
}

// strategistWindow is how long each catalog size is watched idle.
const strategistWindow = 10 * time.Second

func runStrategist(ctx context.Context, e *Env) (*Result, error) {
	sizes := pick(e.Profile, []int{100}, []int{100, 1000, 10000}, []int{100, 10000, 50000})
	res := &Result{
		Setup: fmt.Sprintf("control in the bench process on embedded etcd (no fsync, to load faster: idle work writes nothing), the rollout "+
			"strategist on, history compaction off (its pass reads every namespace every 10 minutes: issue 27's); N namespaces of one "+
			"domain published once each (a namespace's first version needs no rollout) plus 10 with a finished global-blast rollout; "+
			"then %v with nothing published: etcd requests of every kind control made (lehr_control_etcd_round_trips_total) and the "+
			"bench process's CPU (control is the only thing running). Then one namespace gets a version whose rollout bakes for an hour "+
			"(a policy of its own), and the same %v is measured with it in flight: the domain's rounds run every second. Last, up to 1,000 more "+
			"namespaces get a version under a domain policy baking an hour, and the same window is measured once every one of them bakes. "+
			"etcd writes/s is the rise of etcd's revision (lehr_control_store_revision, read every second) over the window.", strategistWindow, strategistWindow),
	}
	for _, n := range sizes {
		rows, err := strategistIdle(ctx, e, n)
		if err != nil {
			return res, fmt.Errorf("N = %d: %w", n, err)
		}
		res.Rows = append(res.Rows, rows...)
	}
	res.Notes = append(res.Notes,
		"idle work that remains: the store's space watch (etcd's status and alarms, a domain count: 3 requests a second), the health check (a zone list every 2 s) and the canary evaluations' step (one range read a second) — none of it reads a namespace.")
	return res, nil
}

func strategistIdle(ctx context.Context, e *Env, n int) ([]Row, error) {
	row := Row{System: "lehr", Case: fmt.Sprintf("%d namespaces, idle", n)}
	busy := Row{System: "lehr", Case: fmt.Sprintf("%d namespaces, one rollout in flight", n)}
	dir, err := os.MkdirTemp(e.Dir, "strategist-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rc, err := startControl(ctx, dir, e.Log, true, func(o *control.Options) {
		o.Rollouts, o.CompactInterval, o.RolloutInterval = true, -1, time.Second
	})
	if err != nil {
		return nil, err
	}
	defer rc.close()
	p, err := rc.producer(e.Log)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if _, err := p.SetRolloutPolicy(ctx, benchDomain, &lehrpb.RolloutPolicy{GlobalBlast: true}, "bench", 0); err != nil {
		return nil, err
	}
	// Load: N first versions, 8 publishers.
	start := time.Now()
	if err := parallel(ctx, 8, n, func(i int) error {
		_, err := p.Publish(ctx, fmt.Sprintf("%s/cat-%06d", benchDomain, i), []producer.Property{{Key: "k", Value: []byte("v")}})
		return err
	}); err != nil {
		return nil, err
	}
	loaded := time.Since(start)
	// Ten namespaces with a finished rollout each.
	for i := range 10 {
		ns := fmt.Sprintf("%s/cat-%06d", benchDomain, i)
		v, err := p.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("v2")}})
		if err != nil {
			return nil, err
		}
		if _, err := p.WaitRollout(ctx, ns, v.GetSeq(), 20*time.Millisecond, nil); err != nil {
			return nil, err
		}
	}
	measure := func(row *Row) {
		time.Sleep(2 * time.Second) // settle: the last rounds, the audit writer
		trips0, cpu0, rev0 := etcdRoundTrips(rc.c), procCPU(), rc.c.StoreSpace().Revision
		time.Sleep(strategistWindow)
		trips1, cpu1, rev1 := etcdRoundTrips(rc.c), procCPU(), rc.c.StoreSpace().Revision
		secs := strategistWindow.Seconds()
		row.Add("etcd requests/s", float64(trips1-trips0)/secs, "")
		row.Add("etcd writes/s", float64(rev1-rev0)/secs, "")
		row.Add("cpu", (cpu1-cpu0).Seconds()/secs, "cores")
	}
	measure(&row)
	row.Add("load", loaded.Seconds(), "s")

	// One rollout baking for an hour.
	ns := fmt.Sprintf("%s/cat-%06d", benchDomain, 10)
	if _, err := p.SetRolloutPolicy(ctx, ns, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
	}}, "bench", 0); err != nil {
		return nil, err
	}
	v, err := p.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("v2")}})
	if err != nil {
		return nil, err
	}
	for {
		r, err := p.GetRollout(ctx, ns, v.GetSeq())
		if err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING && r.GetStageStartTime() != nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	measure(&busy)

	// Many rollouts baking (issue 27: each was rewritten every second):
	// the domain's policy bakes an hour, and k more namespaces get a
	// version; measured once every one of them bakes.
	first, k := 11, min(n-11, 1000)
	if k <= 0 {
		return []Row{row, busy}, nil
	}
	baking := Row{System: "lehr", Case: fmt.Sprintf("%d namespaces, %d rollouts baking", n, k)}
	// The zone has no distributor: a 10 s apply deadline skips it after
	// 5 s (rollout.EmptyZoneWait is at most half of it), and the stage bakes.
	if _, err := p.SetRolloutPolicy(ctx, benchDomain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{
		{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour), ApplyDeadline: durationpb.New(10 * time.Second)},
	}}, "bench", 0); err != nil {
		return nil, err
	}
	if err := parallel(ctx, 8, k, func(i int) error {
		ns := fmt.Sprintf("%s/cat-%06d", benchDomain, first+i)
		v, err := p.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte("v3")}})
		if err != nil {
			return err
		}
		for { // until its stage bakes
			r, err := p.GetRollout(ctx, ns, v.GetSeq())
			if err == nil && r.GetStageAppliedTime() != nil {
				return nil
			}
			if err == nil && r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
				return fmt.Errorf("rollout %s is %v before it baked: %s", r.GetId(), r.GetState(), r.GetReason())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}); err != nil {
		return nil, err
	}
	measure(&baking)
	return []Row{row, busy, baking}, nil
}

// parallel runs f(0) … f(n-1) on workers goroutines and returns the first
// error.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if err := f(int(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// etcdRoundTrips sums control's lehr_control_etcd_round_trips_total.
func etcdRoundTrips(c *control.Control) int64 {
	var b strings.Builder
	c.Metrics().WritePrometheus(&b)
	var n int64
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "lehr_control_etcd_round_trips_total{") {
			var v int64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
	}
	return n
}

// procCPU returns this process's CPU time so far.
func procCPU() time.Duration {
	s, _ := readProc(os.Getpid())
	return s.cpu
}
