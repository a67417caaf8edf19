package strategist

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// The leader's loops: what makes the strategist act on what changed
// rather than read everything every second. lead watches the rollout
// inputs (store.WatchRolloutInputs) and runs one loop per domain, so that
// one domain's backlog — a flood of publishes, each a rollout to start and
// step — never holds another domain's rollout. A domain's round reads and
// decides on the namespaces that changed since its last round and those
// with rollouts in flight; the whole domain only when its loop starts,
// after the watch broke, and after a round failed.

// lead runs the strategist while this replica leads. A domain's loop
// wakes when one of its namespaces gets a version or a queued command
// (that namespace), when its record changes (every namespace), and — while
// it has rollouts in flight — on every distributor's report and every
// Interval. Canary evaluations are stepped every Interval. It returns when
// ctx ends (nil), the session ends, or a write finds this replica no
// longer leads.
func (s *Strategist) lead(ctx context.Context, g store.Guard, sessDone <-chan struct{}) error {
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)
	inputs := s.opts.Store.WatchRolloutInputs(ctx)
	loops := map[string]*domainLoop{}
	loop := func(d string) *domainLoop {
		l := loops[d]
		if l == nil {
			l = newDomainLoop(d)
			loops[d] = l
			wg.Go(func() { s.runDomain(ctx, cancel, g, l) })
		}
		return l
	}
	resync := func() {
		doms, err := s.opts.Store.DomainNames(ctx)
		for _, d := range doms {
			loop(d).touch("")
		}
		for _, l := range loops {
			l.touch("") // a domain deleted meanwhile finds nothing
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("rollout strategist: list domains; the next tick retries", "err", err)
		}
	}
	resync()
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); errors.Is(err, store.ErrNotLeader) {
				return err
			}
			return nil
		case <-sessDone:
			return errors.New("etcd session lost")
		case in, ok := <-inputs:
			switch {
			case !ok:
				inputs = nil // ctx ended
			case in.Resync:
				resync()
			case in.Zone != "":
				// Evidence: only the domains with rollouts in flight act
				// on reports.
				for _, l := range loops {
					if l.busy.Load() {
						l.poke()
					}
				}
			case names.Domain(in.Domain) == nil:
				loop(in.Domain).touch(in.Namespace)
			}
		case <-t.C:
			if err := s.opts.Evaluations.StepAll(ctx, g); err != nil {
				if errors.Is(err, store.ErrNotLeader) {
					return err
				}
				if ctx.Err() == nil {
					s.log.Warn("rollout strategist: canary evaluations; the next tick retries", "err", err)
				}
			}
			s.setStateGauges()
		}
	}
}

// maxConflictRounds bounds the rounds a domain runs back to back because
// heads kept moving under them; then it waits for the next wake or tick.
const maxConflictRounds = 3

// domainLoop is one domain's loop under lead: lead records what changed
// and wakes it; runDomain owns its rounds.
type domainLoop struct {
	domain string
	wake   chan struct{} // one pending wake at most
	// busy says the last round left rollouts in flight (or failed): the
	// domain acts on distributors' reports and on time passing.
	busy atomic.Bool

	mu    sync.Mutex
	dirty map[string]bool // namespaces changed since the last round
	full  bool            // the next round reads every namespace
}

func newDomainLoop(domain string) *domainLoop {
	return &domainLoop{domain: domain, wake: make(chan struct{}, 1), dirty: map[string]bool{}, full: true}
}

// touch records that namespace ns changed — "": anything in the domain
// may have — and wakes the loop.
func (l *domainLoop) touch(ns string) {
	l.mark(ns)
	l.poke()
}

// mark records that namespace ns ("": every one) needs the next round.
func (l *domainLoop) mark(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ns == "" {
		l.full = true
	} else if !l.full {
		l.dirty[ns] = true
	}
}

// poke wakes the loop without recording a change: the namespaces in
// flight have new evidence.
func (l *domainLoop) poke() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// take returns what changed since the last take: nil and full, or the
// namespaces touched.
func (l *domainLoop) take() (dirty map[string]bool, full bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dirty, full = l.dirty, l.full
	l.dirty, l.full = map[string]bool{}, false
	return dirty, full
}

// domainState is what a domain's loop knows between rounds: the
// namespaces with rollouts in flight (read every round) and every
// namespace's stored rollouts by state (lehr_control_rollouts).
type domainState struct {
	inFlight map[string]bool
	states   map[string]map[lehrpb.RolloutState]int
}

// merge takes in the results of a round that read the namespaces nss
// (every namespace if full).
func (st *domainState) merge(res map[string]nsResult, nss []string, full bool) {
	if full || st.inFlight == nil {
		st.inFlight, st.states = map[string]bool{}, map[string]map[lehrpb.RolloutState]int{}
	}
	for _, ns := range nss {
		delete(st.inFlight, ns)
		delete(st.states, ns)
	}
	for ns, r := range res {
		if r.inFlight {
			st.inFlight[ns] = true
		}
		if len(r.states) > 0 {
			st.states[ns] = r.states
		} else {
			delete(st.states, ns)
		}
	}
}

// sum is the domain's rollouts by state.
func (st *domainState) sum() map[lehrpb.RolloutState]int {
	out := map[lehrpb.RolloutState]int{}
	for _, m := range st.states {
		for state, n := range m {
			out[state] += n
		}
	}
	return out
}

// runDomain runs l's rounds until ctx ends: at once, on each wake, and
// every Interval while the domain is busy. A write that finds this
// replica no longer leads ends the leadership (end).
func (s *Strategist) runDomain(ctx context.Context, end context.CancelCauseFunc, g store.Guard, l *domainLoop) {
	var known domainState
	conflicts := 0
	for {
		dirty, full := l.take()
		var nss []string // nil: the whole domain
		if !full {
			nss = slices.Sorted(maps.Keys(dirty))
			for ns := range known.inFlight {
				if !dirty[ns] {
					nss = append(nss, ns)
				}
			}
		}
		busy := len(known.inFlight) > 0
		if full || len(nss) > 0 {
			res, err := s.domainRound(ctx, g, l.domain, nss)
			switch {
			case errors.Is(err, store.ErrNotLeader):
				end(err)
				return
			case errors.Is(err, store.ErrConflict) && conflicts < maxConflictRounds && ctx.Err() == nil:
				// A version was committed while the round decided, and a
				// decision that would have moved goals over it was
				// dropped: decide again on the new head at once.
				conflicts++
				s.log.Debug("rollout strategist: a namespace's head moved during the round; deciding again", "domain", l.domain, "err", err)
				l.again(nss)
				continue
			case err != nil:
				if ctx.Err() == nil {
					s.log.Warn("rollout strategist: round failed; the next reads the whole domain", "domain", l.domain, "err", err)
				}
				l.mark("")
				busy = true
			default:
				known.merge(res, nss, full)
				busy = len(known.inFlight) > 0
				s.setDomainStates(l.domain, known.sum())
			}
		}
		conflicts = 0
		l.busy.Store(busy)
		var timer *time.Timer
		var tick <-chan time.Time
		if busy {
			timer = time.NewTimer(s.opts.Interval)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
		case <-l.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// again records that the namespaces nss (every one if nil) need another
// round.
func (l *domainLoop) again(nss []string) {
	if nss == nil {
		l.mark("")
		return
	}
	for _, ns := range nss {
		l.mark(ns)
	}
}
