package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

func runPolicy(ctx context.Context, e *env, args []string) int {
	expDoc := func(path, usage, summary, about string, flags []string, examples ...string) subDoc {
		return subDoc{path: "experiment " + path, flags: flags, doc: doc{usage: "lehr policy experiment " + usage, summary: summary, about: about, examples: examples}}
	}
	fs := newFlags("lehr policy", doc{
		usage:   "lehr policy get|eval|delete NS | lehr policy experiment create|update|get|list|delete|start|stop|commit|counts NS [ID] [flags]",
		summary: "show and test policy namespaces; preview changes to them as experiments",
		about: `A policy namespace holds rules ({"effect": "allow"|"deny", "condition": CEL,
"sensitive": [input paths kept out of logs]}); services decide with them
through the consumer library (deny overrides allow; no match denies; no rules
at all allows). docs/preview.md walks through previewing a change.

-o json prints the resources with the API's field names (preview_metadata,
log_prefix, start_time...) and rule values as JSON (docs/cli.md).`,
		examples: []string{
			"lehr policy get shop/fw",
			"lehr policy experiment create shop/fw deny-eve -f rules.yaml",
		},
		subs: []subDoc{
			{path: "get", doc: doc{
				usage:    "lehr policy get NS [flags]",
				summary:  "the live rules and their etag",
				about:    `Shows policy namespace NS's live rules, each with its effect, condition and sensitive paths, and the policy's etag ("v" + its version).`,
				examples: []string{"lehr policy get shop/fw", "lehr policy get shop/fw -o json"},
			}},
			{path: "eval", flags: []string{"input", "experiment"}, doc: doc{
				usage:   "lehr policy eval NS --input JSON [--experiment ID] [flags]",
				summary: "decide for one input with the live rules, here",
				about: `Decides, here, for one input with NS's live rules (and, with --experiment
ID, with the experiment's too), and says which rules matched. The input is
{"request": {...}, "principal": {...}, "now": RFC 3339}, each part optional.`,
				examples: []string{
					`lehr policy eval shop/fw --input '{"principal": {"user": "eve"}}'`,
					`lehr policy eval shop/fw --input '{"request": {"path": "/admin"}}' --experiment deny-eve`,
				},
			}},
			{path: "delete", flags: []string{"etag", "message", "m"}, doc: doc{
				usage:   "lehr policy delete NS [--etag vN] [--message M] [flags]",
				summary: "delete the live policy and every experiment of it",
				about: `Deletes the live policy and, with it, every experiment of it (one step): its
next version is the no-op policy (allows everything) and rolls out by the
rollout policy; publishing rules (or rolling back) creates it again. --etag
vN deletes only if the live etag is still vN.`,
				examples: []string{"lehr policy delete shop/fw --etag v7 -m 'replaced by shop/fw2'", "lehr policy delete shop/fw -o json"},
			}},
			{path: "experiment", doc: doc{
				usage:   "lehr policy experiment create|update|get|list|delete|start|stop|commit|counts NS [ID] [flags]",
				summary: "preview changes to a policy on real traffic (AIP-236)",
				about: `An experiment is a new configuration of a policy, evaluated beside the live
rules on real traffic at every host that consumes the policy, never enforced
(AIP-236). At most 5 per policy. Hosts start evaluating it when it is started;
each disagreement is logged by the service as a "PolicyPreviewLog {...}"
line, and counted.`,
				examples: []string{"lehr policy experiment list shop/fw", "lehr policy experiment counts shop/fw deny-eve"},
			}},
			expDoc("create", "create NS ID --file RULES [--annotation K=V]... [flags]", "create an experiment from a file of rules",
				`Creates experiment ID of policy NS from RULES: a JSON or YAML object of rules by
key, like a push file (- reads standard input); an empty object previews
deleting the policy. It is not evaluated until started.`,
				[]string{"file", "f", "annotation"},
				"lehr policy experiment create shop/fw deny-eve -f rules.yaml",
				"lehr policy experiment create shop/fw no-policy -f - --annotation ticket=OPS-7"),
			expDoc("update", "update NS ID [--file RULES] [--annotation K=V]... [--etag E] [flags]", "change an experiment's rules or annotations",
				"Replaces the experiment's rules (--file) and/or sets annotations; an active experiment is suspended. --etag E changes it only if its etag is still E.",
				[]string{"file", "f", "annotation", "etag"},
				"lehr policy experiment update shop/fw deny-eve -f rules-v2.yaml",
				"lehr policy experiment update shop/fw deny-eve --annotation reviewed=yes --etag 33ffa2f5422b9f6a"),
			expDoc("get", "get NS ID [flags]", "one experiment, with its rules and state",
				"Shows experiment ID: its state, etag, parent etag, annotations and rules.",
				nil,
				"lehr policy experiment get shop/fw deny-eve",
				"lehr policy experiment get shop/fw deny-eve -o json"),
			expDoc("list", "list NS [--active | --filter F] [flags]", "the experiments of a policy",
				"Lists policy NS's experiments; --active those being previewed, --filter an AIP-160 filter.",
				[]string{"active", "filter"},
				"lehr policy experiment list shop/fw --active -o json",
				"lehr policy experiment list shop/fw --filter 'preview_metadata.state = ACTIVE'"),
			expDoc("delete", "delete NS ID [--etag E] [flags]", "delete an experiment",
				"Deletes experiment ID; --etag E only if its etag is still E.",
				[]string{"etag"},
				"lehr policy experiment delete shop/fw deny-eve",
				"lehr policy experiment delete shop/fw deny-eve --etag 33ffa2f5422b9f6a"),
			expDoc("start", "start NS ID [flags]", "hosts start evaluating the experiment",
				`Starts previewing the experiment: hosts evaluate it beside the live rules, log
each disagreement ("PolicyPreviewLog {...}") and count the decisions.`,
				nil,
				"lehr policy experiment start shop/fw deny-eve",
				"lehr policy experiment start shop/fw deny-eve -o json"),
			expDoc("stop", "stop NS ID [flags]", "hosts stop evaluating the experiment",
				"Stops previewing the experiment; its counts are kept.",
				nil,
				"lehr policy experiment stop shop/fw deny-eve",
				"lehr policy experiment stop shop/fw deny-eve -o json"),
			expDoc("counts", "counts NS ID [flags]", "live → experiment decisions the hosts counted",
				"Shows the decisions hosts counted while previewing the experiment, live → experiment (allow→allow, deny→deny, allow→deny, deny→allow), per zone and in all, with the share that disagreed.",
				nil,
				"lehr policy experiment counts shop/fw deny-eve",
				"lehr policy experiment counts shop/fw deny-eve -o json"),
			expDoc("commit", "commit NS ID --etag E [--parent-etag P] [--min-evaluations N] [--max-disagreement R] [--message M] [flags]", "make the experiment the live policy",
				`Makes the experiment the live policy — a new version that rolls out by the
rollout policy — and deletes it. --etag is the etag of the experiment you
reviewed ('lehr policy experiment get' shows it); --parent-etag replaces the
live policy only if its etag is still P; --min-evaluations and
--max-disagreement refuse while the counts say it is not ready.`,
				[]string{"etag", "parent-etag", "min-evaluations", "max-disagreement", "message", "m"},
				"lehr policy experiment commit shop/fw deny-eve --etag 33ffa2f5422b9f6a --parent-etag v1 --max-disagreement 0.3",
				"lehr policy experiment commit shop/fw deny-eve --etag 33ffa2f5422b9f6a --min-evaluations 1000 -m 'reviewed'"),
		},
	})
	cf := addClientFlags(fs, e)
	file := fs.String("file", "", "JSON or YAML `file` of rules by key; - reads standard input")
	fs.StringVar(file, "f", "", "short for --file")
	var annotations stringList
	fs.Var(&annotations, "annotation", "an annotation `key=value` (repeatable)")
	etag := fs.String("etag", "", "the `etag` the experiment (or, for policy delete, the live policy) must still have; experiment commit: the experiment's, required")
	parentEtag := fs.String("parent-etag", "", "replace the live policy only if its etag is still `P`")
	minEval := fs.Uint64("min-evaluations", 0, "refuse while hosts counted fewer than `N` decisions")
	maxDis := fs.Float64("max-disagreement", 0, "refuse while the experiment disagreed on more than share `R` (0 to 1) of decisions")
	msg := fs.String("message", "", "why, recorded in the version's history")
	fs.StringVar(msg, "m", "", "short for --message")
	filter := fs.String("filter", "", "an AIP-160 `filter`, e.g. 'preview_metadata.state = ACTIVE'")
	active := fs.Bool("active", false, "only experiments being previewed")
	input := fs.String("input", "", "the `JSON` input, {\"request\": {...}, \"principal\": {...}, \"now\": RFC 3339}")
	experiment := fs.String("experiment", "", "also decide with experiment `ID`")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	if len(pos) == 0 {
		return usageError(e, fs, "missing subcommand: get, eval, delete or experiment")
	}
	switch pos[0] {
	case "get", "eval", "delete":
		if code, ok := wantArgs(e, fs, pos[1:], 1, "a policy namespace NS"); !ok {
			return code
		}
		if pos[0] == "eval" && *input == "" {
			return usageError(e, fs, "needs --input JSON")
		}
	case "experiment":
		if len(pos) < 2 {
			return usageError(e, fs, "missing action: create, update, get, list, delete, start, stop, commit or counts")
		}
		switch act := pos[1]; act {
		case "list":
			if code, ok := wantArgs(e, fs, pos[2:], 1, "a policy namespace NS"); !ok {
				return code
			}
			if *active && *filter != "" {
				return usageError(e, fs, "give --active or --filter, not both")
			}
		case "create", "update", "get", "delete", "start", "stop", "commit", "counts":
			if code, ok := wantArgs(e, fs, pos[2:], 2, "a policy namespace NS and an experiment ID"); !ok {
				return code
			}
			if act == "create" && *file == "" {
				return usageError(e, fs, "needs --file RULES (an empty object {} previews deleting the policy)")
			}
			if act == "commit" && *etag == "" {
				return usageError(e, fs, "needs --etag E: the etag of the experiment you reviewed ('lehr policy experiment get' shows it)")
			}
			if act == "update" && *file == "" && len(annotations) == 0 {
				return usageError(e, fs, "needs --file RULES and/or --annotation K=V")
			}
		default:
			return usageError(e, fs, "unknown action %q after experiment: want create, update, get, list, delete, start, stop, commit or counts", act)
		}
	default:
		return usageError(e, fs, "unknown subcommand %q: want get, eval, delete or experiment", pos[0])
	}
	var rules []content.Property
	if *file != "" {
		props, err := readPropertiesFile(*file, e.stdin)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
			return exitError
		}
		rules = props
	}
	var ann map[string]string
	for _, a := range annotations {
		k, v, err := splitAssign("annotation", a)
		if err != nil {
			return usageError(e, fs, "%v", err)
		}
		if ann == nil {
			ann = map[string]string{}
		}
		ann[k] = v
	}
	var in policy.Input
	if *input != "" {
		var err error
		if in, err = parsePolicyInput(*input); err != nil {
			return usageError(e, fs, "--input: %v", err)
		}
	}

	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	ns := pos[1]
	fail := func(err error) int { return reportError(e, fs.Name(), err, cf.errCtx(ns)) }
	switch pos[0] {
	case "get":
		p, err := c.GetPolicy(ctx, ns)
		if err != nil {
			return fail(err)
		}
		if cf.json() {
			return printOrFail(e, p)
		}
		fmt.Fprintf(e.stdout, "policy %s (%s), etag %s\n", ns, clean(p.GetName()), clean(p.GetEtag()))
		writeRules(e.stdout, p.GetRules())
		return exitOK
	case "delete":
		md, err := c.DeletePolicy(ctx, ns, *etag, *msg)
		if err != nil {
			return fail(err)
		}
		if cf.json() {
			return printOrFail(e, md)
		}
		v := md.GetVersion()
		fmt.Fprintf(e.stdout, "deleted policy %s: version %d is the no-op policy (allows everything)", ns, v.GetSeq())
		if n := len(md.GetDeletedExperiments()); n > 0 {
			fmt.Fprintf(e.stdout, "; deleted its %d experiments: %s", n, clean(strings.Join(md.GetDeletedExperiments(), ", ")))
		}
		fmt.Fprintf(e.stdout, "\nfollow its rollout: lehr rollout status %s; undo: lehr rollback %s --to %d\n", ns, ns, v.GetParent())
		return exitOK
	case "eval":
		p, err := c.GetPolicy(ctx, ns)
		if err != nil {
			return fail(err)
		}
		var exp *lehrpb.PolicyExperiment
		if *experiment != "" {
			if exp, err = c.Experiment(ctx, ns, *experiment); err != nil {
				return fail(err)
			}
		}
		return evalPolicy(ctx, e, fs.Name(), p, exp, in, cf.json())
	}
	ns, act := pos[2], pos[1]
	id := ""
	if len(pos) > 3 {
		id = pos[3]
	}
	var exp *lehrpb.PolicyExperiment
	switch act {
	case "list":
		f := *filter
		if *active {
			f = "preview_metadata.state = ACTIVE"
		}
		exps, err := c.Experiments(ctx, ns, f)
		if err != nil {
			return fail(err)
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.ListPolicyExperimentsResponse{PolicyExperiments: exps})
		}
		writeExperiments(e.stdout, exps)
		return exitOK
	case "counts":
		counts, err := c.ExperimentCounts(ctx, ns, id)
		if err != nil {
			return fail(err)
		}
		if cf.json() {
			return printOrFail(e, counts)
		}
		writeCounts(e.stdout, counts)
		return exitOK
	case "commit":
		md, err := c.CommitExperiment(ctx, ns, id, &lehrpb.CommitPolicyExperimentRequest{
			Etag: *etag, ParentEtag: *parentEtag, MinEvaluations: *minEval, MaxDisagreement: *maxDis, Message: *msg,
		})
		if err != nil {
			return fail(err)
		}
		if cf.json() {
			return printOrFail(e, md)
		}
		writeCommit(e.stdout, id, ns, md)
		return exitOK
	case "create":
		exp, err = c.CreateExperiment(ctx, ns, id, rules, ann)
	case "update":
		exp, err = c.UpdateExperiment(ctx, ns, id, *file != "", rules, ann, *etag)
	case "get":
		exp, err = c.Experiment(ctx, ns, id)
	case "delete":
		exp, err = c.DeleteExperiment(ctx, ns, id, *etag)
	case "start", "stop":
		exp, err = c.StartPreview(ctx, ns, id, act == "start")
	}
	if err != nil {
		return fail(err)
	}
	if cf.json() {
		return printOrFail(e, exp)
	}
	switch act {
	case "delete":
		fmt.Fprintf(e.stdout, "deleted experiment %s\n", clean(exp.GetName()))
	default:
		writeExperiment(e.stdout, exp)
	}
	return exitOK
}

// parsePolicyInput reads eval's --input.
func parsePolicyInput(s string) (policy.Input, error) {
	var raw struct {
		Request   map[string]any `json:"request"`
		Principal map[string]any `json:"principal"`
		Now       string         `json:"now"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return policy.Input{}, fmt.Errorf("%w; want {\"request\": {...}, \"principal\": {...}, \"now\": \"2026-01-02T15:04:05Z\"} (all optional)", err)
	}
	in := policy.Input{Request: numbers(raw.Request), Principal: numbers(raw.Principal), Now: time.Now()}
	if raw.Now != "" {
		t, err := time.Parse(time.RFC3339, raw.Now)
		if err != nil {
			return policy.Input{}, fmt.Errorf("now: %w; want RFC 3339, e.g. 2026-01-02T15:04:05Z", err)
		}
		in.Now = t
	}
	return in, nil
}

// numbers turns json.Numbers into int64 where they are integers, float64
// otherwise, so CEL sees 3 as an int and 0.5 as a double.
func numbers(m map[string]any) map[string]any {
	for k, v := range m {
		switch x := v.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				m[k] = i
			} else if f, err := x.Float64(); err == nil {
				m[k] = f
			}
		case map[string]any:
			m[k] = numbers(x)
		}
	}
	return m
}

// evalPolicy decides for in with p's rules and, if exp is set, with the
// experiment's, and prints both.
func evalPolicy(ctx context.Context, e *env, cmd string, p *lehrpb.Policy, exp *lehrpb.PolicyExperiment, in policy.Input, asJSON bool) int {
	env, err := policy.NewEnv()
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitError
	}
	type result struct {
		Of     string        `json:"of"`
		Etag   string        `json:"etag"`
		Effect policy.Effect `json:"effect"`
		Rule   string        `json:"rule,omitempty"`
		Error  string        `json:"error,omitempty"`
	}
	decide := func(of, etag string, rules []*lehrpb.Property) (result, error) {
		set, err := policy.CompileSet(env, content.FromProto(rules))
		if err != nil {
			return result{}, err
		}
		d, err := set.Evaluate(ctx, in)
		r := result{Of: of, Etag: etag, Effect: d.Effect, Rule: d.Rule}
		if err != nil {
			r.Error = err.Error()
		}
		return r, nil
	}
	var out []result
	r, err := decide("live", p.GetEtag(), p.GetRules())
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: the live policy: %v\n", cmd, err)
		return exitError
	}
	out = append(out, r)
	if exp != nil {
		r, err := decide(exp.GetName(), exp.GetEtag(), exp.GetPolicy().GetRules())
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: experiment: %v\n", cmd, err)
			return exitError
		}
		out = append(out, r)
	}
	if asJSON {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", b)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tETAG\tDECISION\tRULE")
	for _, r := range out {
		dec := string(r.Effect)
		if r.Error != "" {
			dec += " (error: " + oneLine(r.Error) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(r.Of), clean(r.Etag), clean(dec), orDash(r.Rule))
	}
	tw.Flush()
	return exitOK
}

// writeRules prints rules one per line: key, effect and condition.
func writeRules(w io.Writer, rules []*lehrpb.Property) {
	if len(rules) == 0 {
		fmt.Fprintln(w, "  (no rules: the no-op policy, which allows everything)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RULE\tEFFECT\tCONDITION")
	for _, p := range content.FromProto(rules) {
		r, err := policy.ParseRule(p)
		if err != nil {
			fmt.Fprintf(tw, "  %s\t?\t%s\n", clean(p.Key), oneLine(err.Error()))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", clean(p.Key), clean(string(r.Effect)), oneLine(r.Condition))
	}
	tw.Flush()
}

// writeExperiment prints one experiment.
func writeExperiment(w io.Writer, e *lehrpb.PolicyExperiment) {
	fmt.Fprintf(w, "experiment %s\n", clean(e.GetName()))
	fmt.Fprintf(w, "  etag:     %s\n", clean(e.GetEtag()))
	fmt.Fprintf(w, "  preview:  %s", preview.StateLine(e))
	if p := e.GetPreviewMetadata().GetLogPrefix(); p != "" {
		fmt.Fprintf(w, " (log lines begin %q)", p)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  changed:  %s by %s\n", fmtTime(e.GetUpdateTime()), orDash(e.GetAuthor()))
	for _, k := range slices.Sorted(maps.Keys(e.GetAnnotations())) {
		fmt.Fprintf(w, "  annotation %s=%s\n", clean(k), clean(e.GetAnnotations()[k]))
	}
	writeRules(w, e.GetPolicy().GetRules())
}

// writeExperiments prints a list of experiments.
func writeExperiments(w io.Writer, exps []*lehrpb.PolicyExperiment) {
	if len(exps) == 0 {
		fmt.Fprintln(w, "no experiments")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tETAG\tRULES\tPREVIEW")
	for _, e := range exps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", clean(e.GetName()), clean(e.GetEtag()), len(e.GetPolicy().GetRules()), preview.StateLine(e))
	}
	tw.Flush()
}

// writeCommit prints what a commit of experiment id of ns did: the new
// version, and what its canary analysis expects of the canary hosts — the
// deny share to move as previewed and, when a rollout canaries the
// version, the share of decisions the preview disagreed on to be decided
// otherwise than the replaced version would.
func writeCommit(w io.Writer, id, ns string, md *lehrpb.CommitPolicyExperimentMetadata) {
	v := md.GetVersion()
	fmt.Fprintf(w, "committed experiment %s: %s is now at version %d (etag v%d); the experiment is deleted\n", clean(id), clean(ns), v.GetSeq(), v.GetSeq())
	if md.ExpectedDenyChange != nil {
		fmt.Fprintf(w, "its canary analysis expects the share of denied decisions to change by %+.3g percentage points on the canary hosts, as previewed (check %q)\n",
			100*md.GetExpectedDenyChange(), canary.PolicyCheckName)
		if md.ExpectedDisagreement != nil {
			fmt.Fprintf(w, "and the canary hosts to decide %.3g %% of decisions otherwise than version %d would, the share the preview disagreed on (check %q)\n",
				100*md.GetExpectedDisagreement(), v.GetParent(), canary.PolicyDisagreementCheckName)
		}
	} else {
		fmt.Fprintf(w, "the hosts counted fewer than %d decisions of it: its canary analysis expects no particular change of the deny share\n", canary.PolicyCheckMinDecisions)
	}
	fmt.Fprintf(w, "follow its rollout: lehr rollout status %s\n", clean(ns))
}

// writeCounts prints an experiment's counts: per zone, then in all, then
// its most recent samples over time.
func writeCounts(w io.Writer, c *lehrpb.PolicyExperimentCounts) {
	fmt.Fprintln(w, clean(preview.CountsHeading(c)))
	defer writeSamples(w, c.GetHistory())
	if len(c.GetTotals()) == 0 {
		fmt.Fprintln(w, preview.NoCounts)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tLIVE\tEXPERIMENT\tALLOW→ALLOW\tDENY→DENY\tALLOW→DENY\tDENY→ALLOW\tDISAGREE\tERRORS")
	row := func(zone string, p *lehrpb.PreviewCounts) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\n", clean(zone), clean(p.GetLiveEtag()), clean(p.GetExperimentEtag()),
			p.GetAllowAllow(), p.GetDenyDeny(), p.GetAllowDeny(), p.GetDenyAllow(), preview.DisagreeShare(p), p.GetExperimentErrors())
	}
	for _, z := range c.GetZones() {
		row(z.GetZone(), z)
	}
	for _, t := range c.GetTotals() {
		row("(all)", t)
	}
	tw.Flush()
}

// historyRows is how many of an experiment's most recent samples "lehr
// policy experiment counts" prints (-o json has every one).
const historyRows = 10

// writeSamples prints the most recent samples of an experiment's history.
func writeSamples(w io.Writer, h []*lehrpb.PolicyExperimentSample) {
	if len(h) == 0 {
		fmt.Fprintln(w, "over time: no samples yet (control samples an ACTIVE experiment's counts once a minute; the first is a baseline)")
		return
	}
	shown := h[max(0, len(h)-historyRows):]
	fmt.Fprintf(w, "over time: the latest %d of %d samples since %s (-o json has them all):\n", len(shown), len(h), h[0].GetSampleTime().AsTime().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SAMPLED\tINTERVAL\tDECISIONS\tDISAGREED\tDISAGREE\tEXPERIMENT")
	for _, s := range shown {
		share := "-"
		if s.GetEvaluations() > 0 {
			share = fmt.Sprintf("%.2f%%", 100*float64(s.GetDisagreements())/float64(s.GetEvaluations()))
		}
		iv := s.GetInterval().AsDuration()
		if iv >= time.Minute {
			iv = iv.Round(time.Second)
		} else {
			iv = iv.Round(time.Millisecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.GetSampleTime().AsTime().UTC().Format(time.RFC3339), iv,
			s.GetEvaluations(), s.GetDisagreements(), share, clean(s.GetExperimentEtag()))
	}
	tw.Flush()
}
