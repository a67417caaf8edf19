package devtour

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// appNamespace is the namespace the tour publishes, and appSample its
// first version.
const (
	appNamespace = "demo/app"
	appSample    = `{
  "greeting": "hello from lehr",
  "limits/rps": 100,
  "limits/burst": 20,
  "features": {"dark_mode": false, "beta_search": true},
  "owners": ["team-app"],
  "demo.error_ratio": 0.01,
  "demo.latency_ms": 20
}
`
)

// policyNamespace is the demo's policy namespace: who may call the demo
// services. Every demo service decides with it for its callers, and the
// tour previews a stricter version (docs/preview.md).
const policyNamespace = "demo/access"

// policyRules are policyNamespace's first version; experimentRules the
// experiment the tour previews and commits.
const (
	policyRules = `all:
  effect: allow
  condition: "true"
  description: every caller may, unless another rule denies
blocked:
  effect: deny
  condition: principal.user == "mallory"
  sensitive: [principal.token]
`
	experimentRules = policyRules + `contractors:
  effect: deny
  condition: principal.user.startsWith("c-")
  description: contractors lose access
`
)

// landTimeout bounds the wait for a version to reach every host, for the
// agents' history and for an experiment's decisions.
const landTimeout = 60 * time.Second

// previewDecisions is how many decisions the tour waits for before it
// shows an experiment's counts.
const previewDecisions = 200

// historyIntervals is how many intervals of requests every agent keeps of
// its demo service before the first change: the "before" of canary
// analysis.
const historyIntervals = 5

// author is who the tour's changes are by (control runs in dev mode).
const author = "lehr-dev"

// Exit codes of lehr commands (Options.Lehr).
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
)

// step prints a lehr command as a user would type it and runs it against
// the tour's control as author; what names the step in an error.
func (t *tour) step(ctx context.Context, what string, args ...string) error {
	fmt.Fprintf(t.out, "\n$ lehr %s%s\n", joinArgs(args), t.controlFlag())
	if code := t.lehr(ctx, t.out, append(slices.Clone(args), "--control", t.cl.ControlAddr(), "--as", author)...); code != exitOK {
		return fmt.Errorf("%s failed (exit %d)", what, code)
	}
	return nil
}

// walk walks through the round trip, printing each command and its output
// as a user would see them, and waiting for each change to land.
func (t *tour) walk(ctx context.Context) error {
	c := t.cl.Producer()

	t.say("creating domain demo")
	if _, err := c.GetDomain(ctx, "demo"); errors.Is(err, producer.ErrNotFound) {
		if err := t.step(ctx, "create domain", "domain", "create", "demo", "--description", "created by lehr dev"); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else {
		fmt.Fprintln(t.out, "domain demo exists already")
	}

	sample := filepath.Join(t.dir, "demo-app.json")
	if err := os.WriteFile(sample, []byte(appSample), 0o644); err != nil {
		return err
	}
	t.say("publishing %s from %s:\n%s", appNamespace, sample, strings.TrimSuffix(appSample, "\n"))
	published := time.Now()
	if err := t.step(ctx, "push", "push", appNamespace, "--file", sample, "--message", "first cut from lehr dev"); err != nil {
		return err
	}
	ns, err := c.GetNamespace(ctx, appNamespace)
	if err != nil {
		return err
	}
	base := ns.GetLatestVersion()
	if err := t.waitLanded(ctx, base, published); err != nil {
		return err
	}

	if err := t.waitHistory(ctx); err != nil {
		return err
	}
	t.say("reading it back from control")
	if err := t.step(ctx, "get", "get", appNamespace); err != nil {
		return err
	}
	t.say("a good change: patching one key against version %d; it rolls out stage by stage", base)
	published = time.Now()
	if err := t.step(ctx, "patch", "patch", appNamespace, "--base", strconv.FormatUint(base, 10),
		"--set-json", "limits/rps=250", "--message", "more headroom"); err != nil {
		return err
	}
	if err := t.step(ctx, "rollout wait", "rollout", "wait", appNamespace); err != nil {
		return err
	}
	if err := t.waitLanded(ctx, base+1, published); err != nil {
		return err
	}
	if err := t.step(ctx, "rollout events", "rollout", "events", appNamespace); err != nil {
		return err
	}
	t.say("the canary analysis that let it through: the canary hosts against the others, check by check")
	if err := t.step(ctx, "canary show", "canary", "show", fmt.Sprintf("%s@%d/stage-1", appNamespace, base+1)); err != nil {
		return err
	}
	t.consoleLinks("the good change", base+1)

	t.say("a bad change: demo.error_ratio 0.2 — the services accept it, then fail a fifth of their requests; the canary analysis catches it")
	bad := base + 2
	published = time.Now()
	fmt.Fprintf(t.out, "\n$ lehr patch %s --base %d --set-json demo.error_ratio=0.2%s\n", appNamespace, base+1, t.controlFlag())
	if code := t.lehr(ctx, t.out, "patch", appNamespace, "--base", strconv.FormatUint(base+1, 10), "--set-json", "demo.error_ratio=0.2",
		"--message", "try a higher error ratio", "--control", t.cl.ControlAddr(), "--as", author); code != exitOK {
		return fmt.Errorf("patch failed (exit %d)", code)
	}
	fmt.Fprintf(t.out, "\n$ lehr rollout wait %s%s\n", appNamespace, t.controlFlag())
	if code := t.lehr(ctx, t.out, "rollout", "wait", appNamespace, "--control", t.cl.ControlAddr()); code != exitFailed {
		return fmt.Errorf("the bad change's rollout did not fail (exit %d)", code)
	}
	r, err := c.GetRollout(ctx, appNamespace, bad)
	if err != nil {
		return err
	}
	if err := t.waitLanded(ctx, r.GetRollbackVersion(), published); err != nil {
		return err
	}
	var saw []string
	for _, zh := range r.GetCanaryHosts() {
		saw = append(saw, zh.GetHosts()...)
	}
	t.say("version %d reached only the canary hosts (%s) and was rolled back: every host now runs version %d, version %d's content",
		bad, strings.Join(saw, ", "), r.GetRollbackVersion(), base+1)
	if err := t.step(ctx, "rollout events", "rollout", "events", appNamespace); err != nil {
		return err
	}
	if err := t.step(ctx, "canary show", "canary", "show", fmt.Sprintf("%s@%d/stage-1", appNamespace, bad)); err != nil {
		return err
	}
	t.consoleLinks("the bad change", bad)
	if err := t.previewPolicy(ctx); err != nil {
		return err
	}
	t.say("what changed, and the history")
	if err := t.step(ctx, "diff", "diff", appNamespace, strconv.FormatUint(base, 10), strconv.FormatUint(base+1, 10)); err != nil {
		return err
	}
	if err := t.step(ctx, "history", "history", appNamespace, "--limit", "5"); err != nil {
		return err
	}
	t.say("what %s's distributor reports (agents per version, every second)", t.zones[0])
	t.waitReported(ctx, t.zones[0], r.GetRollbackVersion())
	if err := t.step(ctx, "zone status", "zones", "status", t.zones[0]); err != nil {
		return err
	}
	fmt.Fprintln(t.out)
	return nil
}

// previewPolicy is the policy-preview part of the tour (docs/preview.md):
// the demo services decide who may call them with policyNamespace; a
// stricter version is previewed on their traffic as an experiment, its
// counts shown, and committed.
func (t *tour) previewPolicy(ctx context.Context) error {
	c := t.cl.Producer()
	live := filepath.Join(t.dir, "demo-access.yaml")
	exp := filepath.Join(t.dir, "demo-access-experiment.yaml")
	if err := os.WriteFile(live, []byte(policyRules), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(exp, []byte(experimentRules), 0o644); err != nil {
		return err
	}
	t.say("policy preview: every demo service decides with %s who may call it (%d decisions a second per host)", policyNamespace, int(time.Second/decisionInterval))
	if ns, err := c.GetNamespace(ctx, policyNamespace); err == nil {
		fmt.Fprintf(t.out, "%s exists already at version %d\n", policyNamespace, ns.GetLatestVersion())
	} else if err := t.step(ctx, "push policy", "push", policyNamespace, "--kind", "policy", "--file", live, "--message", "who may call the demo"); err != nil {
		return err
	}
	t.say("a stricter version, previewed first: contractors (c-*) would lose access")
	const id = "no-contractors"
	if _, err := c.Experiment(ctx, policyNamespace, id); err == nil {
		if _, err := c.DeleteExperiment(ctx, policyNamespace, id, ""); err != nil {
			return err
		}
	}
	if err := t.step(ctx, "experiment create", "policy", "experiment", "create", policyNamespace, id, "--file", exp); err != nil {
		return err
	}
	if err := t.step(ctx, "experiment start", "policy", "experiment", "start", policyNamespace, id); err != nil {
		return err
	}
	t.say("the hosts evaluate it beside the live rules and count; waiting for %d decisions…", previewDecisions)
	x, err := c.Experiment(ctx, policyNamespace, id)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, landTimeout)
	defer cancel()
	for {
		counts, err := c.ExperimentCounts(wctx, policyNamespace, id)
		if err != nil {
			return err
		}
		var n uint64
		for _, tl := range counts.GetTotals() {
			d, _ := preview.Decisions(tl)
			n += d
		}
		if n >= previewDecisions {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the hosts counted %d decisions of %s in %s: %w", n, id, landTimeout, wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := t.step(ctx, "experiment counts", "policy", "experiment", "counts", policyNamespace, id); err != nil {
		return err
	}
	if u := ConsoleURL(t.cl.ControlHTTPAddr()); u != "" {
		t.say("the same counts, with the gate of the commit below, in the console: %sexperiments/%s?min_evaluations=%d&max_disagreement=0.3", u, policyNamespace, previewDecisions)
	}
	t.say("a quarter of the callers would be denied, as intended: commit it with the etag reviewed (%s); it rolls out like any change", x.GetEtag())
	if err := t.step(ctx, "experiment commit", "policy", "experiment", "commit", policyNamespace, id, "--etag", x.GetEtag(),
		"--min-evaluations", strconv.Itoa(previewDecisions), "--max-disagreement", "0.3", "--message", "no contractors"); err != nil {
		return err
	}
	return t.step(ctx, "rollout wait", "rollout", "wait", policyNamespace)
}

// waitLanded waits until every host's demo service has version v of
// appNamespace, published at since, and says so.
func (t *tour) waitLanded(ctx context.Context, v uint64, since time.Time) error {
	t.say("waiting for %s version %d to reach the demo service on every host…", appNamespace, v)
	ctx, cancel := context.WithTimeout(ctx, landTimeout)
	defer cancel()
	for _, s := range t.services {
		if err := s.wait(ctx, v); err != nil {
			return fmt.Errorf("%s version %d did not land everywhere within %v: %w (rerun with --log-level info to see why)",
				appNamespace, v, landTimeout, err)
		}
	}
	t.say("%s version %d landed on every host %s after it was published", appNamespace, v, time.Since(since).Round(time.Millisecond))
	return nil
}

// waitHistory waits until every agent keeps historyIntervals intervals of
// its demo service's requests.
func (t *tour) waitHistory(ctx context.Context) error {
	t.say("letting every agent keep %d seconds of its demo service's metrics: canary analysis compares each host with itself before a change", historyIntervals)
	ctx, cancel := context.WithTimeout(ctx, landTimeout)
	defer cancel()
	for _, z := range t.zones {
		for _, a := range t.cl.Agents(z) {
			for {
				resp, err := a.Local().Signals(ctx, &lehrpb.AgentSignalsRequest{Namespace: appNamespace})
				if err == nil && countPositive(resp.GetSignals(), "requests") >= historyIntervals {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("agent %s kept fewer than %d intervals of requests within %v: %w", a.HostID, historyIntervals, landTimeout, ctx.Err())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// countPositive counts the intervals of the series called name above zero.
func countPositive(s *lehrpb.NamespaceSignals, name string) int {
	n := 0
	for _, sr := range s.GetSeries() {
		if sr.GetName() == name {
			for _, v := range sr.GetValues() {
				if v > 0 {
					n++
				}
			}
		}
	}
	return n
}

// waitReported waits, for a few seconds at most, until zone's distributors
// report an agent at version v of appNamespace, so the status shown
// matches what just landed. Not getting there is not an error: the status
// is shown as it is.
func (t *tour) waitReported(ctx context.Context, zone string, v uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := t.cl.Producer().RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zone})
		if err != nil {
			return
		}
		for _, vc := range st.GetVersions() {
			if vc.GetNamespace() == appNamespace && vc.GetVersion() == v && vc.GetAgents() > 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// joinArgs quotes arguments for display.
func joinArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'{}$*?") {
			a = strconv.Quote(a)
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// consoleLinks prints where the console shows version v's rollout and its
// first stage's canary evaluation (with the plot of every check), when
// control serves the console.
func (t *tour) consoleLinks(what string, v uint64) {
	u := ConsoleURL(t.cl.ControlHTTPAddr())
	if u == "" {
		return
	}
	t.say("%s in the console: its rollout %srollouts/%s/%d, its canary evaluation with a plot per check %scanary/%s@%d/stage-1",
		what, u, appNamespace, v, u, appNamespace, v)
}
