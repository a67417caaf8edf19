package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/internal/jsonyaml"
	"lehr.dev/lehr/proto/lehrpb"
)

func runRollout(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr rollout", doc{
		usage:   "lehr rollout status|events|list|pause|resume|abort|promote|wait [NS] | lehr rollout policy get|set|delete|history SCOPE [flags]",
		summary: "follow and steer rollouts; show and set rollout policies",
		about: `Unless control runs with --rollouts=false, every version after a namespace's
first is a rollout: it moves through the stages of its rollout policy — a few
canary hosts per zone, whole zones, or a percentage of their hosts — baking
for a while and checking health before the next stage, and is rolled back on
evidence. A namespace's first version and a rollback go to every zone at once.
Without a policy of its own or its domain's, control's built-in default
applies: one canary host per zone, then the first zone, then the rest.`,
		examples: []string{
			"lehr rollout status payments/limits",
			"lehr push payments/limits --file limits.yaml && lehr rollout wait payments/limits",
			"lehr rollout policy get payments/limits",
		},
		subs: []subDoc{
			{path: "status", flags: []string{"version"}, doc: doc{
				usage:   "lehr rollout status NS [--version V] [flags]",
				summary: "stage, hosts applied, time left in the bake, why it waits",
				about: `Shows the rollout of namespace NS's latest version (--version V: of version V):
its state, its stages with the current one marked, its canary hosts, and on
the last line why it waits (docs/operations.md, "Rollouts", says what each
reason means and what to do).`,
				examples: []string{"lehr rollout status payments/limits", "lehr rollout status payments/limits --version 41 -o json"},
			}},
			{path: "events", flags: []string{"version"}, doc: doc{
				usage:    "lehr rollout events NS [--version V] [flags]",
				summary:  "every decision, with the numbers behind it",
				about:    "Lists every decision of the rollout — started, stage entered, applied, advanced, paused, rolled back… — with when, who and why.",
				examples: []string{"lehr rollout events payments/limits", "lehr rollout events payments/limits -o json | jq -r '.events[].kind'"},
			}},
			{path: "list", flags: []string{"active"}, doc: doc{
				usage:    "lehr rollout list [NS] [--active] [flags]",
				summary:  "rollouts, of NS or of every namespace",
				about:    "Lists the rollouts of namespace NS (of every namespace without NS), oldest first; --active lists the running and paused ones only.",
				examples: []string{"lehr rollout list --active", "lehr rollout list payments/limits"},
			}},
			{path: "pause", flags: []string{"version", "message", "m"}, doc: doc{
				usage:    "lehr rollout pause NS [--version V] [--message M] [flags]",
				summary:  "hold a rollout (its checks still run)",
				about:    "Holds the rollout where it is: no next stage until resumed; its health checks still run and can still roll it back. Control acts within a second.",
				examples: []string{"lehr rollout pause payments/limits -m 'looking into the error rate'", "lehr rollout pause payments/limits --version 41"},
			}},
			{path: "resume", flags: []string{"version", "message", "m"}, doc: doc{
				usage:    "lehr rollout resume NS [--version V] [--message M] [flags]",
				summary:  "let a paused rollout go on (its bake starts over)",
				about:    "Lets a paused rollout go on; the bake of its current stage starts over.",
				examples: []string{"lehr rollout resume payments/limits", "lehr rollout resume payments/limits -m 'false alarm'"},
			}},
			{path: "abort", flags: []string{"version", "message", "m"}, doc: doc{
				usage:    "lehr rollout abort NS [--version V] [--message M] [flags]",
				summary:  "end a rollout and roll every host back",
				about:    "Ends the rollout and rolls every zone back: a new version with the content of the version the rollout started from becomes every zone's goal.",
				examples: []string{"lehr rollout abort payments/limits -m 'wrong limits'", "lehr rollout abort payments/limits --version 41"},
			}},
			{path: "promote", flags: []string{"version", "message", "m"}, doc: doc{
				usage:    "lehr rollout promote NS [--version V] [--message M] [flags]",
				summary:  "skip the rest of the current stage's bake",
				about:    "Skips the rest of the bake of the rollout's current stage: it advances at the strategist's next round if its checks pass. A freeze window is not skipped.",
				examples: []string{"lehr rollout promote payments/limits", "lehr rollout promote payments/limits -m 'verified by hand'"},
			}},
			{path: "wait", flags: []string{"version"}, doc: doc{
				usage:   "lehr rollout wait NS [--version V] [--timeout D] [flags]",
				summary: "print progress until the rollout ends",
				about: `Prints the rollout's progress, a line whenever its stage, state or reason
changes, until it ends; with -o json the rollout as it ended. It waits for a
rollout the strategist has yet to start (right after a push), for as long as
its stages and bakes take — or --timeout, when given.

Exit status: 0 the rollout succeeded; 1 it failed, was aborted or superseded,
or --timeout passed first; 3 at once when there is nothing to wait for, the
version having no rollout and none to come: a namespace's first version, a
rollback (every zone's goal is at it already), a version published while no
zone existed, or one superseded before its rollout started. A script that
publishes and waits may take 3 as done.`,
				examples: []string{
					"lehr rollout wait payments/limits",
					"lehr rollout wait payments/limits --timeout 1h",
					"lehr push payments/limits --file limits.yaml && { lehr rollout wait payments/limits || [ $? -eq 3 ]; }",
				},
			}},
			{path: "policy", doc: doc{
				usage:   "lehr rollout policy get|set|delete|history SCOPE [flags]",
				summary: "show and set rollout policies",
				about: `A rollout policy says how a new version reaches the fleet: an ordered list
of stages, each moving some hosts (a few canary hosts per zone, whole zones,
or a percentage of their hosts), baking for a while, and checking health
before the next stage. Zones no stage names are reached after the last
stage. SCOPE is a domain ("payments": the default of its namespaces) or a
namespace ("payments/limits": its own policy, over the domain's). Without
either, control's built-in default applies. Every change is kept in the
scope's history with its author and message; 'lehr rollout policy set
--help' shows the file format.`,
				examples: []string{"lehr rollout policy get payments/limits", "lehr rollout policy history payments"},
			}},
			{path: "policy get", doc: doc{
				usage:    "lehr rollout policy get SCOPE [flags]",
				summary:  "the scope's own policy and the one in effect",
				about:    "Shows SCOPE's own policy (its generation, who set it and why), if it has one, and the policy in effect for it, stage by stage, with where it comes from.",
				examples: []string{"lehr rollout policy get payments/limits", "lehr rollout policy get payments -o json"},
			}},
			{path: "policy set", flags: []string{"file", "f", "message", "m", "expect-generation"}, doc: doc{
				usage:   "lehr rollout policy set SCOPE --file FILE [--message M] [--expect-generation N] [flags]",
				summary: "set a scope's policy from a YAML or JSON file",
				about: `Sets SCOPE's rollout policy from a YAML or JSON file (- reads standard
input); durations as 90s, 10m, 1h30m:

  stages:
    - name: canary
      canary: {hosts: 1}            # or {percent: 5}, optionally zones: [...]
      bake: 10m
      max_error_ratio: 0.01         # consumer errors per consumer, 0 to 1
      analysis:                     # canary against control hosts (docs/canary.md)
        checks:                     # none: the defaults the hosts report
          - {name: errors, ratio: {numerator: request_errors, denominator: requests}}
          - name: lb-errors         # a query of lehr control --metrics-url
            query: {value: 'sum by (host) (increase(lb_5xx_total{$population}[$interval]))'}
            kind: count
        host_label: instance        # the query's labels naming hosts (default host)
    - name: first zone
      zones: {count: 1}             # or zones: [a, b], or percent: 50
      bake: 30m
    - name: rest
      zones: {}                     # every zone not yet reached
  max_concurrent: 2                 # rollouts of the domain in a stage at once
  after: [payments/flags]           # a namespace's own policy only: each stage
                                    # waits until payments/flags holds, where the
                                    # stage goes, the content it had at the publish
  freeze_windows:                   # no stage is entered meanwhile
    - {start: "2026-12-23T00:00:00Z", end: "2027-01-02T00:00:00Z", reason: holidays}
    - reason: weekend               # every week, local time, DST-aware
      weekly: {days: [fri], at: "16:00", length: 64h, time_zone: Europe/Berlin}
  monitoring:                       # no stage is entered while one fires
    alerts:                         # (lehr control --alerts-url: Prometheus, vmalert)
      - alert: HighErrorRate        # the rule's alertname
        matchers: ['service="checkout"', 'severity=~"page|critical"']
        zone_label: zone            # holds only stages that move that zone
    on_source_error: wait           # or proceed, when the source cannot be read

For an emergency, "global_blast: true" (and no stages) moves every zone at
once: the publish itself writes every zone's goal, without waiting for the
rollout strategist (unless a freeze window is open or max_concurrent is
set: then it waits as any rollout); rollouts record it as such.`,
				examples: []string{
					"lehr rollout policy set payments --file policy.yaml --message 'slower canary'",
					"echo 'global_blast: true' | lehr rollout policy set payments/limits -f - -m 'incident 42'",
				},
			}},
			{path: "policy delete", flags: []string{"message", "m", "expect-generation"}, doc: doc{
				usage:    "lehr rollout policy delete SCOPE [--message M] [--expect-generation N] [flags]",
				summary:  "remove a scope's policy",
				about:    "Removes SCOPE's own policy: the scope falls back to its domain's policy or control's built-in default. The deletion is kept in the scope's history.",
				examples: []string{"lehr rollout policy delete payments/limits -m 'incident over'", "lehr rollout policy delete payments --expect-generation 4"},
			}},
			{path: "policy history", doc: doc{
				usage:    "lehr rollout policy history SCOPE [flags]",
				summary:  "every change of a scope's policy, newest first",
				about:    "Lists every change of SCOPE's policy, newest first: generation, time, author, what changed, and the message.",
				examples: []string{"lehr rollout policy history payments", "lehr rollout policy history payments -o json"},
			}},
		},
	})
	cf := addClientFlags(fs, e)
	file := fs.String("file", "", "YAML or JSON `file` holding the policy; - reads standard input")
	fs.StringVar(file, "f", "", "short for --file")
	msg := fs.String("message", "", "why, recorded in the history (of the policy, or of the rollout)")
	fs.StringVar(msg, "m", "", "short for --message")
	expect := fs.Uint64("expect-generation", 0, "change only if the policy is still at generation `N`")
	version := fs.Uint64("version", 0, "the rollout of version `V` (default: the namespace's latest rollout)")
	active := fs.Bool("active", false, "running and paused rollouts only")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 && pos[0] != "policy" {
		return runRolloutAction(ctx, e, fs, cf, pos, *version, *active, *msg)
	}
	if len(pos) == 0 {
		return usageError(e, fs, "missing subcommand: status, events, list, pause, resume, abort, promote, wait or policy")
	}
	if len(pos) < 2 {
		return usageError(e, fs, "missing action: get, set, delete or history")
	}
	action := pos[1]
	switch action {
	case "get", "set", "delete", "history":
	default:
		return usageError(e, fs, "unknown action %q: want get, set, delete or history", action)
	}
	if code, ok := wantArgs(e, fs, pos[2:], 1, "SCOPE (a domain or a namespace)"); !ok {
		return code
	}
	scope := pos[2]
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	var policy *lehrpb.RolloutPolicy
	switch {
	case action == "set" && *file == "":
		return usageError(e, fs, "policy set needs --file FILE (or - for standard input)")
	case action == "set":
		p, err := readPolicyFile(*file, e.stdin)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
			return exitError
		}
		policy = p
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	switch action {
	case "get":
		r, err := c.GetRolloutPolicy(ctx, scope)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		if cf.json() {
			return printOrFail(e, r)
		}
		writePolicyStatus(e.stdout, scope, r)
	case "set", "delete":
		var rec *lehrpb.RolloutPolicyRecord
		if action == "set" {
			rec, err = c.SetRolloutPolicy(ctx, scope, policy, *msg, *expect)
		} else {
			rec, err = c.DeleteRolloutPolicy(ctx, scope, *msg, *expect)
		}
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		if cf.json() {
			return printOrFail(e, rec)
		}
		if rec.GetDeleted() {
			fmt.Fprintf(e.stdout, "deleted the rollout policy of %s (generation %d)\n", scope, rec.GetGeneration())
		} else {
			fmt.Fprintf(e.stdout, "rollout policy of %s at generation %d:\n", scope, rec.GetGeneration())
			writePolicy(e.stdout, rec.GetPolicy())
		}
	case "history":
		recs, err := c.RolloutPolicyHistory(ctx, scope, 0, 0)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.RolloutPolicyHistoryResponse{Records: recs})
		}
		writePolicyHistory(e.stdout, scope, recs)
	}
	return exitOK
}

// readPolicyFile reads a rollout policy from YAML or JSON (YAML is read
// with jsonyaml's bounds). Durations may be written as Go durations
// ("10m", "1h30m") as well as protobuf's JSON form ("600s"); unknown
// fields are errors naming them.
func readPolicyFile(path string, stdin io.Reader) (*lehrpb.RolloutPolicy, error) {
	data, name, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	p, err := parsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// goDurations rewrites the Go durations ("10m") among m's fields into
// protobuf's JSON form ("600s").
func goDurations(m map[string]any, at string, fields ...string) error {
	for _, f := range fields {
		s, ok := m[f].(string)
		if !ok {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s.%s: %q is not a duration; write e.g. 90s, 10m or 1h30m", at, f, s)
		}
		m[f] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
	return nil
}

func parsePolicy(data []byte) (*lehrpb.RolloutPolicy, error) {
	if strings.TrimSpace(string(data)) == "" {
		return nil, errors.New("empty; want a policy such as {stages: [{canary: {hosts: 1}, bake: 10m}]}")
	}
	js, err := jsonyaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("invalid policy: %w", err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("the top level must be a mapping with stages (or global_blast)")
	}
	if stages, ok := top["stages"].([]any); ok {
		for i, st := range stages {
			m, ok := st.(map[string]any)
			if !ok {
				continue // protojson names the error
			}
			if err := goDurations(m, fmt.Sprintf("stages[%d]", i), "bake", "apply_deadline", "applyDeadline"); err != nil {
				return nil, err
			}
		}
	}
	if ws, ok := top["freeze_windows"].([]any); ok {
		for i, w := range ws {
			m, ok := w.(map[string]any)
			if !ok {
				continue
			}
			if wk, ok := m["weekly"].(map[string]any); ok {
				if err := goDurations(wk, fmt.Sprintf("freeze_windows[%d].weekly", i), "length"); err != nil {
					return nil, err
				}
			}
		}
	}
	js, err = json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("invalid policy: %w", err)
	}
	p := new(lehrpb.RolloutPolicy)
	if err := protojson.Unmarshal(js, p); err != nil {
		return nil, fmt.Errorf("invalid policy: %w", err)
	}
	return p, nil
}

func fmtPolicySource(s lehrpb.RolloutPolicySource) string {
	switch s {
	case lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_NAMESPACE:
		return "the namespace's own policy"
	case lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN:
		return "the domain's policy"
	case lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_BUILT_IN:
		return "control's built-in default"
	}
	return "unknown"
}

func writePolicyStatus(w io.Writer, scope string, r *lehrpb.GetRolloutPolicyResponse) {
	if st := r.GetStored(); st != nil {
		fmt.Fprintf(w, "%s has its own policy, generation %d, set %s by %s", clean(scope), st.GetGeneration(), fmtTime(st.GetUpdateTime()), orDash(st.GetAuthor()))
		if m := st.GetMessage(); m != "" {
			fmt.Fprintf(w, ": %s", oneLine(m))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "%s has no policy of its own\n", clean(scope))
	}
	fmt.Fprintf(w, "in effect: %s\n", fmtPolicySource(r.GetSource()))
	writePolicy(w, r.GetEffective())
}

// writePolicy prints a policy's stages, one line each.
func writePolicy(w io.Writer, p *lehrpb.RolloutPolicy) {
	if p.GetGlobalBlast() {
		fmt.Fprintln(w, "  global blast: every zone at once, no canary, no bake (emergencies only)")
		writeFreezeWindows(w, p)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTAGE\tMOVES\tBAKE\tAPPLY WITHIN\tMIN APPLIED\tMAX ERROR RATIO")
	for i, st := range p.GetStages() {
		name := st.GetName()
		if name == "" {
			name = fmt.Sprintf("stage %d", i+1)
		}
		deadline := "10m0s"
		if d := st.GetApplyDeadline(); d != nil && d.AsDuration() > 0 {
			deadline = d.AsDuration().String()
		}
		minApplied := "-"
		if n := st.GetMinHostsApplied(); n > 0 {
			minApplied = strconv.Itoa(int(n))
		} else if st.GetCanary() != nil {
			minApplied = "1" // a canary stage needs evidence
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%g\n", i+1, clean(name), clean(fmtTarget(st)), st.GetBake().AsDuration(), deadline, minApplied, st.GetMaxErrorRatio())
	}
	tw.Flush()
	fmt.Fprintln(w, "  (zones no stage reaches whole are reached after the last stage)")
	writeFreezeWindows(w, p)
}

func writeFreezeWindows(w io.Writer, p *lehrpb.RolloutPolicy) {
	for _, fw := range p.GetFreezeWindows() {
		fmt.Fprintf(w, "  frozen %s: %s\n", clean(rollout.DescribeFreeze(fw)), orDash(fw.GetReason()))
	}
	if after := p.GetAfter(); len(after) > 0 {
		fmt.Fprintf(w, "  after %s: each stage waits until they hold, where it goes, the content they had at the publish\n", clean(strings.Join(after, ", ")))
	}
	writeMonitoring(w, p.GetMonitoring())
}

// writeMonitoring prints a policy's monitoring check, one line per alert.
func writeMonitoring(w io.Writer, m *lehrpb.MonitoringCheck) {
	if m == nil {
		return
	}
	onErr := m.GetOnSourceError()
	if onErr == "" {
		onErr = rollout.OnSourceErrorWait
	}
	fmt.Fprintf(w, "  monitoring check: no stage is entered while one of these alerts fires where it moves; if the alerts source cannot be read: %s\n", clean(onErr))
	for _, sel := range m.GetAlerts() {
		where := "every stage"
		if zl := sel.GetZoneLabel(); zl != "" {
			where = "the stages that move the zone its " + clean(zl) + " label names"
		}
		match := ""
		if ms := sel.GetMatchers(); len(ms) > 0 {
			match = "{" + strings.Join(ms, ",") + "}"
		}
		fmt.Fprintf(w, "    alert %s%s holds %s\n", clean(sel.GetAlert()), clean(match), where)
	}
}

func fmtTarget(st *lehrpb.RolloutStage) string {
	zones := func(zs []string) string {
		if len(zs) == 0 {
			return "every zone"
		}
		return "zones " + strings.Join(zs, ", ")
	}
	switch t := st.GetTarget().(type) {
	case *lehrpb.RolloutStage_Canary:
		if n := t.Canary.GetHosts(); n > 0 {
			return fmt.Sprintf("canary: %d %s per zone in %s", n, plural(int(n), "host", "hosts"), zones(t.Canary.GetZones()))
		}
		return fmt.Sprintf("canary: %g%% of hosts in %s", t.Canary.GetPercent(), zones(t.Canary.GetZones()))
	case *lehrpb.RolloutStage_Zones:
		pct := ""
		if p := t.Zones.GetPercent(); p > 0 && p < 100 {
			pct = fmt.Sprintf(" (%g%% of their hosts)", p)
		}
		switch {
		case len(t.Zones.GetZones()) > 0:
			return zones(t.Zones.GetZones()) + pct
		case t.Zones.GetCount() > 0:
			return fmt.Sprintf("the next %d %s in name order%s", t.Zones.GetCount(), plural(int(t.Zones.GetCount()), "zone", "zones"), pct)
		}
		return "every zone not yet reached" + pct
	}
	return "nothing (no target)"
}

func writePolicyHistory(w io.Writer, scope string, recs []*lehrpb.RolloutPolicyRecord) {
	if len(recs) == 0 {
		fmt.Fprintf(w, "%s: no rollout policy was ever set\n", clean(scope))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GENERATION\tTIME\tAUTHOR\tCHANGE\tMESSAGE")
	for _, r := range recs {
		n := len(r.GetPolicy().GetStages())
		change := fmt.Sprintf("%d %s", n, plural(n, "stage", "stages"))
		switch {
		case r.GetDeleted():
			change = "deleted"
		case r.GetPolicy().GetGlobalBlast():
			change = "global blast"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.GetGeneration(), fmtTime(r.GetUpdateTime()), orDash(r.GetAuthor()), change, oneLine(r.GetMessage()))
	}
	tw.Flush()
}

// runRolloutAction runs the subcommands about rollouts themselves.
func runRolloutAction(ctx context.Context, e *env, fs *flags, cf *clientFlags, pos []string, version uint64, active bool, msg string) int {
	sub := pos[0]
	actions := map[string]lehrpb.RolloutAction{
		"pause": lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, "resume": lehrpb.RolloutAction_ROLLOUT_ACTION_RESUME,
		"abort": lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, "promote": lehrpb.RolloutAction_ROLLOUT_ACTION_PROMOTE,
	}
	switch _, isAction := actions[sub]; {
	case sub == "list":
		if len(pos) > 2 {
			return usageError(e, fs, "list takes at most one namespace")
		}
	case sub == "status" || sub == "events" || sub == "wait" || isAction:
		if code, ok := wantArgs(e, fs, pos[1:], 1, "namespace NS"); !ok {
			return code
		}
	default:
		return usageError(e, fs, "unknown subcommand %q: want status, events, list, pause, resume, abort, promote, wait or policy", sub)
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	ns := ""
	if len(pos) > 1 {
		ns = pos[1]
	}
	if sub == "wait" {
		return rolloutWait(ctx, e, fs, cf, ns, version)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer done()
	switch sub {
	case "status":
		r, err := c.GetRollout(ctx, ns, version)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		if cf.json() {
			return printOrFail(e, r)
		}
		writeRollout(e.stdout, r)
	case "events":
		evs, err := c.RolloutEvents(ctx, ns, version)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.ListRolloutEventsResponse{Events: evs})
		}
		writeRolloutEvents(e.stdout, evs)
	case "list":
		rs, err := c.ListRollouts(ctx, ns, active)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.ListRolloutsResponse{Rollouts: rs})
		}
		writeRollouts(e.stdout, rs)
	default:
		r, err := c.UpdateRollout(ctx, ns, version, actions[sub], msg)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		if cf.json() {
			return printOrFail(e, r)
		}
		fmt.Fprintf(e.stdout, "asked control to %s rollout %s (now %s); it acts within a second: lehr rollout events %s\n", sub, clean(r.GetId()), stateName(r.GetState()), clean(ns))
	}
	return exitOK
}

// exitNoRollout is the exit status of "lehr rollout wait" when there is
// nothing to wait for.
const exitNoRollout = 3

// rolloutWait is "lehr rollout wait": it follows the rollout of version
// (0: the namespace's latest) until it ends, for --timeout if given (a
// rollout takes as long as its stages and bakes: without --timeout it
// waits for as long as that takes). Exit status: 0 it succeeded, 1 it
// ended otherwise (or an error, or --timeout passed), exitNoRollout there
// is nothing to wait for (producer.ErrNoRollout).
func rolloutWait(ctx context.Context, e *env, fs *flags, cf *clientFlags, ns string, version uint64) int {
	c, err := cf.dial()
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer c.Close()
	timed := false
	fs.Visit(func(f *flag.Flag) { timed = timed || f.Name == "timeout" })
	if timed {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cf.timeout)
		defer cancel()
	}
	if version == 0 {
		// The latest version's rollout, which the strategist may not
		// have started yet (right after a push).
		h, err := c.GetNamespace(ctx, ns)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		version = h.GetLatestVersion()
	}
	r, err := c.WaitRollout(ctx, ns, version, time.Second, func(r *lehrpb.Rollout) {
		if !cf.json() {
			fmt.Fprintf(e.stdout, "%s  %s: %s\n", time.Now().UTC().Format("15:04:05"), stateName(r.GetState()), reasonOf(r, time.Now()))
		}
	})
	var none *producer.NoRolloutError
	switch {
	case errors.As(err, &none):
		fmt.Fprintf(e.stderr, "%s: nothing to wait for: %s version %d has no rollout: %s\n", fs.Name(), clean(ns), version, clean(none.Reason))
		return exitNoRollout
	case timed && errors.Is(ctx.Err(), context.DeadlineExceeded):
		what := "its rollout has not started"
		if r != nil {
			what = fmt.Sprintf("its rollout is %s: %s", stateName(r.GetState()), reasonOf(r, time.Now()))
		}
		fmt.Fprintf(e.stderr, "%s: --timeout %v passed; %s version %d: %s ('lehr rollout status %s')\n", fs.Name(), cf.timeout, clean(ns), version, what, clean(ns))
		return exitError
	case err != nil:
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	if cf.json() {
		if code := printOrFail(e, r); code != exitOK {
			return code
		}
	}
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		return exitError
	}
	return exitOK
}

// writeRolloutEvents prints the output of "lehr rollout events".
func writeRolloutEvents(w io.Writer, evs []*lehrpb.RolloutEvent) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tTIME\tSTAGE\tEVENT\tWHO\tDETAIL")
	for _, ev := range evs {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", ev.GetSeq(), fmtTime(ev.GetTime()), ev.GetStage()+1, clean(ev.GetKind()), orDash(ev.GetAuthor()), oneLine(ev.GetMessage()))
	}
	tw.Flush()
}

// writeRollouts prints the output of "lehr rollout list".
func writeRollouts(w io.Writer, rs []*lehrpb.Rollout) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no rollouts")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT\tSTATE\tSTAGE\tUPDATED\tREASON")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", clean(r.GetId()), stateName(r.GetState()), clean(stageOf(r)), fmtTime(r.GetUpdateTime()), oneLine(reasonOf(r, time.Now())))
	}
	tw.Flush()
}

func stateName(s lehrpb.RolloutState) string { return rollout.StateName(s) }

func stageOf(r *lehrpb.Rollout) string { return rollout.StageLabel(r) }

// writeRollout prints a rollout's status.
func writeRollout(w io.Writer, r *lehrpb.Rollout) {
	fmt.Fprintf(w, "rollout %s: %s\n", clean(r.GetId()), strings.ToUpper(stateName(r.GetState())))
	fmt.Fprintf(w, "  version   %d (from base %d)\n", r.GetVersion(), r.GetBaseVersion())
	fmt.Fprintf(w, "  policy    %s", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(r.GetPolicySource().String(), "ROLLOUT_POLICY_SOURCE_")), "_", "-"))
	if g := r.GetPolicyGeneration(); g > 0 {
		fmt.Fprintf(w, " (generation %d)", g)
	}
	fmt.Fprintln(w)
	for i, name := range r.GetStages() {
		mark := " "
		switch rollout.PhaseOf(r, i) {
		case rollout.StagePassed:
			mark = "✓"
		case rollout.StageCurrent:
			mark = "▶"
		case rollout.StageEnded:
			mark = "✗"
		}
		fmt.Fprintf(w, "  %s %d. %s\n", mark, i+1, clean(name))
	}
	for _, zh := range r.GetCanaryHosts() {
		fmt.Fprintf(w, "  canary hosts of %s: %s\n", clean(zh.GetZone()), orDash(strings.Join(zh.GetHosts(), ", ")))
	}
	for _, req := range r.GetRequires() {
		fmt.Fprintf(w, "  after     %s: each stage waits until its goal holds version %d's content or newer where the stage goes\n",
			clean(req.GetNamespace()), req.GetVersion())
	}
	for _, c := range r.GetExpectedChecks() {
		fmt.Fprintf(w, "  expects   %s: canary hosts to move by %+.3g against the control hosts (tolerance %g)\n",
			clean(c.GetName()), c.GetExpected(), c.GetTolerance())
	}
	if r.GetRollbackVersion() != 0 {
		fmt.Fprintf(w, "  rolled back by version %d\n", r.GetRollbackVersion())
	}
	if h := r.GetAlertHold(); h != nil && rollout.Active(r) {
		for _, line := range rollout.DescribeHold(h) {
			fmt.Fprintf(w, "  held by   %s\n", clean(line))
		}
	}
	fmt.Fprintf(w, "  %s\n", reasonOf(r, time.Now()))
}

// reasonOf is r's reason and, while it waits for something timed, how
// long is left (rollout.Reason, as the console shows it).
func reasonOf(r *lehrpb.Rollout, now time.Time) string {
	return clean(rollout.Reason(r, now))
}
