package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/validate"
)

// publishParams are the sizes of the publish scenario.
type publishParams struct {
	warmup      int // unmeasured publishes per value size
	reps        int // repetitions
	opsPerRep   map[int]int
	concurrency int // publishers of the throughput phase
	concOps     map[int]int
}

// publishSizes are the value sizes of issue 2: 1 KiB, 64 KiB and the
// maximum value size.
var publishSizes = []int{1 << 10, 64 << 10, validate.MaxValueBytes}

func publishScenario() Scenario {
	return Scenario{
		Name:  "publish",
		Title: "publish latency and throughput through the gRPC API on embedded etcd (issue 2)",
		Run:   runPublish,
	}
}

func runPublish(ctx context.Context, e *Env) (*Result, error) {
	kib, mid, max := publishSizes[0], publishSizes[1], publishSizes[2]
	p := pick(e.Profile,
		publishParams{warmup: 2, reps: 2, concurrency: 2,
			opsPerRep: map[int]int{kib: 5, mid: 3, max: 2}, concOps: map[int]int{kib: 4, mid: 4, max: 2}},
		publishParams{warmup: 10, reps: 5, concurrency: 8,
			opsPerRep: map[int]int{kib: 100, mid: 60, max: 30}, concOps: map[int]int{kib: 160, mid: 80, max: 40}},
		publishParams{warmup: 20, reps: 7, concurrency: 8,
			opsPerRep: map[int]int{kib: 200, mid: 100, max: 40}, concOps: map[int]int{kib: 400, mid: 200, max: 80}},
	)
	res := &Result{
		Setup: fmt.Sprintf("control + embedded single-member etcd in-process, fsync ON (durable); producer client over plaintext gRPC on loopback; "+
			"one property per namespace, a fresh value every publish; one zone (every publish also moves its goal). "+
			"Latency: one publisher, publishes back to back, %d warm-up then %d repetitions, median of per-repetition percentiles. "+
			"Throughput: sequential = that publisher's publishes/s; concurrent = %d publishers on separate namespaces.",
			p.warmup, p.reps, p.concurrency),
	}
	rc, err := startControl(ctx, e.Dir, e.Log, false)
	if err != nil {
		return res, err
	}
	defer rc.close()
	cl, err := rc.producer(e.Log)
	if err != nil {
		return res, err
	}
	defer cl.Close()

	plot := CDFPlot{Name: "latency", Title: "publish: one publisher, durable publish → control's ack (every measured publish)"}
	defer func() {
		if len(plot.Series) > 0 {
			res.CDFs = append(res.CDFs, plot)
		}
	}()
	for _, size := range publishSizes {
		ns := fmt.Sprintf("%s/pub-%s", benchDomain, nsLabel(size))
		val := newValueSource(size)
		publish := func() (time.Duration, error) {
			props := []producer.Property{{Key: "value", Value: val.next()}}
			start := time.Now()
			_, err := cl.Publish(ctx, ns, props)
			return time.Since(start), err
		}
		sums, rates, all, err := timeSequential(p.warmup, p.reps, p.opsPerRep[size], publish)
		if err != nil {
			return res, fmt.Errorf("publish %s: %w", ns, err)
		}
		plot.Series = append(plot.Series, Series{Label: "lehr " + sizeLabel(size), Samples: all})
		conc, err := publishConcurrent(ctx, cl, size, p.concurrency, p.concOps[size], p.reps)
		if err != nil {
			return res, err
		}
		row := Row{System: "lehr", Case: sizeLabel(size), Transport: transportLoopbackGRPC}
		s := MedianSummary(sums)
		row.AddLatency("", s)
		row.Add("seq ops/s", Median(rates), "ops/s")
		row.Add(fmt.Sprintf("conc%d ops/s", p.concurrency), conc, "ops/s")
		row.Add(fmt.Sprintf("conc%d MiB/s", p.concurrency), conc*float64(size)/(1<<20), "MiB/s")
		row.Add("samples", float64(s.N), "")
		res.Rows = append(res.Rows, row)
	}
	floors, err := etcdCommitFloors(ctx, e, p, kib)
	if err != nil {
		return res, err
	}
	res.Rows = append(res.Rows, floors...)
	lehr, _ := res.Rows[0].Get("p50")
	etcd, _ := floors[len(floors)-1].Get("p50")
	res.Targets = append(res.Targets, Target{Goal: "1 KiB publish p50 <= one etcd commit + 0.5 ms (issue 13)",
		Got: fmt.Sprintf("publish p50 = %.2f ms, one etcd commit in process p50 = %.2f ms", lehr, etcd), Met: lehr <= etcd+0.5})
	res.Notes = append(res.Notes, "etcd commit: the floor of the publish target, a 1 KiB Put to an embedded single-member etcd started for it in this process (fsync on, the same disk), timed like the publishes: once by a client over plaintext gRPC on loopback, as a user of etcd would write, and once by an in-process client (etcd's v3client), as control reaches its embedded etcd; the target is held to the second, the lower.")
	return res, nil
}

// transportLoopbackGRPC labels the publish scenario's rows: the producer
// reaches control, and the floor's client its etcd, over plaintext gRPC on
// loopback.
const transportLoopbackGRPC = "grpc, plaintext loopback"

// transportInProcess labels the floor measured through etcd's in-process
// client, as control reaches its embedded etcd.
const transportInProcess = "in-process (etcd v3client)"

// etcdCommitFloors times one durable etcd commit of a size-byte value, the
// floor a publish is held to: a Put to an embedded etcd like control's,
// with as many warm-up and measured operations as the publishes of size,
// by a client over loopback and then by an in-process client (the row the
// target uses, last).
func etcdCommitFloors(ctx context.Context, e *Env, p publishParams, size int) ([]Row, error) {
	ctx = withPeerTLS(ctx, false) // plaintext, as control's own etcd
	peer, err := startEtcdPeer(ctx, filepath.Join(e.Dir, "etcd-floor"), e.Log)
	if err != nil {
		return nil, err
	}
	defer peer.close()
	in := v3client.New(peer.e.Server)
	defer in.Close()
	var rows []Row
	for _, c := range []struct {
		transport string
		cli       *clientv3.Client
	}{{transportLoopbackGRPC, peer.writer}, {transportInProcess, in}} {
		val := newValueSource(size)
		put := func() (time.Duration, error) {
			start := time.Now()
			_, err := c.cli.Put(ctx, "floor/value", string(val.next()))
			return time.Since(start), err
		}
		sums, _, _, err := timeSequential(p.warmup, p.reps, p.opsPerRep[size], put)
		if err != nil {
			return nil, fmt.Errorf("etcd put (%s): %w", c.transport, err)
		}
		row := Row{System: "etcd", Case: sizeLabel(size) + " commit", Transport: c.transport}
		s := MedianSummary(sums)
		row.AddLatency("", s)
		row.Add("samples", float64(s.N), "")
		rows = append(rows, row)
	}
	return rows, nil
}

// timeSequential runs op warmup times unmeasured, then reps repetitions
// of n, one after the other, and returns each repetition's summary and
// operations per second, and every measured latency. An error of op ends
// it, saying whether it was a warm-up.
func timeSequential(warmup, reps, n int, op func() (time.Duration, error)) (sums []Summary, rates []float64, all []time.Duration, err error) {
	for range warmup {
		if _, err := op(); err != nil {
			return nil, nil, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	for range reps {
		lat := make([]time.Duration, 0, n)
		start := time.Now()
		for range n {
			d, err := op()
			if err != nil {
				return nil, nil, nil, err
			}
			lat = append(lat, d)
		}
		rates = append(rates, float64(len(lat))/time.Since(start).Seconds())
		sums = append(sums, Summarize(lat))
		all = append(all, lat...)
	}
	return sums, rates, all, nil
}

// publishConcurrent runs reps rounds of n publishes of size-byte values
// spread over c publishers, each on its own namespace, and returns the
// median publishes/s across rounds. Each publisher warms its namespace up
// with one unmeasured publish first.
func publishConcurrent(ctx context.Context, cl *producer.Client, size, c, n, reps int) (float64, error) {
	nss := make([]string, c)
	vals := make([]*valueSource, c)
	for i := range c {
		nss[i] = fmt.Sprintf("%s/pub-%s-c%d", benchDomain, nsLabel(size), i)
		vals[i] = newValueSource(size)
		if _, err := cl.Publish(ctx, nss[i], []producer.Property{{Key: "value", Value: vals[i].next()}}); err != nil {
			return 0, fmt.Errorf("warm-up publish %s: %w", nss[i], err)
		}
	}
	var rates []float64
	for range reps {
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		errs := make(chan error, c)
		start := time.Now()
		for i := range c {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if _, err := cl.Publish(ctx, nss[i], []producer.Property{{Key: "value", Value: vals[i].next()}}); err != nil {
						errs <- fmt.Errorf("publish %s: %w", nss[i], err)
						return
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		rates = append(rates, float64(n)/el.Seconds())
	}
	return Median(rates), nil
}

// valueSource produces values of one size, each different from the last:
// random bytes made once, with a counter in the first eight bytes.
type valueSource struct {
	base []byte
	n    uint64
}

func newValueSource(size int) *valueSource {
	b := make([]byte, size)
	rand.Read(b)
	return &valueSource{base: b}
}

// next returns a fresh copy of the value with the next counter.
func (v *valueSource) next() []byte {
	v.n++
	b := append([]byte(nil), v.base...)
	if len(b) >= 8 {
		binary.BigEndian.PutUint64(b, v.n)
	} else {
		for i := range b {
			b[i] = byte(v.n >> (8 * i))
		}
	}
	return b
}

// sizeLabel renders a byte count as "1KiB", "64KiB", "512KiB", "10MiB".
func sizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// nsLabel is sizeLabel in lower case, usable in a namespace name.
func nsLabel(n int) string { return strings.ToLower(sizeLabel(n)) }
