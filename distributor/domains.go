package distributor

import (
	"context"
	"fmt"
	"maps"
	"time"

	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Domain policies: which zones and hosts may receive a domain's
// namespaces, and how many update bytes per second this distributor may
// send of them (fanout.DomainPolicy), read from control with GetDomain —
// before a domain's first namespace is served, then every DomainRefresh.
// If control cannot be reached, the last policies read stay in force.

// ensureDomain reads the policy of ns's domain unless it is known.
func (d *Distributor) ensureDomain(ctx context.Context, ns string) error {
	dom, _, err := names.Namespace(ns)
	if err != nil {
		return err
	}
	d.domainMu.Lock()
	_, known := d.domains[dom]
	d.domainMu.Unlock()
	if known {
		return nil
	}
	p, err := d.fetchDomain(ctx, dom)
	if err != nil {
		return err
	}
	d.setDomains(map[string]fanout.DomainPolicy{dom: p})
	return nil
}

func (d *Distributor) fetchDomain(ctx context.Context, dom string) (fanout.DomainPolicy, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := d.ctl.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: dom})
	if err != nil {
		return fanout.DomainPolicy{}, fmt.Errorf("read domain %s's policy from control: %w", dom, err)
	}
	return fanout.PolicyOf(got), nil
}

// setDomains merges policies into the known ones and hands the result to
// the fan-out.
func (d *Distributor) setDomains(policies map[string]fanout.DomainPolicy) {
	d.domainMu.Lock()
	if d.domains == nil {
		d.domains = map[string]fanout.DomainPolicy{}
	}
	maps.Copy(d.domains, policies)
	all := maps.Clone(d.domains)
	d.domainMu.Unlock()
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if srv != nil {
		srv.SetDomains(all)
	}
}

// wantDomain asks lookupDomains for the policy of ns's domain: an agent
// subscribes to ns, which has no goal here. Control withholds the goals
// of a domain whose readers do not admit this zone, and with the domain's
// policy the fan-out tells the agent so (FORBIDDEN, naming the readers)
// instead of NOT_FOUND. It never blocks: when lookups are backed up, the
// request is dropped (the next subscription asks again).
func (d *Distributor) wantDomain(ns string) {
	dom, _, err := names.Namespace(ns)
	if err != nil {
		return
	}
	select {
	case d.wanted <- dom:
	default:
	}
}

// lookupDomains reads the policies wantDomain asks for, until ctx ends: a
// domain is looked up at most once per DomainRefresh (a domain that does
// not exist is asked for again only then), and a known one not again
// (refreshDomains keeps it current).
func (d *Distributor) lookupDomains(ctx context.Context) error {
	tried := map[string]time.Time{}
	for {
		var dom string
		select {
		case <-ctx.Done():
			return nil
		case dom = <-d.wanted:
		}
		d.domainMu.Lock()
		_, known := d.domains[dom]
		d.domainMu.Unlock()
		if known || time.Since(tried[dom]) < d.opts.DomainRefresh {
			continue
		}
		tried[dom] = time.Now()
		p, err := d.fetchDomain(ctx, dom)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Debug("cannot look up the policy of a domain an agent subscribes to", "domain", dom, "err", err)
			}
			continue
		}
		d.setDomains(map[string]fanout.DomainPolicy{dom: p})
	}
}

// refreshDomains reads every known domain's policy again every
// DomainRefresh until ctx ends; a failed read keeps the previous policy.
func (d *Distributor) refreshDomains(ctx context.Context) error {
	t := time.NewTicker(d.opts.DomainRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		d.domainMu.Lock()
		doms := make([]string, 0, len(d.domains))
		for dom := range d.domains {
			doms = append(doms, dom)
		}
		d.domainMu.Unlock()
		fresh := map[string]fanout.DomainPolicy{}
		for _, dom := range doms {
			p, err := d.fetchDomain(ctx, dom)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("keeping the last policy of a domain", "domain", dom, "err", err)
				}
				continue
			}
			fresh[dom] = p
		}
		d.setDomains(fresh)
	}
}
