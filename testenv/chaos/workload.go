package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Op is one write of the workload and what became of it.
type Op struct {
	// ID is the op's request id and version message, and the value of
	// its "op" key: every version names the op that made it.
	ID, Namespace string
	Publish       bool // a publish, else a patch
	// Sum is the checksum a publish's content must have; "" for patches.
	Sum string

	// IssuedAt is when the op was first called.
	IssuedAt time.Time
	// Acked is control's answer; nil until the op is acknowledged.
	Acked   *lehrpb.VersionInfo
	AckedAt time.Time
	// Refused is set when control definitively refused the op (a patch on
	// a base that is no longer the latest): it must not be in history.
	Refused error
	// Attempts counts calls beyond the first (same request id).
	Attempts int
}

// Ledger records every op of a run. Safe for concurrent use.
type Ledger struct {
	mu  sync.Mutex
	ops []*Op
}

func (l *Ledger) add(op *Op) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

// Ops returns the ops recorded (read them after the workload ended).
func (l *Ledger) Ops() []*Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Op(nil), l.ops...)
}

// Snapshot returns a copy of every op recorded, as it stands: safe to
// call while the workload runs.
func (l *Ledger) Snapshot() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Op, len(l.ops))
	for i, op := range l.ops {
		out[i] = *op
	}
	return out
}

// update changes an op under the lock Snapshot takes.
func (l *Ledger) update(f func()) {
	l.mu.Lock()
	f()
	l.mu.Unlock()
}

// Workload writes to Namespaces: one worker per namespace publishes and
// patches it (every patch on the version the worker last saw), and a rival
// patches random namespaces, so writers race as producers do. Every op is
// retried with its request id until control answers it — through control
// kills and crashes — so the ledger ends with no op in doubt.
type Workload struct {
	Producer   *producer.Client
	Namespaces []string
	// OpsPerNamespace is how many ops each worker does; the rival does
	// one for every five of those.
	OpsPerNamespace int
	// Seed seeds the ops' choices.
	Seed uint64
	// Think is the mean pause of a worker between ops (uniform from 0 to
	// twice it), which sets the write rate: about len(Namespaces)/Think
	// writes a second. Zero writes as fast as control answers.
	Think time.Duration
	// Until, if set, keeps the workers writing past OpsPerNamespace until
	// it is closed (the kill schedule needs writes to the end).
	Until <-chan struct{}
	// BigValue is the size of the large value a third of the publishes
	// carry, so snapshots span many packets; 0 means none.
	BigValue int
	// Pace, if positive, replaces Think: a worker starts an op every Pace
	// (the next at once when one took longer).
	Pace time.Duration
	// PatchesOnly makes every op after a namespace's first (a publish) a
	// patch.
	PatchesOnly bool
	// Gate, if set, is called with every version a worker got
	// acknowledged, before its next op; the worker waits for it (e.g.
	// for the version's rollout to end). An error ends the run.
	Gate func(ctx context.Context, ns string, v *lehrpb.VersionInfo) error

	Ledger Ledger
	// Done counts ops answered, for progress.
	mu   sync.Mutex
	done int
}

// Answered returns how many ops control has answered so far.
func (w *Workload) Answered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Run runs the workers until every op is answered or ctx ends.
func (w *Workload) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, ns := range w.Namespaces {
		wg.Go(func() {
			if err := w.worker(ctx, i, ns); err != nil {
				cancel(err)
			}
		})
	}
	wg.Go(func() {
		if err := w.rival(ctx); err != nil {
			cancel(err)
		}
	})
	wg.Wait()
	return context.Cause(ctx)
}

// worker owns ns: it knows whether the namespace holds its temporary key,
// since the rival never touches it.
func (w *Workload) worker(ctx context.Context, i int, ns string) error {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
	var base uint64
	tkey := "" // the temporary key the namespace holds, if any
	for n := 0; n < w.OpsPerNamespace || w.until(); n++ {
		start := time.Now()
		op := &Op{ID: fmt.Sprintf("w%d-%d", i, n), Namespace: ns, Publish: n == 0 || !w.PatchesOnly && rng.IntN(5) < 2}
		var call func(context.Context) (*lehrpb.VersionInfo, error)
		if op.Publish {
			props := []producer.Property{{Key: "op", Value: []byte(op.ID)}}
			for k := range 8 {
				props = append(props, producer.Property{Key: fmt.Sprintf("k%d", k), Value: randValue(rng, 8+rng.IntN(56))})
			}
			if w.BigValue > 0 && rng.IntN(3) == 0 {
				props = append(props, producer.Property{Key: "big", Value: randValue(rng, w.BigValue)})
			}
			snap, err := content.New(props)
			if err != nil {
				return err
			}
			op.Sum = snap.Checksum()
			call = func(ctx context.Context) (*lehrpb.VersionInfo, error) {
				return w.Producer.Publish(ctx, ns, props, producer.WithRequestID(op.ID), producer.WithMessage(op.ID))
			}
		} else {
			p := producer.Patch{Set: []producer.Property{
				{Key: "op", Value: []byte(op.ID)},
				{Key: fmt.Sprintf("k%d", rng.IntN(8)), Value: randValue(rng, 8+rng.IntN(56))},
			}}
			next := fmt.Sprintf("t%d", n)
			p.Set = append(p.Set, producer.Property{Key: next, Value: []byte(op.ID)})
			if tkey != "" {
				p.Delete = []string{tkey}
			}
			b := base
			call = func(ctx context.Context) (*lehrpb.VersionInfo, error) {
				return w.Producer.Patch(ctx, ns, b, p, producer.WithRequestID(op.ID), producer.WithMessage(op.ID))
			}
		}
		w.Ledger.add(op)
		info, err := w.do(ctx, op, call)
		if err != nil {
			return err
		}
		switch {
		case info != nil:
			if w.Gate != nil {
				if err := w.Gate(ctx, ns, info); err != nil {
					return fmt.Errorf("worker of %s: after version %d: %w", ns, info.GetSeq(), err)
				}
			}
			base = info.GetSeq()
			if op.Publish {
				tkey = ""
			} else {
				tkey = fmt.Sprintf("t%d", n)
			}
		default: // refused: a rival's patch moved the namespace on
			var pe *producer.Error
			if errors.As(op.Refused, &pe) && pe.CurrentVersion != 0 {
				base = pe.CurrentVersion
				break
			}
			latest, err := w.latest(ctx, ns)
			if err != nil {
				return fmt.Errorf("worker: read %s after a conflict: %w", ns, err)
			}
			base = latest
		}
		pause := w.think(rng)
		if w.Pace > 0 {
			pause = w.Pace - time.Since(start)
		}
		if err := sleepCtx(ctx, pause); err != nil {
			return err
		}
	}
	return nil
}

// rival patches random namespaces on the latest version it knows of them,
// racing the workers.
func (w *Workload) rival(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(w.Seed, 0))
	n := w.OpsPerNamespace * len(w.Namespaces) / 5
	for k := range n {
		if err := sleepCtx(ctx, 5*w.think(rng)); err != nil {
			return err
		}
		ns := w.Namespaces[rng.IntN(len(w.Namespaces))]
		base, err := w.latest(ctx, ns)
		if errors.Is(err, producer.ErrNotFound) {
			continue // not published yet
		}
		if err != nil {
			return fmt.Errorf("rival: read %s: %w", ns, err)
		}
		op := &Op{ID: fmt.Sprintf("r-%d", k), Namespace: ns}
		p := producer.Patch{Set: []producer.Property{
			{Key: "op", Value: []byte(op.ID)},
			{Key: "rival", Value: randValue(rng, 16)},
		}}
		w.Ledger.add(op)
		if _, err := w.do(ctx, op, func(ctx context.Context) (*lehrpb.VersionInfo, error) {
			return w.Producer.Patch(ctx, ns, base, p, producer.WithRequestID(op.ID), producer.WithMessage(op.ID))
		}); err != nil {
			return err
		}
	}
	return nil
}

// latest returns ns's latest version, trying until control answers.
func (w *Workload) latest(ctx context.Context, ns string) (uint64, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		meta, err := w.Producer.GetNamespace(cctx, ns)
		cancel()
		switch {
		case err == nil:
			return meta.GetLatestVersion(), nil
		case ctx.Err() != nil:
			return 0, context.Cause(ctx)
		case !retryable(err):
			return 0, err
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// retryable reports whether err may go away by calling again: control
// unavailable or restarting, not a refusal.
func retryable(err error) bool {
	for _, e := range []error{producer.ErrInvalid, producer.ErrNotFound, producer.ErrDenied,
		producer.ErrPrecondition, producer.ErrAlreadyExists, producer.ErrConflict} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// callTimeout bounds one call (with the client's own retries) before the
// op is tried again with the same request id.
const callTimeout = 20 * time.Second

// do calls until control answers: an ack (returned), a conflict (recorded
// in op.Refused, nil returned), or an error that no retry can fix
// (returned as err). Unavailability and timeouts — control killed, etcd
// restarting — are retried with the same request id.
func (w *Workload) do(ctx context.Context, op *Op, call func(context.Context) (*lehrpb.VersionInfo, error)) (*lehrpb.VersionInfo, error) {
	w.Ledger.update(func() { op.IssuedAt = time.Now() })
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		info, err := call(cctx)
		cancel()
		switch {
		case err == nil:
			w.Ledger.update(func() { op.Acked, op.AckedAt = info, time.Now() })
			w.answered()
			return info, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("op %s: %w", op.ID, context.Cause(ctx))
		case errors.Is(err, producer.ErrConflict):
			w.Ledger.update(func() { op.Refused = err })
			w.answered()
			return nil, nil
		case !retryable(err):
			return nil, fmt.Errorf("op %s on %s: %w", op.ID, op.Namespace, err)
		}
		w.Ledger.update(func() { op.Attempts++ })
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func (w *Workload) think(rng *rand.Rand) time.Duration {
	if w.Think <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(2 * int64(w.Think)))
}

// until reports whether Until is set and still open.
func (w *Workload) until() bool {
	if w.Until == nil {
		return false
	}
	select {
	case <-w.Until:
		return false
	default:
		return true
	}
}

func (w *Workload) answered() {
	w.mu.Lock()
	w.done++
	w.mu.Unlock()
}

// Total is the number of ops Run will make at most.
func (w *Workload) Total() int {
	return w.OpsPerNamespace*len(w.Namespaces) + w.OpsPerNamespace*len(w.Namespaces)/5
}

const letters = "abcdefghijklmnopqrstuvwxyz0123456789"

func randValue(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
