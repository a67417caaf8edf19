package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/testenv/devcluster"
)

// Messages of the components' Debug logs the e2e scenario timestamps.
const (
	msgGoal    = "goal changed"   // distributor/goalwatch: goal event received from control's watch
	msgPushed  = "pushed update"  // distributor/fanout: frame written to the agent's stream
	msgApplied = "update applied" // agent: Badger transaction committed and verified
)

func e2eScenario() Scenario {
	return Scenario{
		Name:  "e2e",
		Title: "publish → consumer callback on one host, by hop (issue 4 §1)",
		Run:   runE2E,
	}
}

type e2eParams struct {
	warmup, reps, perRep int
}

// e2eHops are the rows of the e2e result, in path order.
var e2eHops = []string{"control ack", "distributor received", "distributor pushed", "agent applied", "file renamed", "callback fired"}

func runE2E(ctx context.Context, e *Env) (*Result, error) {
	p := pick(e.Profile, e2eParams{2, 2, 5}, e2eParams{10, 5, 40}, e2eParams{20, 7, 100})
	const valueSize = 1 << 10
	res := &Result{
		Setup: fmt.Sprintf("one host, one process (testenv/devcluster): control + embedded etcd (fsync on), one distributor (QUIC, mutual TLS), one real agent "+
			"(Badger, durable writes: cache and file fsynced), a consumer (client/consumer: unix-socket lease, fsnotify on the file, OnChange callback). "+
			"Each sample patches one %s key of a 10-key namespace and waits for the callback before the next. "+
			"%d warm-up, %d repetitions × %d; times are cumulative from the Patch call.", sizeLabel(valueSize), p.warmup, p.reps, p.perRep),
		Notes: []string{
			"hop 'distributor received' is when the goal event reached the distributor's goal watch (distributor/goalwatch's Debug log 'goal changed'); it can precede 'control ack', which also includes the Patch response's trip back to the producer. Hop 'distributor pushed' is when the distributor finished writing the update frame to the agent's QUIC stream (its Debug log 'pushed update'): the step from 'distributor received' is building the version from the change sent with the goal event (or, when it came without one, fetching the delta from control) and building and writing the frame.",
			"hop 'agent applied' is the agent's Debug log 'update applied' (Badger transaction committed, fsynced and verified); 'file renamed' is this harness's own fsnotify watcher seeing the namespace file renamed into place; 'callback fired' is the consumer's OnChange callback starting.",
		},
	}
	base := slog.Default().Handler()
	if e.Log != nil {
		base = e.Log.Handler()
	}
	events := newEventLog(base, slog.LevelWarn, msgGoal, msgPushed, msgApplied)
	log := slog.New(events)

	cl, err := devcluster.Start(ctx, devcluster.Options{
		DomainQuotas: benchQuotas(),
		Dir:          filepath.Join(e.Dir, "cluster"),
		Zones:        []string{benchZone},
		Domains:      []string{benchDomain},
		Logger:       log,
	})
	if err != nil {
		return res, err
	}
	defer cl.Close()
	prod := cl.Producer()
	ah, err := cl.Agent(benchZone, 0)
	if err != nil {
		return res, err
	}
	ns := benchDomain + "/e2e"
	vals := newValueSource(valueSize)
	var props []producer.Property
	for i := range 10 {
		props = append(props, producer.Property{Key: fmt.Sprintf("key%02d", i), Value: vals.next()})
	}
	v, err := prod.Publish(ctx, ns, props)
	if err != nil {
		return res, fmt.Errorf("publish %s: %w", ns, err)
	}
	cons, err := cl.Consumer(benchZone, 0)
	if err != nil {
		return res, err
	}
	sub, err := cons.Subscribe(ctx, ns)
	if err != nil {
		return res, fmt.Errorf("subscribe: %w", err)
	}
	type fired struct {
		version uint64
		at      time.Time
	}
	cb := make(chan fired, 64)
	cancelCB := sub.OnChange(func(ch consumer.Change) error {
		cb <- fired{ch.New.Version(), time.Now()}
		return nil
	})
	defer cancelCB()
	waitCB := func(version uint64) (time.Time, error) {
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case f := <-cb:
				if f.version == version {
					return f.at, nil
				}
				if f.version > version {
					return time.Time{}, fmt.Errorf("callback for version %d skipped %d", f.version, version)
				}
			case <-t.C:
				return time.Time{}, fmt.Errorf("no callback for %s@%d within 30s", ns, version)
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}
	if _, err := waitCB(v.GetSeq()); err != nil {
		return res, err
	}

	path, err := nsfile.Path(ah.FilesDir(), ns)
	if err != nil {
		return res, err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return res, fmt.Errorf("fsnotify: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	renamed := make(chan time.Time, 64)
	go func() {
		for {
			select {
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if ev.Name == path && ev.Has(fsnotify.Create) {
					renamed <- time.Now()
				}
			case _, ok := <-fw.Errors:
				if !ok {
					return
				}
			}
		}
	}()

	base2 := v.GetSeq()
	one := func(i int) ([]time.Duration, error) {
		for len(renamed) > 0 {
			<-renamed
		}
		key := fmt.Sprintf("key%02d", i%10)
		t0 := time.Now()
		nv, err := prod.Patch(ctx, ns, base2, producer.Patch{Set: []producer.Property{{Key: key, Value: vals.next()}}})
		if err != nil {
			return nil, fmt.Errorf("patch %s@%d: %w", ns, base2, err)
		}
		tAck := time.Now()
		seq := nv.GetSeq()
		base2 = seq
		tCB, err := waitCB(seq)
		if err != nil {
			return nil, err
		}
		var tFile time.Time
		select {
		case tFile = <-renamed:
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("no rename event for %s@%d", ns, seq)
		}
		tGoal, ok0 := events.at(msgGoal, ns, seq)
		tPush, ok1 := events.at(msgPushed, ns, seq)
		tApplied, ok2 := events.at(msgApplied, ns, seq)
		if !ok0 || !ok1 || !ok2 {
			return nil, fmt.Errorf("%s@%d: missing debug events (goal changed %v, pushed %v, applied %v)", ns, seq, ok0, ok1, ok2)
		}
		return []time.Duration{tAck.Sub(t0), tGoal.Sub(t0), tPush.Sub(t0), tApplied.Sub(t0), tFile.Sub(t0), tCB.Sub(t0)}, nil
	}
	for i := range p.warmup {
		if _, err := one(i); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	reps := make([][]Summary, len(e2eHops))
	for range p.reps {
		samples := make([][]time.Duration, len(e2eHops))
		for i := range p.perRep {
			d, err := one(i)
			if err != nil {
				return res, err
			}
			for h := range d {
				samples[h] = append(samples[h], d[h])
			}
		}
		for h := range samples {
			reps[h] = append(reps[h], Summarize(samples[h]))
		}
	}
	var cbSum Summary
	for h, name := range e2eHops {
		s := MedianSummary(reps[h])
		row := Row{System: "lehr", Case: name}
		row.AddLatency("", s)
		res.Rows = append(res.Rows, row)
		if h == len(e2eHops)-1 {
			cbSum = s
		}
	}
	res.Targets = append(res.Targets,
		Target{Goal: "publish → callback p50 <= 2 ms", Got: fmt.Sprintf("p50 = %.2f ms", ms(cbSum.P50)), Met: cbSum.P50 <= 2*time.Millisecond},
		Target{Goal: "publish → callback p99 <= 10 ms", Got: fmt.Sprintf("p99 = %.2f ms", ms(cbSum.P99)), Met: cbSum.P99 <= 10*time.Millisecond},
	)
	return res, nil
}
