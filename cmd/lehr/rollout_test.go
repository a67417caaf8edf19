package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func TestRolloutPolicyCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	c.ok("zones", "create", "zone-b")
	code, out, errOut := c.run("a: 1\n", "push", "pay/limits", "--file", "-")
	if code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}

	mustContain(t, "get before any", c.ok("rollout", "policy", "get", "pay/limits"),
		"pay/limits has no policy of its own", "in effect: control's built-in default",
		"canary: 1 host per zone in every zone", "the next 1 zone in name order", "every zone not yet reached")

	policy := `stages:
  - name: canary
    canary: {percent: 5, zones: [zone-b]}
    bake: 90s
    max_error_ratio: 0.01
  - name: all
    zones: {}
    apply_deadline: 1h30m
freeze_windows:
  - reason: weekend
    weekly: {days: [fri, sat], at: "16:00", length: 40h, time_zone: Europe/Berlin}
`
	code, out, errOut = c.run(policy, "rollout", "policy", "set", "pay", "-f", "-", "-m", "slower canary")
	if code != exitOK {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "set", out, "rollout policy of pay at generation 1", "canary: 5% of hosts in zones zone-b", "1m30s", "1h30m0s", "0.01",
		"frozen every fri, sat at 16:00 Europe/Berlin for 40h0m0s: weekend")
	mustContain(t, "get under the domain's", c.ok("rollout", "policy", "get", "pay/limits"), "in effect: the domain's policy", "canary: 5% of hosts in zones zone-b")

	code, out, errOut = c.run("global_blast: true\n", "rollout", "policy", "set", "pay/limits", "-f", "-", "-m", "incident 42")
	if code != exitOK {
		t.Fatalf("policy set global blast: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "get override", c.ok("rollout", "policy", "get", "pay/limits"), "has its own policy, generation 1", "incident 42", "global blast: every zone at once")
	mustContain(t, "delete", c.ok("rollout", "policy", "delete", "pay/limits", "-m", "incident over"), "deleted the rollout policy of pay/limits (generation 2)")
	hist := c.ok("rollout", "policy", "history", "pay/limits")
	mustContain(t, "history", hist, "deleted", "incident over", "global blast", "incident 42", "tester")

	var r lehrpb.GetRolloutPolicyResponse
	if err := parseJSON(c.ok("rollout", "policy", "get", "pay", "-o", "json"), &r); err != nil {
		t.Fatalf("get -o json does not parse: %v", err)
	}
	if r.GetStored().GetGeneration() != 1 || r.GetEffective().GetStages()[0].GetBake().AsDuration() != 90*time.Second {
		t.Errorf("get -o json = %v; want generation 1 with a 90 s bake", &r)
	}

	// Bad policies: the field at fault, and nothing changes.
	for _, tc := range []struct{ name, in, want string }{
		{"unknown zone", "stages: [{zones: {zones: [zone-x]}}]\n", `stages[0].zones.zones[0]`},
		{"percent over 100", "stages: [{canary: {percent: 120}}]\n", "at most 100"},
		{"not a duration", "stages: [{canary: {hosts: 1}, bake: soon}]\n", `stages[0].bake: "soon" is not a duration`},
		{"unknown field", "stages: [{canary: {hosts: 1}, bak: 10m}]\n", `unknown field "bak"`},
		{"empty", "", "empty"},
		{"weekly bad day", "stages: [{zones: {}}]\nfreeze_windows: [{weekly: {days: [fry], at: '16:00', length: 2h}}]\n", `field: policy.freeze_windows[0].weekly.days[0]`},
		{"weekly bad length", "stages: [{zones: {}}]\nfreeze_windows: [{weekly: {days: [fri], at: '16:00', length: two hours}}]\n", `freeze_windows[0].weekly.length: "two hours" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := c.run(tc.in, "rollout", "policy", "set", "pay", "-f", "-")
			if code != exitError || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, errOut, exitError, tc.want)
			}
		})
	}
	mustContain(t, "unchanged", c.ok("rollout", "policy", "get", "pay"), "generation 1")
}

// The rollout commands against a control running the strategist, with a
// zone no distributor serves: the rollout waits in its first stage, can be
// paused, shows why, and is aborted with a rollback.
func TestRolloutCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	for _, in := range []string{"limit: 10\n", "limit: 20\n"} {
		if code, out, errOut := c.run(in, "push", "pay/limits", "--file", "-"); code != exitOK {
			t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
		}
	}
	wait.For(t, "the rollout of version 2 to wait for samples", func() bool {
		code, out, _ := c.run("", "rollout", "status", "pay/limits")
		return code == exitOK && strings.Contains(out, "waiting for the distributors of zone-a to sample canary hosts")
	})
	mustContain(t, "status", c.ok("rollout", "status", "pay/limits"),
		"rollout pay/limits@2: RUNNING", "version   2 (from base 1)", "policy    built-in", "▶ 1. canary", "  2. first zone")
	mustContain(t, "list", c.ok("rollout", "list", "--active"), "pay/limits@2", "running", "1/3 canary")

	mustContain(t, "pause", c.ok("rollout", "pause", "pay/limits", "-m", "looking into it"), "asked control to pause rollout pay/limits@2")
	wait.For(t, "the rollout paused", func() bool {
		_, out, _ := c.run("", "rollout", "status", "pay/limits")
		return strings.Contains(out, "PAUSED") && strings.Contains(out, "paused by tester: looking into it")
	})
	c.ok("rollout", "resume", "pay/limits")
	wait.For(t, "the rollout resumed", func() bool {
		_, out, _ := c.run("", "rollout", "status", "pay/limits")
		return strings.Contains(out, "RUNNING")
	})
	c.ok("rollout", "abort", "pay/limits", "-m", "not today")
	var r lehrpb.Rollout
	wait.For(t, "the rollout aborted", func() bool {
		code, out, _ := c.run("", "rollout", "status", "pay/limits", "-o", "json")
		return code == exitOK && parseJSON(out, &r) == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_ABORTED
	})
	if r.GetRollbackVersion() != 3 {
		t.Errorf("aborted rollout: rollback version %d, want 3 (version 1's content again)", r.GetRollbackVersion())
	}
	mustContain(t, "events", c.ok("rollout", "events", "pay/limits"), "started", "stage", "paused", "tester", "looking into it", "resumed", "aborted", "not today", "rolled back")
	mustContain(t, "get after the rollback", c.ok("get", "pay/limits", "--key", "limit", "--raw"), "10")
	if code, _, errOut := c.run("", "rollout", "resume", "pay/limits"); code != exitError || !strings.Contains(errOut, "only a running or paused rollout") {
		t.Errorf("resume of an aborted rollout: exit %d, %q; want exit 1 saying it has ended", code, errOut)
	}
	if code, _, errOut := c.run("", "rollout", "status", "pay/nothing"); code != exitError || !strings.Contains(errOut, "has no rollout") {
		t.Errorf("status of a namespace without rollouts: exit %d, %q", code, errOut)
	}
}

// lehr rollout wait answers at once, with exit status 3, when there is
// nothing to wait for — a namespace's first version, a rollback, a
// version published while no zone exists — and honours --timeout, before
// or after the command, while a rollout runs (issue 31). A global blast's
// rollout starts at publish: there is one to wait for.
func TestRolloutWaitAnswers(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	push := func(ns, in string) {
		t.Helper()
		if code, out, errOut := c.run(in, "push", ns, "--file", "-"); code != exitOK {
			t.Fatalf("push %s: exit %d\n%s%s", ns, code, out, errOut)
		}
	}
	waitNone := func(what string, args []string, wants ...string) {
		t.Helper()
		start := time.Now()
		code, out, errOut := c.run("", args...)
		if code != exitNoRollout || time.Since(start) > 10*time.Second {
			t.Fatalf("%s: lehr %s: exit %d after %v, want %d at once\n%s%s", what, strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), exitNoRollout, out, errOut)
		}
		mustContain(t, what, errOut, append([]string{"nothing to wait for"}, wants...)...)
	}
	c.ok("domain", "create", "pay")
	push("pay/early", "limit: 1\n")
	push("pay/early", "limit: 2\n")
	waitNone("no zone", []string{"rollout", "wait", "pay/early"}, "pay/early version 2 has no rollout", "no zone is registered")

	c.ok("zones", "create", "zone-a")
	push("pay/limits", "limit: 10\n")
	waitNone("a first version", []string{"rollout", "wait", "pay/limits"}, "pay/limits version 1 has no rollout", "every zone's goal is at version 1 already")

	// Version 2 rolls out and waits for canary samples no distributor
	// sends: --timeout ends the wait, before or after the command.
	push("pay/limits", "limit: 20\n")
	for _, args := range [][]string{{"rollout", "wait", "pay/limits", "--timeout", "1s"}, {"--timeout", "1s", "rollout", "wait", "pay/limits"}} {
		start := time.Now()
		code, _, errOut := c.run("", args...)
		if code != exitError || time.Since(start) > 15*time.Second {
			t.Fatalf("lehr %s: exit %d after %v, want %d within seconds\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), exitError, errOut)
		}
		mustContain(t, "timed out wait", errOut, "--timeout 1s passed; pay/limits version 2", "('lehr rollout status pay/limits')")
	}

	// Aborted, the strategist rolls back with version 3, which has no
	// rollout; waiting on version 2 says how it ended.
	c.ok("rollout", "abort", "pay/limits")
	if code, _, errOut := c.run("", "rollout", "wait", "pay/limits", "--version", "2", "--timeout", "30s"); code != exitError {
		t.Errorf("wait for the aborted rollout: exit %d, want %d\n%s", code, exitError, errOut)
	}
	waitNone("the strategist's rollback", []string{"rollout", "wait", "pay/limits", "--timeout", "30s"}, "pay/limits version 3 has no rollout")
	c.ok("rollback", "pay/limits", "--to", "2")
	waitNone("an operator's rollback", []string{"rollout", "wait", "pay/limits"}, "pay/limits version 4 has no rollout", "every zone's goal is at version 4 already")

	// A global blast starts its rollout in the publish: wait finds it.
	if code, out, errOut := c.run("global_blast: true\n", "rollout", "policy", "set", "pay/limits", "-f", "-"); code != exitOK {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, errOut)
	}
	push("pay/limits", "limit: 30\n")
	code, out, errOut := c.run("", "rollout", "wait", "pay/limits", "--timeout", "30s")
	if code != exitOK {
		t.Fatalf("wait after a global blast: exit %d, want its rollout waited for, and succeeded\n%s%s", code, out, errOut)
	}
	mustContain(t, "wait after a global blast", out, "succeeded: every zone holds version 5")
}

// A freeze window holds a new rollout before its first stage, says until
// when, and lets it go once closed.
func TestRolloutWaitsForFreezeWindow(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	end := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	policy := fmt.Sprintf("stages: [{zones: {}}]\nfreeze_windows: [{start: %q, end: %q, reason: launch day}]\n",
		time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), end)
	if code, out, errOut := c.run(policy, "rollout", "policy", "set", "pay", "-f", "-"); code != exitOK {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "policy get", c.ok("rollout", "policy", "get", "pay"), "frozen ", "launch day")
	for _, in := range []string{"limit: 10\n", "limit: 20\n"} {
		if code, out, errOut := c.run(in, "push", "pay/limits", "--file", "-"); code != exitOK {
			t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
		}
	}
	wait.For(t, "the rollout frozen", func() bool {
		_, out, _ := c.run("", "rollout", "status", "pay/limits")
		return strings.Contains(out, "frozen until") && strings.Contains(out, "(launch day, ")
	})
	wait.For(t, "the rollout done once the window closed", func() bool {
		_, out, _ := c.run("", "rollout", "status", "pay/limits")
		return strings.Contains(out, "SUCCEEDED")
	})
	var evs lehrpb.ListRolloutEventsResponse
	if err := parseJSON(c.ok("rollout", "events", "pay/limits", "-o", "json"), &evs); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs.GetEvents() {
		kinds = append(kinds, ev.GetKind())
	}
	// zone-a has no distributor: the stage skips it, saying so.
	if want := []string{"started", "frozen", "stage", "skipped", "applied", "succeeded"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
	for _, ev := range evs.GetEvents() {
		if ev.GetKind() == "stage" {
			if endT, _ := time.Parse(time.RFC3339Nano, end); ev.GetTime().AsTime().Before(endT) {
				t.Errorf("stage entered at %v, before the freeze ended at %v", ev.GetTime().AsTime(), endT)
			}
		}
	}
}

// With max_concurrent 1, a domain's second rollout waits, queued, until the
// first ends.
func TestRolloutsQueueBehindTheDomainLimit(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	if code, out, errOut := c.run("max_concurrent: 1\nstages: [{zones: {}, bake: 2s}]\n", "rollout", "policy", "set", "pay", "-f", "-"); code != exitOK {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, errOut)
	}
	for _, ns := range []string{"pay/a", "pay/b"} {
		for _, in := range []string{"k: 1\n", "k: 2\n"} {
			if code, out, errOut := c.run(in, "push", ns, "--file", "-"); code != exitOK {
				t.Fatalf("push %s: exit %d\n%s%s", ns, code, out, errOut)
			}
		}
	}
	// lehr rollout wait follows the latest version's rollout to its end.
	if code, out, errOut := c.run("", "rollout", "wait", "pay/a"); code != exitOK || !strings.Contains(out, "succeeded: every zone holds version 2") {
		t.Errorf("rollout wait pay/a: exit %d\n%s%s", code, out, errOut)
	}
	// pay/a was published first: it went; pay/b waited for it.
	wait.For(t, "both done", func() bool {
		_, a, _ := c.run("", "rollout", "status", "pay/a")
		_, b, _ := c.run("", "rollout", "status", "pay/b")
		return strings.Contains(a, "SUCCEEDED") && strings.Contains(b, "SUCCEEDED")
	})
	ra := new(lehrpb.Rollout)
	_ = parseJSON(c.ok("rollout", "status", "pay/a", "-o", "json"), ra)
	evs := new(lehrpb.ListRolloutEventsResponse)
	_ = parseJSON(c.ok("rollout", "events", "pay/b", "-o", "json"), evs)
	var kinds []string
	for _, ev := range evs.GetEvents() {
		kinds = append(kinds, ev.GetKind())
		if ev.GetKind() == "stage" && ev.GetTime().AsTime().Before(ra.GetUpdateTime().AsTime()) {
			t.Errorf("pay/b entered its stage at %v, before pay/a ended at %v", ev.GetTime().AsTime(), ra.GetUpdateTime().AsTime())
		}
	}
	if want := []string{"started", "queued", "stage", "skipped", "applied", "succeeded"}; !slices.Equal(kinds, want) {
		t.Errorf("pay/b events %v, want %v", kinds, want)
	}
	if q := evs.GetEvents()[min(1, len(evs.GetEvents())-1)].GetMessage(); !strings.Contains(q, "queued: 1 rollout(s) of domain pay are in a stage (pay/a@2)") {
		t.Errorf("queued event %q does not name pay/a@2", q)
	}
}

// lehr rollout status shows the checks a committed policy change is
// expected to move (a committed experiment's deny share and
// disagreement).
func TestWriteRolloutExpectedChecks(t *testing.T) {
	r := &lehrpb.Rollout{Id: "shop/fw@2", Namespace: "shop/fw", Version: 2, BaseVersion: 1, State: lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED,
		Stages: []string{"canary", "all"}, Stage: 1, Reason: "every zone holds version 2",
		ExpectedChecks: []*lehrpb.CanaryCheck{
			{Name: "policy deny ratio", Expected: 0.05, Tolerance: 0.25},
			{Name: "policy disagreement", Expected: 0.5, Tolerance: 0.25},
		}}
	var b strings.Builder
	writeRollout(&b, r)
	mustContain(t, "rollout status", b.String(),
		"expects   policy deny ratio: canary hosts to move by +0.05 against the control hosts (tolerance 0.25)",
		"expects   policy disagreement: canary hosts to move by +0.5")
}

// Dependency order from the command line: pay/limits' policy names
// pay/flags in after, set from YAML; published together, pay/limits waits
// (a "waiting" event naming pay/flags) and enters the zone only once
// pay/flags' goal holds the new content there, past its canary's bake.
func TestRolloutAfterFromTheCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	for _, ns := range []string{"pay/flags", "pay/limits"} {
		if code, out, errOut := c.run("k: 1\n", "push", ns, "--file", "-"); code != exitOK {
			t.Fatalf("push %s: exit %d\n%s%s", ns, code, out, errOut)
		}
	}
	for scope, policy := range map[string]string{
		"pay/flags":  "stages: [{name: canary, canary: {hosts: 1}, bake: 3s, apply_deadline: 2s}, {name: all, zones: {}}]\n",
		"pay/limits": "after: [pay/flags]\nstages: [{name: all, zones: {}}]\n",
	} {
		if code, out, errOut := c.run(policy, "rollout", "policy", "set", scope, "-f", "-"); code != exitOK {
			t.Fatalf("policy set %s: exit %d\n%s%s", scope, code, out, errOut)
		}
	}
	if out := c.ok("rollout", "policy", "get", "pay/limits"); !strings.Contains(out, "after pay/flags: each stage waits") {
		t.Errorf("policy get pay/limits does not show after:\n%s", out)
	}
	for _, ns := range []string{"pay/flags", "pay/limits"} {
		if code, out, errOut := c.run("k: 2\n", "push", ns, "--file", "-"); code != exitOK {
			t.Fatalf("push %s: exit %d\n%s%s", ns, code, out, errOut)
		}
	}
	if code, out, errOut := c.run("", "rollout", "wait", "pay/limits"); code != exitOK {
		t.Fatalf("rollout wait pay/limits: exit %d\n%s%s", code, out, errOut)
	}
	if out := c.ok("rollout", "status", "pay/limits"); !strings.Contains(out, "after     pay/flags: each stage waits until its goal holds version 2's content") {
		t.Errorf("rollout status pay/limits does not show what it requires:\n%s", out)
	}
	stageAt := func(ns, name string) (time.Time, []string) {
		evs := new(lehrpb.ListRolloutEventsResponse)
		_ = parseJSON(c.ok("rollout", "events", ns, "-o", "json"), evs)
		var at time.Time
		var kinds []string
		for _, ev := range evs.GetEvents() {
			kinds = append(kinds, ev.GetKind())
			if ev.GetKind() == "stage" && strings.Contains(ev.GetMessage(), `"`+name+`"`) {
				at = ev.GetTime().AsTime()
			}
		}
		return at, kinds
	}
	flagsAll, _ := stageAt("pay/flags", "all")
	limitsAll, kinds := stageAt("pay/limits", "all")
	if flagsAll.IsZero() || limitsAll.Before(flagsAll) {
		t.Errorf("pay/limits entered its stage at %v, pay/flags its stage \"all\" at %v; want limits after flags", limitsAll, flagsAll)
	}
	if !slices.Contains(kinds, "waiting") {
		t.Errorf("pay/limits' events %v; want it to have waited for pay/flags", kinds)
	}
}

// The policy file 'lehr rollout policy set --help' shows parses, every
// part of it.
func TestPolicySetHelpParses(t *testing.T) {
	code, help, stderr := runCLI(t, nil, "rollout", "policy", "set", "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d: %s", code, stderr)
	}
	_, file, ok := strings.Cut(help, "1h30m:\n\n")
	if file, _, ok2 := strings.Cut(file, "\n\nFor an emergency"); ok && ok2 {
		var b strings.Builder
		for l := range strings.Lines(file) {
			b.WriteString(strings.TrimPrefix(l, "  "))
		}
		p, err := parsePolicy([]byte(b.String()))
		if err != nil {
			t.Fatalf("the help's policy: %v\n%s", err, b.String())
		}
		a := p.GetStages()[0].GetAnalysis()
		if len(p.GetStages()) != 3 || len(a.GetChecks()) != 2 || a.GetChecks()[1].GetQuery().GetValue() == "" || a.GetHostLabel() != "instance" ||
			len(p.GetAfter()) != 1 || len(p.GetFreezeWindows()) != 2 || len(p.GetMonitoring().GetAlerts()) != 1 {
			t.Errorf("the help's policy parsed as %v; want every part of it", p)
		}
		return
	}
	t.Fatalf("no policy file in the help:\n%s", help)
}

// A policy file's monitoring check, as 'lehr rollout policy set --help'
// writes it, parses, and 'policy get' shows it.
func TestPolicyMonitoringCheck(t *testing.T) {
	p, err := parsePolicy([]byte(`
stages:
  - {name: canary, canary: {hosts: 1}, bake: 10m}
monitoring:
  alerts:
    - alert: HighErrorRate
      matchers: ['service="checkout"', 'severity=~"page|critical"']
      zone_label: zone
    - {alert: Overloaded}
  on_source_error: proceed
`))
	if err != nil {
		t.Fatal(err)
	}
	m := p.GetMonitoring()
	if len(m.GetAlerts()) != 2 || m.GetAlerts()[0].GetZoneLabel() != "zone" || len(m.GetAlerts()[0].GetMatchers()) != 2 || m.GetOnSourceError() != "proceed" {
		t.Fatalf("parsed monitoring check: %v", m)
	}
	var b strings.Builder
	writePolicy(&b, p)
	for _, want := range []string{
		"monitoring check: no stage is entered while one of these alerts fires where it moves; if the alerts source cannot be read: proceed",
		`alert HighErrorRate{service="checkout",severity=~"page|critical"} holds the stages that move the zone its zone label names`,
		"alert Overloaded holds every stage",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("policy get lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := parsePolicy([]byte("monitoring: {alerts: [{alertname: X}]}")); err == nil || !strings.Contains(err.Error(), "alertname") {
		t.Errorf("an unknown field of an alert: %v; want an error naming it", err)
	}
}

// lehr rollout status says what holds a rollout under its monitoring
// check, beside the reason; -o json carries the hold as stored.
func TestWriteRolloutAlertHold(t *testing.T) {
	since := timestamppb.New(time.Date(2030, 1, 1, 21, 40, 3, 0, time.UTC))
	r := &lehrpb.Rollout{Id: "shop/fw@2", Namespace: "shop/fw", Version: 2, BaseVersion: 1, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING,
		Stages: []string{"canary", "rest"}, Stage: 0,
		Reason: `stage "canary" passed; stage "rest" waits: alert HighErrorRate{service="checkout",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC in zone-b; it goes on by itself once it clears`,
		AlertHold: &lehrpb.AlertHold{Stage: 1, AlertCount: 1, StartTime: since,
			Alerts: []*lehrpb.FiringAlert{{Labels: map[string]string{"alertname": "HighErrorRate", "service": "checkout", "zone": "zone-b"}, ActiveTime: since}}}}
	var b strings.Builder
	writeRollout(&b, r)
	mustContain(t, "rollout status", b.String(),
		`held by   HighErrorRate{service="checkout",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC`,
		`stage "rest" waits: alert HighErrorRate{service="checkout",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC in zone-b`)
	js, err := marshalJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "rollout status -o json", string(js), `"alert_hold": {`, `"active_time": "2030-01-01T21:40:03Z"`, `"alertname": "HighErrorRate"`)
}
