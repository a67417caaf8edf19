package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/faultnet"
)

func wireBytesScenario() Scenario {
	return Scenario{
		Name:  "wirebytes",
		Title: "bytes on the wire per subscriber for a one-key change in 1 KiB, 1 MiB and 10 MiB namespaces (issue 4 §4, §7)",
		Run:   runWireBytes,
	}
}

// wireSubscribers is how many subscribers each system has in the wire
// bytes scenario; figures are per subscriber.
const wireSubscribers = 3

// hotValue is the size of the value the one-key change replaces.
const hotValue = 1 << 10

// wireNamespace returns the keys and values of a namespace of about size
// bytes: the key "hot" with a hotValue-byte value, and filler keys of at
// most 512 KiB for the rest.
func wireNamespace(vals, fill *valueSource, size int) []producer.Property {
	props := []producer.Property{{Key: "hot", Value: vals.next()}}
	rest := size - hotValue
	for i := 0; rest > 0; i++ {
		n := min(rest, 512<<10)
		v := fill.next()[:n]
		props = append(props, producer.Property{Key: fmt.Sprintf("fill/%03d", i), Value: v})
		rest -= n
	}
	return props
}

type wireParams struct {
	sizes []int
	reps  int
}

func runWireBytes(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile,
		wireParams{sizes: []int{1 << 10, 1 << 20}, reps: 2},
		wireParams{sizes: []int{1 << 10, 1 << 20, 10 << 20}, reps: 5},
		wireParams{sizes: []int{1 << 10, 1 << 20, 10 << 20}, reps: 10},
	)
	changed := len("hot") + hotValue
	res := &Result{
		Setup: fmt.Sprintf("a namespace of the given size (key 'hot' with a %s value + 512 KiB filler keys); each update replaces the value of 'hot' (%d changed bytes: key + value); %d subscribers per system, 1 warm-up update then %d measured, median reported, per subscriber. "+
			"Lehr: 'frame' is the update frame the distributor writes (distributor Stats), 'wire' counts UDP payload bytes (whole QUIC packets: headers, AEAD tags, ACKs, the agent's Ack) through a counting UDP relay between the agents and the distributor. "+
			"etcd and NATS: 'wire' counts TCP payload bytes through a counting TCP relay between the subscribers and the server (gRPC/HTTP2 or NATS protocol, inside TLS 1.3 with client certificates unless the row's transport says plaintext). "+
			"'as snapshot' is the fraction of updates the distributor sent as a snapshot because it was no larger than the patch (the 1 KiB namespace holds only the changed key). 'down' is server → subscriber, 'up' subscriber → server; the window is from the write to 50 ms after the last subscriber saw the change.",
			sizeLabel(hotValue), changed, wireSubscribers, p.reps),
	}
	var lehrFrames []float64
	cl, err := devcluster.Start(ctx, devcluster.Options{
		DomainQuotas: benchQuotas(),
		Dir:          filepath.Join(e.Dir, "cluster"), Zones: []string{benchZone}, Domains: []string{benchDomain},
		AgentsPerZone: -1, Logger: e.Log,
	})
	if err != nil {
		return res, err
	}
	defer cl.Close()
	dist := cl.Distributors(benchZone)[0]
	relay, err := faultnet.Listen(dist.Addr(), faultnet.Options{})
	if err != nil {
		return res, err
	}
	defer relay.Close()
	for _, size := range p.sizes {
		row, err := wireLehr(ctx, e, cl, dist, relay, size, p.reps)
		if err != nil {
			return res, fmt.Errorf("lehr %s: %w", sizeLabel(size), err)
		}
		row.Add("changed", float64(changed), "B")
		res.Rows = append(res.Rows, row)
		f, _ := row.Get("frame")
		lehrFrames = append(lehrFrames, f)
		limit := 1.1*float64(changed) + 128
		res.Targets = append(res.Targets, Target{
			Goal: fmt.Sprintf("%s namespace: frame <= 1.1 × %d + 128 = %.0f B", sizeLabel(size), changed, limit),
			Got:  fmt.Sprintf("%.0f B (%.2f × changed)", f, f/float64(changed)), Met: f <= limit})
	}
	if len(lehrFrames) > 1 {
		lo, hi := lehrFrames[0], lehrFrames[0]
		for _, f := range lehrFrames {
			lo, hi = min(lo, f), max(hi, f)
		}
		res.Targets = append(res.Targets, Target{Goal: "flat from the smallest to the largest namespace (max/min <= 1.1)",
			Got: fmt.Sprintf("max/min = %.3f", hi/lo), Met: hi/lo <= 1.1})
	}
	for _, mk := range []func() (peer, error){
		func() (peer, error) { return startEtcdPeer(ctx, filepath.Join(e.Dir, "etcd"), e.Log) },
		func() (peer, error) { return startNATSPeer(ctx, filepath.Join(e.Dir, "nats")) },
	} {
		pr, err := mk()
		if err != nil {
			return res, err
		}
		rows, err := wirePeer(ctx, pr, p.sizes, p.reps)
		pr.close()
		if err != nil {
			return res, fmt.Errorf("%s: %w", pr.name(), err)
		}
		for i := range rows {
			rows[i].Add("changed", float64(changed), "B")
			res.Rows = append(res.Rows, rows[i])
		}
		for i, size := range p.sizes {
			lr := res.Rows[i]
			res.Rows = append(res.Rows, ratioRow(lr, rows[i], []string{"wire down", "wire up"}))
			_ = size
		}
	}
	return res, nil
}

func wireLehr(ctx context.Context, e *Env, cl *devcluster.Cluster, dist *devcluster.DistributorHandle, relay *faultnet.Relay, size, reps int) (Row, error) {
	prod := cl.Producer()
	ns := fmt.Sprintf("%s/wire-%s", benchDomain, nsLabel(size))
	vals, fill := newValueSource(hotValue), newValueSource(512<<10)
	v, err := prod.Publish(ctx, ns, wireNamespace(vals, fill, size))
	if err != nil {
		return Row{}, err
	}
	var agents []*agenttest.Agent
	defer func() {
		for _, a := range agents {
			a.Close()
		}
	}()
	for i := range wireSubscribers {
		host := fmt.Sprintf("wire-%s-%d", nsLabel(size), i)
		tc, err := cl.HostTLS(benchZone, host)
		if err != nil {
			return Row{}, err
		}
		a, err := agenttest.Dial(ctx, agenttest.Options{Addr: relay.Addr(), TLS: tc, HostID: host, Zone: benchZone, Subscriptions: []string{ns}, Logger: e.Log})
		if err != nil {
			return Row{}, err
		}
		agents = append(agents, a)
	}
	waitAll := func(seq uint64) error {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for _, a := range agents {
			if err := a.WaitVersion(wctx, ns, seq); err != nil {
				return err
			}
		}
		return nil
	}
	if err := waitAll(v.GetSeq()); err != nil {
		return Row{}, err
	}
	base := v.GetSeq()
	var frames, downs, ups []float64
	snaps := 0
	for i := range reps + 1 {
		time.Sleep(50 * time.Millisecond) // let the previous update's acknowledgements pass
		st0 := dist.Stats()
		d0, u0 := relayBytes(relay)
		nv, err := prod.Patch(ctx, ns, base, producer.Patch{Set: []producer.Property{{Key: "hot", Value: vals.next()}}})
		if err != nil {
			return Row{}, err
		}
		base = nv.GetSeq()
		if err := waitAll(base); err != nil {
			return Row{}, err
		}
		time.Sleep(50 * time.Millisecond)
		st1 := dist.Stats()
		d1, u1 := relayBytes(relay)
		if i == 0 {
			continue // warm-up
		}
		n := float64(len(agents))
		// wire.BuildUpdate sends a snapshot instead of a patch when it is no
		// larger (a one-key namespace): count both.
		snaps += int(st1.SnapshotPushes - st0.SnapshotPushes)
		frames = append(frames, float64(st1.PatchBytes-st0.PatchBytes+st1.SnapshotBytes-st0.SnapshotBytes)/n)
		downs = append(downs, float64(d1-d0)/n)
		ups = append(ups, float64(u1-u0)/n)
	}
	row := Row{System: "lehr", Case: sizeLabel(size)}
	row.Add("frame", Median(frames), "B")
	row.Add("wire down", Median(downs), "B")
	row.Add("wire up", Median(ups), "B")
	row.Add("as snapshot", float64(snaps)/float64(reps*len(agents)), "")
	return row, nil
}

func wirePeer(ctx context.Context, pr peer, sizes []int, reps int) ([]Row, error) {
	var rows []Row
	for _, size := range sizes {
		prefix := fmt.Sprintf("/bench/wire-%s/", nsLabel(size))
		vals, fill := newValueSource(hotValue), newValueSource(512<<10)
		for _, p := range wireNamespace(vals, fill, size) {
			if err := pr.put(ctx, prefix+p.Key, p.Value); err != nil {
				return nil, err
			}
		}
		relay, err := newTCPProxy(pr.addr())
		if err != nil {
			return nil, err
		}
		col := newCollector(wireSubscribers)
		err = pr.subscribe(ctx, wireSubscribers, relay.addr(), prefix, func(i int, key string, seq uint64, at time.Time) {
			col.record(i, seq, at.UnixNano())
		})
		if err != nil {
			relay.close()
			return nil, err
		}
		var downs, ups []float64
		for i := range reps + 1 {
			time.Sleep(50 * time.Millisecond)
			d0, u0 := relay.snapshot()
			val := vals.next()
			if err := pr.put(ctx, prefix+"hot", val); err != nil {
				relay.close()
				return nil, err
			}
			if ok, err := col.wait(ctx, seqOf(val), 60*time.Second); !ok || err != nil {
				relay.close()
				return nil, fmt.Errorf("subscribers did not see the change (err %v)", err)
			}
			time.Sleep(50 * time.Millisecond)
			d1, u1 := relay.snapshot()
			if i == 0 {
				continue
			}
			downs = append(downs, float64(d1-d0)/wireSubscribers)
			ups = append(ups, float64(u1-u0)/wireSubscribers)
		}
		relay.close()
		row := Row{System: pr.name(), Case: sizeLabel(size)}
		row.Add("wire down", Median(downs), "B")
		row.Add("wire up", Median(ups), "B")
		rows = append(rows, row)
	}
	return rows, nil
}
