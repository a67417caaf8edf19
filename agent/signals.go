package agent

import (
	"context"
	"sync"
	"time"

	"lehr.dev/lehr/agent/collect"
	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/proto/lehrpb"
)

// signals is the agent's local collection for canary analysis: the store
// of per-namespace series, the scraper of consumers' metrics endpoints and
// the endpoints of live leases.
type signals struct {
	store   *collect.Store
	scraper *collect.Scraper

	mu      sync.Mutex
	targets map[string]collect.Target // by lease id

	host hostChecks
}

func newSignals(interval time.Duration, now func() time.Time) *signals {
	st := collect.NewStore(collect.Options{Interval: interval, Now: now})
	// A scrape that takes a quarter of the interval is abandoned, so one
	// hung endpoint cannot hold up the others for long.
	return &signals{store: st, scraper: collect.NewScraper(st, max(st.Interval()/4, 250*time.Millisecond)), targets: map[string]collect.Target{},
		host: hostChecks{checks: map[string][]canary.Check{}, judged: map[string]judged{}}}
}

// lease records the metrics endpoint a lease declared ("" for none).
func (s *signals) lease(id, ns, url string) {
	if url == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targets[id] = collect.Target{Namespace: ns, URL: url}
}

// scrapeLoop scrapes the endpoints of live leases once per interval until
// ctx ends; a lease that ended takes its endpoint with it.
func (a *Agent) scrapeLoop(ctx context.Context) {
	s := a.sig
	t := time.NewTicker(s.store.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var targets []collect.Target
		for id, tg := range s.targets {
			if _, ok := a.leases.Lookup(id); !ok {
				delete(s.targets, id)
				continue
			}
			targets = append(targets, tg)
		}
		s.mu.Unlock()
		if len(targets) == 0 {
			continue
		}
		failed := s.scraper.ScrapeAll(ctx, targets)
		a.met.scrapes(len(targets)-failed, failed)
	}
}

// reportSignals records a consumer's report on the version the agent
// holds: applied or rejected, how long its callbacks took, a panic, and
// the time from the agent applying the version to the consumer having it.
func (a *Agent) reportSignals(ns string, req *lehrpb.ReportApplyRequest, appliedAt time.Time) {
	st := a.sig.store
	if req.GetOk() {
		st.Add(ns, canary.MetricConsumerApplies, 1)
		if !appliedAt.IsZero() {
			st.Add(ns, canary.MetricApplySeconds, a.now().Sub(appliedAt).Seconds())
		}
	} else {
		st.Add(ns, canary.MetricConsumerRejections, 1)
	}
	if req.GetPanicked() {
		st.Add(ns, canary.MetricCallbackPanics, 1)
	}
	st.Add(ns, canary.MetricCallbackSeconds, req.GetCallbackSeconds())
}

// Signals answers a distributor's SignalsRequest for a namespace
// (upstream.Handler): the completed intervals the agent keeps. The
// request's checks become the namespace's host-level checks.
func (h *handler) Signals(w *lehrpb.SignalsWanted) *lehrpb.NamespaceSignals {
	a := (*Agent)(h)
	a.wantChecks(w)
	return a.sig.store.Signals(w.GetNamespace())
}

// Signals answers the local API's Signals call.
func (b *backend) Signals(_ context.Context, ns string) (*lehrpb.NamespaceSignals, error) {
	return (*Agent)(b).sig.store.Signals(ns), nil
}
