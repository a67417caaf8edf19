package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
)

// Exit codes of "lehr canary judge" beyond the usual ones.
const (
	exitCanaryFail = 3 // the judge found the canary worse
	exitCanaryNone = 4 // the judge had not enough data for a verdict
)

func runCanary(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr canary", doc{
		usage:   "lehr canary show|list|history|forget|judge|generate [ARGS] [flags]",
		summary: "judge canary data, and show the canary evaluations of rollouts",
		about: `A canary evaluation compares hosts that took a change (canary) with hosts that
did not (control), check by check, and says PASS, FAIL or NONE (not enough data)
with an explanation per check. Control runs one for every canary stage of a
rollout; docs/canary.md explains the statistics.`,
		examples: []string{
			"lehr canary list payments/limits",
			"lehr canary generate latency-up-50 | lehr canary judge --input -",
		},
		subs: []subDoc{
			{path: "show", flags: []string{"wait"}, doc: doc{
				usage:   "lehr canary show ID|URI [--wait] [flags]",
				summary: "one evaluation, with every check's explanation and numbers",
				about: `Shows canary evaluation ID (NS@VERSION/NAME, as 'lehr canary list' and 'lehr
rollout status' name it), or the evaluation whose console page URI is (its
uri: control's --console-url followed by /console/canary/ID): its verdict,
and every check with its explanation and the numbers behind it. --wait
blocks until the evaluation is done.`,
				examples: []string{
					"lehr canary show payments/limits@42/stage-1",
					"lehr canary show https://lehr.example.com:8443/console/canary/payments/limits@42/stage-1",
					"lehr canary show payments/limits@42/stage-1 --wait -o json",
				},
			}},
			{path: "list", doc: doc{
				usage:   "lehr canary list [NS] [flags]",
				summary: "canary evaluations, newest last",
				about:   "Lists the canary evaluations of namespace NS (of every namespace without NS), newest last.",
				examples: []string{
					"lehr canary list",
					"lehr canary list payments/limits -o json",
				},
			}},
			{path: "history", doc: doc{
				usage:   "lehr canary history NS [flags]",
				summary: "what the judge learned of a namespace's checks from kept changes",
				about: `Shows what the canary judge learned of namespace NS's checks from the
evaluations of kept changes (a rollout that succeeded, the evaluation passing
at its last look): per check and bake, how many samples and how far 90 % of
kept changes moved. docs/canary.md, "Learning from history".`,
				examples: []string{
					"lehr canary history payments/limits",
				},
			}},
			{path: "forget", flags: []string{"check", "message"}, doc: doc{
				usage:   "lehr canary forget NS [--check NAME] [--message TEXT] [flags]",
				summary: "forget what the judge learned of a namespace (or of one check)",
				about: `Deletes what the canary judge learned of namespace NS's checks, or of check
NAME alone: later evaluations are judged as without history until 20 kept
ones are learned again. For a service whose normal behaviour changed (a new
traffic mix, new hardware). The domain's operators; audited.`,
				examples: []string{
					"lehr canary forget payments/limits",
					"lehr canary forget payments/limits --check latency --message 'new cache tier'",
				},
			}},
			{path: "judge", flags: []string{"input", "bake", "looks", "alpha"}, doc: doc{
				usage:   "lehr canary judge --input FILE [--bake N] [--looks N] [--alpha A] [-o json]",
				summary: "run the canary judge on a file of per-host series",
				about: `Runs the canary judge, here, on a file of per-host series (the format is in
docs/canary.md; - reads standard input), as control runs it for a canary
stage, and prints the verdict with every check's explanation. The exit
status is the verdict: 0 PASS, 3 FAIL, 4 NONE (not enough data), 1 an
unreadable input.`,
				examples: []string{
					"lehr canary judge --input fleet.json --bake 30",
					"lehr canary judge --input fleet.json -o json | jq -r .verdict",
					"lehr canary generate crash-loop | lehr canary judge --input -",
				},
			}},
			{path: "generate", flags: []string{"seed", "canaries", "controls", "phi"}, doc: doc{
				usage:   "lehr canary generate SCENARIO [--seed N] [--canaries N] [--controls N] [--phi P]",
				summary: "write a synthetic fleet in judge's input format",
				about: `Writes a seeded synthetic fleet in 'lehr canary judge' input format to standard
output. SCENARIO is the change the canary hosts took: ` + strings.Join(scenarioNames(), ", ") + `.`,
				examples: []string{
					"lehr canary generate latency-up-50 --canaries 2 --phi 0.8 > fleet.json",
					"lehr canary generate good --seed 7 | lehr canary judge --input -",
				},
			}},
		},
	})
	cf := addClientFlags(fs, e)
	input := fs.String("input", "", "JSON `file` of per-host series; - reads standard input")
	bake := fs.Int("bake", 0, "the planned bake in `intervals` after the change (0: judge what is there, once)")
	looks := fs.Int("looks", 0, "looks over the bake (0: 4)")
	alpha := fs.Float64("alpha", 0, "false-failure rate allowed per judgement (0: 0.01)")
	wait := fs.Bool("wait", false, "wait until the evaluation is done")
	seed := fs.Uint64("seed", 1, "random `seed`")
	canaries := fs.Int("canaries", 1, "canary hosts")
	controls := fs.Int("controls", 20, "control hosts")
	phi := fs.Float64("phi", 0.5, "autocorrelation of each host's noise, 0 to 0.95")
	check := fs.String("check", "", "forget only this check's history")
	message := fs.String("message", "", "why, for the audit log")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return usageError(e, fs, "missing subcommand: show, list, history, forget, judge or generate")
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	switch sub := pos[0]; sub {
	case "judge":
		if len(pos) > 1 {
			return usageError(e, fs, "judge takes no arguments; give the data with --input FILE")
		}
		if *input == "" {
			return usageError(e, fs, "judge needs --input FILE (or - for standard input)")
		}
		return canaryJudge(e, fs.Name(), *input, canary.Options{BakeIntervals: *bake, Looks: *looks, Alpha: *alpha}, cf.json())
	case "generate":
		if code, ok := wantArgs(e, fs, pos[1:], 1, "a SCENARIO"); !ok {
			return code
		}
		ch, ok := scenarioByName(pos[1])
		if !ok {
			return usageError(e, fs, "unknown scenario %q: want one of %s", pos[1], strings.Join(scenarioNames(), ", "))
		}
		if *canaries < 1 || *controls < 2 || !(*phi >= 0 && *phi <= 0.95) {
			return usageError(e, fs, "--canaries at least 1, --controls at least 2, --phi from 0 to 0.95")
		}
		s := scenario.DefaultSpec(ch, *canaries, *phi)
		s.Control = *controls
		if err := canary.EncodeInput(e.stdout, scenario.Generate(s, *seed)); err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
			return exitError
		}
		return exitOK
	case "history", "forget":
		if code, ok := wantArgs(e, fs, pos[1:], 1, "a namespace"); !ok {
			return code
		}
		c, ctx, done, err := cf.connect(ctx)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(pos[1]))
		}
		defer done()
		if sub == "history" {
			h, err := c.CanaryHistory(ctx, pos[1])
			if err != nil {
				return reportError(e, fs.Name(), err, cf.errCtx(pos[1]))
			}
			if cf.json() {
				return printOrFail(e, h)
			}
			writeCanaryHistory(e.stdout, h)
			return exitOK
		}
		r, err := c.ForgetCanaryHistory(ctx, pos[1], *check, *message)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(pos[1]))
		}
		if cf.json() {
			return printOrFail(e, r)
		}
		fmt.Fprintf(e.stdout, "forgot %d learned sample(s) of %s, %d bytes freed\n", r.GetSamplesForgotten(), clean(pos[1]), r.GetBytesFreed())
		return exitOK
	case "show", "list":
		if sub == "show" {
			if code, ok := wantArgs(e, fs, pos[1:], 1, "an evaluation ID (NS@VERSION/NAME)"); !ok {
				return code
			}
		} else if len(pos) > 2 {
			return usageError(e, fs, "list takes at most one namespace")
		}
		c, ctx, done, err := cf.connect(ctx)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		defer done()
		if sub == "show" {
			id, err := evaluation.IDOfURI(pos[1])
			if err != nil {
				return usageError(e, fs, "%v", err)
			}
			ev, err := c.CanaryEvaluation(ctx, id, *wait)
			if err != nil {
				return reportError(e, fs.Name(), err, cf.errCtx(""))
			}
			if cf.json() {
				return printOrFail(e, ev)
			}
			writeEvaluation(e.stdout, ev)
			return exitOK
		}
		ns := ""
		if len(pos) > 1 {
			ns = pos[1]
		}
		evs, err := c.CanaryEvaluations(ctx, ns)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.ListCanaryEvaluationsResponse{Evaluations: evs})
		}
		writeEvaluations(e.stdout, evs)
		return exitOK
	default:
		return usageError(e, fs, "unknown subcommand %q: want show, list, history, forget, judge or generate", sub)
	}
}

// canaryJudge judges the input file and prints the result; the exit
// status carries the verdict.
func canaryJudge(e *env, cmd, file string, opts canary.Options, asJSON bool) int {
	var r io.Reader = e.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return exitError
		}
		defer f.Close()
		r = f
	}
	in, err := canary.DecodeInput(r)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %s: %v\n", cmd, file, err)
		return exitError
	}
	res, err := canary.Judge(in, opts)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %s: %v\n", cmd, file, err)
		return exitError
	}
	if asJSON {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return exitError
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "%s (%d canary, %d control host(s)): %s\n", res.Verdict, len(in.Canary), len(in.Control), clean(res.Reason))
		for _, c := range res.Checks {
			fmt.Fprintf(e.stdout, "  %-5s %s: %s\n", c.Verdict, clean(c.Name), clean(c.Explanation))
			if c.Test != "" {
				fmt.Fprintf(e.stdout, "        %s; effect %.3g, statistic %.3g on %.3g df, p %.3g (needed < %.3g)\n",
					c.Test, c.Effect, c.Statistic, c.DF, c.P, c.Threshold)
			}
			if aa := c.AA; aa != nil {
				fmt.Fprintf(e.stdout, "        A/A (control against control): %s, p %.3g; %d of %d random halvings differ at p < 0.05 (about 1 expected)\n",
					aa.Verdict, aa.P, aa.AADiffer, aa.AASplits)
			}
		}
	}
	switch res.Verdict {
	case canary.Fail:
		return exitCanaryFail
	case canary.None:
		return exitCanaryNone
	}
	return exitOK
}

// scenarioName is a change's name on the command line.
func scenarioName(c scenario.Change) string {
	return [...]string{"good", "error-ratio-x5", "new-errors", "latency-up-50", "crash-loop", "latency-variance-x4", "slow-mode-30",
		"error-ratio-x2", "latency-up-20"}[c]
}

func scenarioNames() []string {
	var out []string
	for _, c := range scenario.Changes {
		out = append(out, scenarioName(c))
	}
	return out
}

func scenarioByName(s string) (scenario.Change, bool) {
	for _, c := range scenario.Changes {
		if scenarioName(c) == s {
			return c, true
		}
	}
	return 0, false
}
