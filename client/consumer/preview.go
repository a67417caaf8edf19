package consumer

// Policy preview at the host (docs/preview.md): a policy subscription that
// is asked to decide also follows the policy's preview namespace, which
// holds the experiments being previewed. Every Evaluate decides with the
// live rules (enforced) and with each experiment's rules (never
// enforced), counts the pair of results exactly, and writes a decision
// log line for every disagreement and a sample of agreements. The counts
// go to the agent, which sends them up with its reports.
//
// While a committed experiment's version rolls out, the preview namespace
// also carries the version it replaced (preview.Comparison): a host at the
// committed version evaluates it the same way and counts, beside, the
// live decisions it would have decided otherwise — the agent's
// policy_changed signal, which the rollout's canary analysis reads.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cel.dev/cel-go/cel"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// Defaults of the preview options.
const (
	DefaultPreviewSample         = 100
	DefaultPreviewReportInterval = 5 * time.Second
)

// shadowExp is one experiment of a preview view, compiled.
type shadowExp struct {
	id  string
	exp preview.Experiment
	set *policy.Set
}

// shadowSet is a preview view's experiments, compiled once.
type shadowSet struct {
	once sync.Once
	exps []shadowExp
}

// experiments returns the view's experiments compiled in env's
// environment. An experiment that does not parse or compile is logged
// once and left out (it cannot be previewed; the live decision is
// unaffected).
func (v *View) experiments(env func() (*cel.Env, error), p *shadow) []shadowExp {
	v.shadow.once.Do(func() {
		e, err := env()
		if err != nil {
			p.s.log.Error("policy preview: no rule environment", "err", err)
			return
		}
		for _, prop := range v.snap.Props() {
			exp, set, err := preview.Parse(e, prop)
			if err != nil {
				p.s.log.Error("policy preview: experiment left out", "preview_version", v.version, "err", err)
				continue
			}
			v.shadow.exps = append(v.shadow.exps, shadowExp{id: prop.Key, exp: exp, set: set})
		}
	})
	return v.shadow.exps
}

// counter holds exact counts for one preview.Key.
type counter struct {
	allowAllow, denyDeny, allowDeny, denyAllow, errs atomic.Uint64
}

func (c *counter) snapshot() [5]uint64 {
	return [5]uint64{c.allowAllow.Load(), c.denyDeny.Load(), c.allowDeny.Load(), c.denyAllow.Load(), c.errs.Load()}
}

// preview is a policy subscription's shadow evaluation.
type shadow struct {
	s   *Subscription // the policy subscription
	sub atomic.Pointer[Subscription]

	counts     sync.Map // preview.Key → *counter
	agreements atomic.Uint64
	logMu      sync.Mutex

	// Live decisions, whatever the experiments said: the agent's
	// policy_decisions (both) and policy_denies signals. Counted apart, so
	// a report's denials never outnumber its decisions.
	allows, denies atomic.Uint64
	// changed counts the live decisions the comparison (the version a
	// committed experiment replaced) decided otherwise: the agent's
	// policy_changed signal. A report carries at most as many changes as
	// decisions (a change is counted just after its decision, which may
	// have gone with the previous report); the rest wait for the next.
	changed atomic.Uint64

	reportMu sync.Mutex
	reported map[preview.Key][5]uint64
	// The live counts as of the last successful report.
	reportedAllows, reportedDenies, reportedChanged uint64
}

// count counts a live decision.
func (p *shadow) count(d policy.Decision) {
	if d.Allowed() {
		p.allows.Add(1)
	} else {
		p.denies.Add(1)
	}
}

// previewer returns the subscription's preview, starting it on first use;
// nil when previews are disabled, the subscription is closed, or its
// namespace is not (yet known to be) a policy namespace.
func (s *Subscription) previewer() *shadow {
	if s.c.opts.DisablePreview || s.View().Kind() != lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY {
		return nil
	}
	s.previewOnce.Do(func() {
		p := &shadow{s: s, reported: map[preview.Key][5]uint64{}}
		if s.goIfOpen(p.run) {
			s.preview = p
		}
	})
	return s.preview
}

// run subscribes to the preview namespace, reports counts every report
// interval and, when the subscription closes, reports the last counts and
// closes the preview subscription.
func (p *shadow) run() {
	s := p.s
	pns := names.Preview(s.ns)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		p.report(ctx)
		if sub := p.sub.Load(); sub != nil {
			sub.Close()
		}
	}()
	for {
		sub, err := s.c.Subscribe(s.ctx, pns)
		if err == nil {
			p.sub.Store(sub)
			break
		}
		s.log.Debug("policy preview: subscribe to the preview namespace", "preview", pns, "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.c.opts.RetryInterval):
		}
	}
	t := time.NewTicker(s.c.opts.PreviewReportInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			p.report(s.ctx)
		}
	}
}

// evaluate evaluates in with every experiment of the current preview view
// and counts and logs each against the live decision.
func (p *shadow) evaluate(ctx context.Context, live *View, liveSet *policy.Set, ld policy.Decision, in policy.Input) {
	sub := p.sub.Load()
	if sub == nil {
		return
	}
	pv := sub.View()
	if pv.Version() == 0 || pv.snap.Len() == 0 {
		return
	}
	liveEtag := preview.LiveEtag(live.Version())
	for _, x := range pv.experiments(p.s.c.policyEnv, p) {
		if !x.exp.AppliesTo(live.Version()) {
			continue
		}
		ed, err := x.set.Evaluate(ctx, in)
		agree := ld.Allowed() == ed.Allowed()
		if x.exp.Compares() {
			// No experiment: no pair counts to report (nothing would
			// show them, and an agent takes counts of experiments only);
			// the decisions it changed go up as live_changed.
			if !agree {
				p.changed.Add(1)
			}
		} else {
			p.tally(x, liveEtag, ld, ed, err)
		}
		if agree {
			n := p.s.c.opts.PreviewSample
			if n <= 0 || p.agreements.Add(1)%uint64(n) != 1%uint64(n) {
				continue
			}
		}
		p.log(live, liveSet, ld, x, ed, err, agree, in)
	}
}

// tally counts the pair of decisions ld (live) and ed (experiment x's,
// with its error err).
func (p *shadow) tally(x shadowExp, liveEtag string, ld, ed policy.Decision, err error) {
	k := preview.Key{Experiment: x.id, LiveEtag: liveEtag, ExperimentEtag: x.exp.Etag}
	c, ok := p.counts.Load(k)
	if !ok {
		c, _ = p.counts.LoadOrStore(k, new(counter))
	}
	ctr := c.(*counter)
	if err != nil {
		ctr.errs.Add(1)
	}
	switch {
	case ld.Allowed() && ed.Allowed():
		ctr.allowAllow.Add(1)
	case !ld.Allowed() && !ed.Allowed():
		ctr.denyDeny.Add(1)
	case ld.Allowed():
		ctr.allowDeny.Add(1)
	default:
		ctr.denyAllow.Add(1)
	}
}

// log writes one decision log line (preview.LogLine): the experiment's
// log prefix, a space and a JSON object with both etags, both results and
// the input with every path either policy marks sensitive masked.
func (p *shadow) log(live *View, liveSet *policy.Set, ld policy.Decision, x shadowExp, ed policy.Decision, eerr error, agree bool, in policy.Input) {
	sensitive := append(append([]string(nil), liveSet.Sensitive()...), x.set.Sensitive()...)
	line := preview.LogLine{
		Time:             time.Now().UTC(),
		Policy:           p.s.ns,
		Experiment:       x.exp.Name,
		LiveEtag:         preview.LiveEtag(live.Version()),
		ExperimentEtag:   x.exp.Etag,
		Live:             preview.Result{Effect: ld.Effect, Rule: ld.Rule},
		ExperimentResult: preview.Result{Effect: ed.Effect, Rule: ed.Rule},
		Agree:            agree,
		Input:            policy.Mask(in, sensitive),
	}
	if eerr != nil {
		line.ExperimentResult.Error = eerr.Error()
	}
	out := line.Format(x.exp.LogPrefix)
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if _, err := p.s.c.opts.DecisionLog.Write(out); err != nil {
		p.s.log.Debug("policy preview: write decision log", "err", err)
	}
}

// report sends the counts added since the last successful report to the
// agent: the experiments' and the live decisions', and of these the ones
// the comparison changed.
func (p *shadow) report(ctx context.Context) {
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	var req lehrpb.ReportPreviewRequest
	now := map[preview.Key][5]uint64{}
	p.counts.Range(func(k, v any) bool {
		key, cur := k.(preview.Key), v.(*counter).snapshot()
		now[key] = cur
		prev := p.reported[key]
		var d [5]uint64
		changed := false
		for i := range cur {
			d[i] = cur[i] - prev[i]
			changed = changed || d[i] != 0
		}
		if changed {
			req.Counts = append(req.Counts, &lehrpb.HostPreviewCounts{Experiment: key.Experiment, Counts: &lehrpb.PreviewCounts{
				LiveEtag: key.LiveEtag, ExperimentEtag: key.ExperimentEtag,
				AllowAllow: d[0], DenyDeny: d[1], AllowDeny: d[2], DenyAllow: d[3], ExperimentErrors: d[4],
			}})
		}
		return true
	})
	allows, denies := p.allows.Load(), p.denies.Load()
	req.LiveDenies = denies - p.reportedDenies
	req.LiveDecisions = allows - p.reportedAllows + req.LiveDenies
	changed := min(p.changed.Load()-p.reportedChanged, req.LiveDecisions)
	req.LiveChanged = proto.Uint64(changed)
	if len(req.Counts) == 0 && req.LiveDecisions == 0 {
		return
	}
	p.s.mu.Lock()
	req.LeaseId = p.s.leaseID
	p.s.mu.Unlock()
	req.Namespace = p.s.ns
	if _, err := p.s.c.api.ReportPreview(ctx, &req); err != nil {
		p.s.log.Debug("policy preview: report counts (kept for the next report)", "err", err)
		return
	}
	p.reported = now
	p.reportedAllows, p.reportedDenies = allows, denies
	p.reportedChanged += changed
}

// Previewing returns the resource names of the experiments this policy
// subscription evaluates beside the live rules now, sorted by id (not the
// comparison of a committed version with the version it replaced); none
// until the policy's preview namespace reached the host. It starts
// following the preview namespace if Evaluate has not yet (unless
// Options.DisablePreview), so a service may call it at start to have
// experiments ready before its first decision.
func (s *Subscription) Previewing() []string {
	p := s.previewer()
	if p == nil {
		return nil
	}
	sub := p.sub.Load()
	if sub == nil {
		return nil
	}
	var out []string
	for _, x := range sub.View().experiments(s.c.policyEnv, p) {
		if !x.exp.Compares() {
			out = append(out, x.exp.Name)
		}
	}
	return out
}
