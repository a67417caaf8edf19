package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"lehr.dev/lehr/internal/jsonyaml"
	"lehr.dev/lehr/proto/lehrpb"
)

func runRollout(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr rollout", doc{
		usage:   "lehr rollout policy get|set|delete|history SCOPE [flags]",
		summary: "show and set rollout policies",
		about: `A rollout policy says how a new version reaches the fleet: an ordered list
of stages, each moving some hosts (a few canary hosts per zone, whole zones,
or a percentage of their hosts), baking for a while, and checking health
before the next stage. Zones no stage names are reached after the last
stage. SCOPE is a domain ("payments": the default of its namespaces) or a
namespace ("payments/limits": its own policy, over the domain's). Without
either, control's built-in default applies: one canary host per zone, then
the first zone, then the rest.

  policy get SCOPE        the scope's own policy and the one in effect
  policy set SCOPE -f F   set it from a YAML or JSON file (- for stdin)
  policy delete SCOPE     remove it (the scope falls back to the domain's
                          policy or the built-in default)
  policy history SCOPE    every change, newest first, with who and why

A policy file (durations as 90s, 10m, 1h30m):

  stages:
    - name: canary
      canary: {hosts: 1}            # or {percent: 5}, optionally zones: [...]
      bake: 10m
      max_error_ratio: 0.01         # consumer errors per consumer, 0 to 1
    - name: first zone
      zones: {count: 1}             # or zones: [a, b], or percent: 50
      bake: 30m
    - name: rest
      zones: {}                     # every zone not yet reached

For an emergency, "global_blast: true" (and no stages) moves every zone at
once; rollouts record it as such. Every change is kept in the scope's
history with its author and message.`,
		examples: []string{
			"lehr rollout policy get payments/limits",
			"lehr rollout policy set payments --file policy.yaml --message 'slower canary'",
			"echo 'global_blast: true' | lehr rollout policy set payments/limits -f - -m 'incident 42'",
			"lehr rollout policy delete payments/limits -m 'incident over'",
			"lehr rollout policy history payments -o json",
		},
	})
	cf := addClientFlags(fs, e)
	file := fs.String("file", "", "with set: YAML or JSON `file` holding the policy; - reads standard input")
	fs.StringVar(file, "f", "", "short for --file")
	msg := fs.String("message", "", "with set and delete: why, recorded in the policy's history")
	fs.StringVar(msg, "m", "", "short for --message")
	expect := fs.Uint64("expect-generation", 0, "with set and delete: change only if the policy is still at generation `N`")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 || pos[0] != "policy" {
		return usageError(e, fs, "missing subcommand: policy get|set|delete|history SCOPE")
	}
	if len(pos) < 2 {
		return usageError(e, fs, "missing action after policy: get, set, delete or history")
	}
	action := pos[1]
	switch action {
	case "get", "set", "delete", "history":
	default:
		return usageError(e, fs, "unknown action %q: want get, set, delete or history", action)
	}
	if code, ok := wantArgs(e, fs, pos[2:], 1, "SCOPE (a domain or a namespace) after policy "+action); !ok {
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
	case *file != "":
		return usageError(e, fs, "--file is for policy set only")
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
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	name := path
	if path == "-" {
		name = "standard input"
	}
	p, err := parsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
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
			for _, f := range []string{"bake", "apply_deadline", "applyDeadline"} {
				s, ok := m[f].(string)
				if !ok {
					continue
				}
				d, err := time.ParseDuration(s)
				if err != nil {
					return nil, fmt.Errorf("stages[%d].%s: %q is not a duration; write e.g. 90s, 10m or 1h30m", i, f, s)
				}
				m[f] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
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
		fmt.Fprintf(w, "%s has its own policy, generation %d, set %s by %s", scope, st.GetGeneration(), fmtTime(st.GetUpdateTime()), orDash(st.GetAuthor()))
		if m := st.GetMessage(); m != "" {
			fmt.Fprintf(w, ": %s", oneLine(m))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "%s has no policy of its own\n", scope)
	}
	fmt.Fprintf(w, "in effect: %s\n", fmtPolicySource(r.GetSource()))
	writePolicy(w, r.GetEffective())
}

// writePolicy prints a policy's stages, one line each.
func writePolicy(w io.Writer, p *lehrpb.RolloutPolicy) {
	if p.GetGlobalBlast() {
		fmt.Fprintln(w, "  global blast: every zone at once, no canary, no bake (emergencies only)")
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
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%g\n", i+1, name, fmtTarget(st), st.GetBake().AsDuration(), deadline, minApplied, st.GetMaxErrorRatio())
	}
	tw.Flush()
	fmt.Fprintln(w, "  (zones no stage reaches whole are reached after the last stage)")
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
		fmt.Fprintf(w, "%s: no rollout policy was ever set\n", scope)
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
