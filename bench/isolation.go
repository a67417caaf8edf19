package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
)

func isolationScenario() Scenario {
	return Scenario{
		Name: "isolation",
		Title: "stakeholder isolation: another tenant's one-key patch → every host, and its rollback, alone and while one tenant floods " +
			"small publishes at its limits, large snapshots, or holds the store at its high-water mark (issues 12, 26)",
		Run: runIsolation,
	}
}

// Isolation's domains: the victim, whose patches are timed, and the
// flooders. "bulk" may store more than the default (a fleet admin raised
// it), so its flood of large snapshots is accepted, not refused at once.
const (
	isoVictim   = "victim"
	isoSmall    = "chatty"
	isoBulk     = "bulk"
	isoSnapshot = 8 << 20 // a large-snapshot flood's versions
	// isoCapped floods as isoBulk does, its outbound limited to
	// isoCappedRate bytes a second for the zone.
	isoCapped     = "capped"
	isoCappedRate = 4 << 20
	// isoDark floods as isoBulk does, to a namespace no host subscribes
	// to: what the flood costs control and its etcd alone.
	isoDark = "dark"
)

// isoPhase is one phase of the scenario: a flood to run while the
// victim's patches are timed, after warm (if set) has run to its end.
type isoPhase struct {
	name  string
	warm  func(ctx context.Context, prod *producer.Client) error
	flood func(ctx context.Context, prod *producer.Client) error
}

func runIsolation(ctx context.Context, e *Env) (*Result, error) {
	samples := pick(e.Profile, 10, 60, 200)
	const hosts = 4
	res := &Result{
		Setup: fmt.Sprintf("one process (testenv/devcluster): control + embedded etcd (fsync on) with the rollout strategist (every domain global_blast: no bake), "+
			"one zone with 1 distributor and %d real agents, each with a consumer of %s/app and of the flooding namespaces. Each sample patches one "+
			"1 KiB key of %s/app and waits until every host's callback (time from the Patch call); %d samples a phase, 50–250 ms apart at random; "+
			"each phase ends with a rollback of %s/app, timed the same way. Floods: (a) 16 publishers of 1 KiB snapshots over 64 namespaces of "+
			"domain %s at its default quotas (10/s, burst 20), retrying at once when refused (hostile); (b) 2 publishers of %d MiB snapshots "+
			"(16 × 512 KiB) to %s/big, at its default rates (10 publishes and 8 MiB a second), its stored-bytes quota raised to 1 GiB (then refused); the same to capped/big, whose domain's outbound limit is 4 MiB/s, and to dark/big, which no host subscribes to (what control and its etcd pay alone); (c) a second cluster whose store quota is "+
			"256 MiB, filled by %s/big until control refuses it at the high-water mark, then flooded on (every publish refused).",
			hosts, isoVictim, isoVictim, samples, isoVictim, isoSmall, isoSnapshot>>20, isoBulk, isoBulk),
	}

	smallFlood := func(ctx context.Context, prod *producer.Client) error {
		vals := newValueSource(1 << 10)
		var mu sync.Mutex
		var wg sync.WaitGroup
		var firstErr error
		for w := range 16 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					mu.Lock()
					v := vals.next()
					mu.Unlock()
					ns := fmt.Sprintf("%s/ns-%02d", isoSmall, (w*7+i)%64)
					_, err := prod.Publish(ctx, ns, []producer.Property{{Key: "k", Value: v}})
					if err != nil && ctx.Err() == nil && !errors.Is(err, producer.ErrExhausted) {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		return firstErr
	}
	bulkFlood := func(ns string) func(ctx context.Context, prod *producer.Client) error {
		return func(ctx context.Context, prod *producer.Client) error { return isoBulkFlood(ctx, prod, ns) }
	}
	run := func(name string, storeQuota int64, phases []isoPhase) error {
		cl, err := devcluster.Start(ctx, devcluster.Options{
			Dir:           filepath.Join(e.Dir, name),
			Zones:         []string{"zone-a"},
			AgentsPerZone: hosts,
			Rollouts:      true,
			StoreQuota:    storeQuota,
			Logger:        e.Log,
		})
		if err != nil {
			return err
		}
		defer cl.Close()
		prod := cl.Producer()
		// The flooders' own client retries nothing: a refusal is theirs to
		// handle (they publish on at once, or after 20 ms at their limits).
		floodProd, err := producer.New(producer.Options{Address: cl.ControlAddr(), Retry: producer.RetryPolicy{MaxAttempts: 1}, Logger: e.Log})
		if err != nil {
			return err
		}
		defer floodProd.Close()
		for _, d := range []*lehrpb.Domain{
			{Name: isoVictim}, {Name: isoSmall},
			{Name: isoBulk, Quotas: &lehrpb.Quotas{MaxStoredBytes: 1 << 30}},
			{Name: isoCapped, Quotas: &lehrpb.Quotas{MaxStoredBytes: 1 << 30, OutboundBytesPerSecond: isoCappedRate}},
			{Name: isoDark, Quotas: &lehrpb.Quotas{MaxStoredBytes: 1 << 30}},
		} {
			if _, err := prod.CreateDomain(ctx, d); err != nil {
				return err
			}
			if _, err := prod.SetRolloutPolicy(ctx, d.GetName(), &lehrpb.RolloutPolicy{GlobalBlast: true}, "bench", 0); err != nil {
				return err
			}
		}
		seen := &rolloutSeen{at: map[uint64]map[string]time.Time{}, wake: make(chan struct{})}
		var floodApplied atomic.Int64
		floodNS := []string{isoBulk + "/big", isoCapped + "/big"}
		for i := range 8 {
			floodNS = append(floodNS, fmt.Sprintf("%s/ns-%02d", isoSmall, i))
		}
		for i, a := range cl.Agents("zone-a") {
			c, err := cl.Consumer("zone-a", i)
			if err != nil {
				return err
			}
			defer c.Close()
			host := a.HostID
			sub, err := c.Subscribe(ctx, isoVictim+"/app")
			if err != nil {
				return err
			}
			sub.OnChange(func(ch consumer.Change) error { seen.add(host, ch.New.Version()); return nil })
			for _, ns := range floodNS {
				sub, err := c.Subscribe(ctx, ns)
				if err != nil {
					return err
				}
				sub.OnChange(func(consumer.Change) error { floodApplied.Add(1); return nil })
			}
		}
		small := newValueSource(1 << 10)
		v, err := prod.Publish(ctx, isoVictim+"/app", []producer.Property{{Key: "k", Value: small.next()}})
		if err != nil {
			return err
		}
		if _, err := seen.wait(ctx, v.GetSeq(), hosts); err != nil {
			return err
		}
		reach := func(seq uint64, t0 time.Time) (time.Duration, error) {
			ats, err := seen.wait(ctx, seq, hosts)
			if err != nil {
				return 0, err
			}
			last := ats[0]
			for _, at := range ats {
				last = maxTime(last, at)
			}
			return last.Sub(t0), nil
		}
		for _, ph := range phases {
			fctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var floodErr error
			if ph.warm != nil {
				if err := ph.warm(fctx, floodProd); err != nil {
					stop()
					return fmt.Errorf("%s: %w", ph.name, err)
				}
			}
			if ph.flood != nil {
				wg.Go(func() { floodErr = ph.flood(fctx, floodProd) })
				time.Sleep(2 * time.Second) // the flood under way
			}
			before, start := floodApplied.Load(), time.Now()
			var lat []time.Duration
			var perr error
			for len(lat) < samples && perr == nil {
				time.Sleep(50*time.Millisecond + rand.N(200*time.Millisecond))
				t0 := time.Now()
				nv, err := prod.Patch(ctx, isoVictim+"/app", v.GetSeq(), producer.Patch{Set: []producer.Property{{Key: "k", Value: small.next()}}})
				if err != nil {
					perr = fmt.Errorf("the victim's patch: %w", err)
					break
				}
				v = nv
				d, err := reach(v.GetSeq(), t0)
				if err != nil {
					perr = err
					break
				}
				lat = append(lat, d)
			}
			// The safety path, under the same flood.
			var rbLat time.Duration
			if perr == nil {
				t0 := time.Now()
				rb, err := prod.Rollback(ctx, isoVictim+"/app", v.GetSeq()-1, producer.WithMessage("bench: the rollback under "+ph.name))
				if err != nil {
					perr = fmt.Errorf("the victim's rollback: %w", err)
				} else {
					v = rb
					rbLat, perr = reach(rb.GetSeq(), t0)
				}
			}
			elapsed := time.Since(start)
			stop()
			wg.Wait()
			if perr != nil {
				return fmt.Errorf("%s: %w", ph.name, perr)
			}
			if floodErr != nil {
				return fmt.Errorf("%s: the flood: %w", ph.name, floodErr)
			}
			row := Row{System: "lehr", Case: ph.name}
			row.AddLatency("", Summarize(lat))
			row.Add("rollback → every host", float64(rbLat.Microseconds())/1000, "ms")
			row.Add("flood versions applied", float64(floodApplied.Load()-before)/elapsed.Seconds(), "/s")
			st := cl.Control().StoreSpace()
			row.Add("store used", float64(st.Level())/(1<<20), "MiB")
			row.Add("store high-water mark", float64(st.HighWater)/(1<<20), "MiB")
			res.Rows = append(res.Rows, row)
		}
		return nil
	}

	if err := run("cluster", 0, []isoPhase{
		{name: "one-key patch → every host, alone"},
		{name: "… while another domain floods small publishes at its limits", flood: smallFlood},
		{name: fmt.Sprintf("… while another domain floods %d MiB snapshots at its limits", isoSnapshot>>20), flood: bulkFlood(isoBulk + "/big")},
		{name: fmt.Sprintf("… the same, its outbound limited to %d MiB/s", isoCappedRate>>20), flood: bulkFlood(isoCapped + "/big")},
		{name: "… the same to a namespace no host subscribes to", flood: bulkFlood(isoDark + "/big")},
	}); err != nil {
		return res, err
	}
	// Until control refuses a snapshot at the store's high-water mark.
	fill := func(ctx context.Context, prod *producer.Client) error {
		vals := newValueSource(512 << 10)
		deadline := time.Now().Add(5 * time.Minute)
		for i := 0; ; i++ {
			ps := make([]producer.Property, isoSnapshot/(512<<10))
			for j := range ps {
				ps[j] = producer.Property{Key: fmt.Sprintf("blob/%02d", j), Value: vals.next()}
			}
			_, err := prod.Publish(ctx, isoBulk+"/big", ps)
			var pe *producer.Error
			switch {
			case errors.As(err, &pe) && pe.Reason == "STORE_FULL":
				return nil
			case errors.Is(err, producer.ErrExhausted):
				time.Sleep(100 * time.Millisecond) // its rate
			case err != nil:
				return fmt.Errorf("filling the store, publish %d: %w", i, err)
			case time.Now().After(deadline):
				return fmt.Errorf("no STORE_FULL after 5 minutes of filling a 256 MiB store")
			}
		}
	}
	if err := run("small-store", 256<<20, []isoPhase{
		{name: "small store: one-key patch → every host, alone"},
		{name: "… with the store at its high-water mark", warm: fill, flood: bulkFlood(isoBulk + "/big")},
	}); err != nil {
		return res, err
	}
	res.Notes = append(res.Notes,
		"p99 targets (issue 26): each flood phase's p99 within 1.5 × its cluster's idle p99, and the rollback succeeding in every phase.",
		"flood versions applied is the flooding namespaces' versions the hosts' consumers applied per second (all hosts).",
		"store used is control's level against its high-water mark (what etcd holds plus what was committed since it last read it) at the end of the phase.",
		"on 2 cores the floods also take CPU from everything else (control committing and hashing, the distributor diffing and encrypting, agents writing): no domain-aware scheduler shares the cores.")
	return res, nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// isoBulkFlood publishes isoSnapshot-byte snapshots (16 × 512 KiB) to ns
// from two publishers until ctx ends, at the domain's limits: a refusal
// for a quota is waited out briefly, anything else ends the flood.
func isoBulkFlood(ctx context.Context, prod *producer.Client, ns string) error {
	vals := newValueSource(512 << 10)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				ps := make([]producer.Property, isoSnapshot/(512<<10))
				mu.Lock()
				for i := range ps {
					ps[i] = producer.Property{Key: fmt.Sprintf("blob/%02d", i), Value: vals.next()}
				}
				mu.Unlock()
				_, err := prod.Publish(ctx, ns, ps)
				switch {
				case err == nil || ctx.Err() != nil:
				case errors.Is(err, producer.ErrExhausted):
					time.Sleep(20 * time.Millisecond) // at its limits, not beyond
				default:
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
