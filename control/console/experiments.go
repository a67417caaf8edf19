package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// The policy experiments of a policy namespace (AIP-236 preview): each
// experiment's state, the live → experiment decisions the hosts counted
// per zone and etag pair with the share they disagreed on, and whether a
// commit would pass its gate now — read with the calls "lehr policy
// experiment list" and "counts" make, in their words (preview's
// describe.go).

// historyNote says what the counts are and what control keeps of them
// over time: the page and its JSON say it, so nobody reads more into a
// figure than it holds.
const historyNote = "Each figure in the tables is the sum of what the hosts counted since their agents started, " +
	"as the zones' distributors last reported it (an agent that restarts counts from zero again, so a figure can fall). " +
	"Over time: while an experiment is ACTIVE, the leader of control's rollout strategist samples its counts once a minute " +
	"and keeps, per experiment, the decisions each interval added and how many of them the experiment disagreed on — " +
	"the last day of samples (at most 1,440, 48 KiB, charged to the domain's stored bytes), deleted with the experiment. " +
	"An interval in which an agent restarted or moved to another distributor counts its distributor's totals whole " +
	"(Prometheus's rule for a counter reset), so its decisions are overstated; the first sample after a preview starts, " +
	"or after another control replica takes over, is a baseline, and leaves a gap. " +
	"The services' decision log lines (the experiment's log prefix, with the time of each decision) are the record of every disagreement."

// experimentsURL is the page of policy namespace ns's experiments.
func experimentsURL(ns string) string {
	d, n, _ := strings.Cut(ns, "/")
	return Prefix + "experiments/" + url.PathEscape(d) + "/" + url.PathEscape(n)
}

// countRow is one line of an experiment's counts: a zone's or the sum
// over zones of one live and experiment etag pair.
type countRow struct {
	Zone string // "" for the sum over zones
	C    *lehrpb.PreviewCounts
	// Decisions and Disagree are preview.Decisions of C; Share is
	// preview.DisagreeShare, Percent the same rounded for the bar (0–100).
	Decisions, Disagree uint64
	Share               string
	Percent             int
	// LiveDeny and ExperimentDeny are the decisions each policy denied.
	LiveDeny, ExperimentDeny uint64
	// Current: the experiment etag is the experiment's etag now (the one
	// a commit's gate counts).
	Current bool
}

type experimentView struct {
	E     *lehrpb.PolicyExperiment
	ID    string
	State string
	// Counts is GetPolicyExperimentCounts' answer; CountsErr its error.
	Counts    *lehrpb.PolicyExperimentCounts
	CountsErr string
	Heading   string
	Rows      []countRow
	// GatePass and Gate are preview.GateLine's answer for the page's
	// bounds.
	GatePass bool
	Gate     string
	// History is the plot of the sampled history (nil without a sample
	// with decisions), Samples the number of samples.
	History *histPlot
	Samples int
	// Command is the lehr command line of the commit the page describes.
	Command string
	// Refused is control's refusal of the caller committing, if any.
	Refused string
}

type experimentsPage struct {
	Namespace string
	Policy    *lehrpb.Policy
	Exps      []experimentView
	// MinEvaluations and MaxDisagreement are the gate's bounds the page
	// was asked for (?min_evaluations, ?max_disagreement).
	MinEvaluations  uint64
	MaxDisagreement float64
	HistoryNote     string
}

// maxExperimentPages bounds the pages of ListPolicyExperiments the page
// reads (a policy has at most 5 experiments).
const maxExperimentPages = 10

func (c *Console) experiments(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d, n := r.PathValue("domain"), r.PathValue("name")
	ns := d + "/" + n
	parent := "domains/" + d + "/policies/" + n
	q := r.URL.Query()
	var gate lehrpb.CommitPolicyExperimentRequest
	if s := q.Get("min_evaluations"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "INVALID_ARGUMENT", "min_evaluations is "+strconv.Quote(s)+"; want a count of decisions")
			return
		}
		gate.MinEvaluations = v
	}
	if s := q.Get("max_disagreement"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			c.fail(w, r, http.StatusBadRequest, "INVALID_ARGUMENT", "max_disagreement is "+strconv.Quote(s)+"; want a share between 0 and 1 (0: no bound)")
			return
		}
		gate.MaxDisagreement = v
	}
	pol, err := c.opts.Client.GetPolicy(ctx, &lehrpb.GetPolicyRequest{Name: parent})
	if err != nil {
		c.failAPI(w, r, "policy "+ns, err)
		return
	}
	var exps []*lehrpb.PolicyExperiment
	token := ""
	for range maxExperimentPages {
		resp, err := c.opts.Client.ListPolicyExperiments(ctx, &lehrpb.ListPolicyExperimentsRequest{Parent: parent, PageToken: token})
		if err != nil {
			c.failAPI(w, r, "experiments of "+ns, err)
			return
		}
		exps = append(exps, resp.GetPolicyExperiments()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	ep := experimentsPage{Namespace: ns, Policy: pol, MinEvaluations: gate.GetMinEvaluations(), MaxDisagreement: gate.GetMaxDisagreement(), HistoryNote: historyNote}
	refresh := 0
	jexps := []map[string]any{}
	for _, e := range exps {
		id := e.GetName()[strings.LastIndexByte(e.GetName(), '/')+1:]
		v := experimentView{E: e, ID: id, State: preview.StateLine(e)}
		if e.GetPreviewMetadata().GetState() == lehrpb.PolicyPreviewMetadata_ACTIVE {
			refresh = int(c.opts.Refresh / time.Second)
		}
		counts, err := c.opts.Client.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: e.GetName()})
		jgate := map[string]any{"minEvaluations": gate.GetMinEvaluations(), "maxDisagreement": gate.GetMaxDisagreement()}
		if err != nil {
			v.CountsErr = err.Error()
		} else {
			v.Counts = counts
			v.Heading = preview.CountsHeading(counts)
			for _, z := range counts.GetZones() {
				v.Rows = append(v.Rows, newCountRow(z.GetZone(), z, counts.GetEtag()))
			}
			for _, t := range counts.GetTotals() {
				v.Rows = append(v.Rows, newCountRow("", t, counts.GetEtag()))
			}
			req := &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: counts.GetEtag(), ParentEtag: pol.GetEtag(),
				MinEvaluations: gate.GetMinEvaluations(), MaxDisagreement: gate.GetMaxDisagreement()}
			v.GatePass, v.Gate = preview.GateLine(req, counts.GetEtag(), counts)
			v.Command = commitCommand(ns, id, req)
			if c.opts.MayCall != nil {
				if err := c.opts.MayCall(r, "CommitPolicyExperiment", req); err != nil {
					v.Refused = err.Error()
				}
			}
			jgate["pass"], jgate["why"] = v.GatePass, v.Gate
			v.Samples = len(counts.GetHistory())
			v.History = plotHistory(counts.GetHistory(), counts.GetEtag(), gate.GetMaxDisagreement())
		}
		ep.Exps = append(ep.Exps, v)
		jexps = append(jexps, map[string]any{"experiment": pj(e), "state": v.State, "counts": pj(v.Counts), "countsError": v.CountsErr,
			"gate": jgate, "commitRefused": v.Refused, "disagreementOverTime": historyJSON(v.Counts.GetHistory())})
	}
	doc := map[string]any{"page": "experiments", "namespace": ns, "policy": pj(pol), "experiments": jexps, "historyNote": historyNote}
	c.render(w, r, "experiments", page{Title: "Policy experiments of " + ns, Refresh: refresh,
		Crumbs: []crumb{{"Fleet", Prefix}, {"Domain " + d, domainURL(d)}, {"Namespace " + ns, nsURL(ns)}}, Body: ep}, doc)
}

func newCountRow(zone string, p *lehrpb.PreviewCounts, etag string) countRow {
	total, dis := preview.Decisions(p)
	row := countRow{Zone: zone, C: p, Decisions: total, Disagree: dis, Share: preview.DisagreeShare(p),
		LiveDeny: p.GetDenyDeny() + p.GetDenyAllow(), ExperimentDeny: p.GetDenyDeny() + p.GetAllowDeny(), Current: p.GetExperimentEtag() == etag}
	if total > 0 {
		row.Percent = int((100*dis + total/2) / total)
	}
	return row
}

// commitCommand is the lehr command line of commit req of experiment id
// of ns.
func commitCommand(ns, id string, req *lehrpb.CommitPolicyExperimentRequest) string {
	s := fmt.Sprintf("lehr policy experiment commit %s %s --etag %s", ns, id, req.GetEtag())
	if req.GetParentEtag() != "" {
		s += " --parent-etag " + req.GetParentEtag()
	}
	if req.GetMinEvaluations() > 0 {
		s += " --min-evaluations " + strconv.FormatUint(req.GetMinEvaluations(), 10)
	}
	if req.GetMaxDisagreement() > 0 {
		s += " --max-disagreement " + strconv.FormatFloat(req.GetMaxDisagreement(), 'g', -1, 64)
	}
	return s
}

// historyJSON is the series the page plots, as its JSON gives it: each
// point's time span (from its first sample's interval start to its last
// sample), samples, decisions, disagreements and their share (null for
// no decisions), and the experiment etag they counted.
func historyJSON(h []*lehrpb.PolicyExperimentSample) []map[string]any {
	out := []map[string]any{}
	for _, p := range histBuckets(h) {
		var share any
		if p.Evaluations > 0 {
			share = p.Share()
		}
		out = append(out, map[string]any{"from": p.From.UTC().Format(time.RFC3339Nano), "to": p.To.UTC().Format(time.RFC3339Nano),
			"samples": p.Samples, "evaluations": p.Evaluations, "disagreements": p.Disagreements, "share": share, "experimentEtag": p.Etag})
	}
	return out
}
