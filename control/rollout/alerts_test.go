package rollout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestMatcher(t *testing.T) {
	labels := map[string]string{"alertname": "HighErrorRate", "service": "checkout", "zone": "zone-b", "severity": "page"}
	tests := []struct {
		matcher string
		want    bool
	}{
		{`service="checkout"`, true},
		{`service=checkout`, true},
		{` service = "checkout" `, true},
		{`service="search"`, false},
		{`service!="search"`, true},
		{`service!=checkout`, false},
		{`severity=~"page|critical"`, true},
		{`severity=~"pag"`, false}, // anchored, as in Prometheus
		{`severity!~"info|warning"`, true},
		{`zone=~"zone-.*"`, true},
		{`team=""`, true}, // an absent label is ""
		{`team!=""`, false},
		{`service="check\"out"`, false},
	}
	for _, tc := range tests {
		m, err := parseMatcher(tc.matcher)
		if err != nil {
			t.Errorf("parseMatcher(%s): %v", tc.matcher, err)
			continue
		}
		if got := m.matches(labels); got != tc.want {
			t.Errorf("%s matches %v: %v, want %v", tc.matcher, labels, got, tc.want)
		}
	}
	for _, bad := range []string{"service", `="x"`, `service<"x"`, `service=~"(("`, `service="x`, `1a="x"`} {
		if _, err := parseMatcher(bad); err == nil {
			t.Errorf("parseMatcher(%s): nil error, want one", bad)
		}
	}
}

func firing(since time.Time, labels ...string) Alert {
	a := Alert{Labels: map[string]string{}, ActiveAt: since}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		a.Labels[k] = v
	}
	return a
}

// TestCheckStage: what the monitoring check says of a stage, from the
// alerts the source reports.
func TestCheckStage(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 21, 40, 3, 0, time.UTC)
	check := &lehrpb.MonitoringCheck{Alerts: []*lehrpb.AlertSelector{
		{Alert: "HighErrorRate", Matchers: []string{`service="checkout"`}, ZoneLabel: "zone"},
		{Alert: "Overloaded", Matchers: []string{`severity=~"page|critical"`}},
	}}
	proceed := &lehrpb.MonitoringCheck{Alerts: check.GetAlerts(), OnSourceError: OnSourceErrorProceed}
	stageA := Stage{Name: "first zone", Targets: []Target{{Zone: "zone-a", Percent: 100}}}
	stageB := Stage{Name: "rest", Targets: []Target{{Zone: "zone-b", Percent: 100}}}
	src := "http://prometheus:9090"
	hre := firing(t0, "alertname=HighErrorRate", "service=checkout", "zone=zone-b")
	many := Alerts{Source: src}
	for i := range 12 {
		many.Firing = append(many.Firing, firing(t0.Add(time.Duration(12-i)*time.Second), "alertname=Overloaded", "severity=page", fmt.Sprintf("instance=h%02d", i)))
	}
	tests := []struct {
		name   string
		check  *lehrpb.MonitoringCheck
		stage  Stage
		alerts Alerts
		// want is the hold described ("" for none); unchecked the note
		// of a stage that goes on unchecked.
		want, unchecked string
		count           int
	}{
		{name: "nothing fires", check: check, stage: stageB, alerts: Alerts{Source: src}},
		{name: "another service's alert", check: check, stage: stageB, alerts: Alerts{Source: src, Firing: []Alert{firing(t0, "alertname=HighErrorRate", "service=search", "zone=zone-b")}}},
		{name: "an alert the policy does not name", check: check, stage: stageB, alerts: Alerts{Source: src, Firing: []Alert{firing(t0, "alertname=DiskFull", "service=checkout")}}},
		{name: "in the stage's zone", check: check, stage: stageB, alerts: Alerts{Source: src, Firing: []Alert{hre}},
			want: `alert HighErrorRate{service="checkout",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC in zone-b`, count: 1},
		{name: "in a zone the stage does not move", check: check, stage: stageA, alerts: Alerts{Source: src, Firing: []Alert{hre}}},
		{name: "without its zone label: everywhere", check: check, stage: stageA, alerts: Alerts{Source: src, Firing: []Alert{firing(t0, "alertname=HighErrorRate", "service=checkout")}},
			want: `alert HighErrorRate{service="checkout"} firing since 2030-01-01 21:40:03 UTC (no zone label: everywhere)`, count: 1},
		{name: "no zone label named: everywhere", check: check, stage: stageA, alerts: Alerts{Source: src, Firing: []Alert{firing(t0, "alertname=Overloaded", "severity=critical", "zone=zone-b")}},
			want: `alert Overloaded{severity="critical",zone="zone-b"} firing since 2030-01-01 21:40:03 UTC`, count: 1},
		{name: "regex matcher not matched", check: check, stage: stageA, alerts: Alerts{Source: src, Firing: []Alert{firing(t0, "alertname=Overloaded", "severity=warning")}}},
		{name: "many, oldest first", check: check, stage: stageA, alerts: many,
			want: `alerts Overloaded{instance="h11",severity="page"} firing since 2030-01-01 21:40:04 UTC; Overloaded{instance="h10",severity="page"} firing since 2030-01-01 21:40:05 UTC; ` +
				`Overloaded{instance="h09",severity="page"} firing since 2030-01-01 21:40:06 UTC; and 9 more`, count: 12},
		{name: "source unreachable, wait", check: check, stage: stageA, alerts: Alerts{Source: src, Err: errors.New("connection refused")},
			want: "the alerts source http://prometheus:9090 could not be read: connection refused, and the policy's monitoring check says wait on a source error"},
		{name: "source unreachable, proceed", check: proceed, stage: stageA, alerts: Alerts{Source: src, Err: errors.New("connection refused")},
			unchecked: "the alerts source http://prometheus:9090 could not be read: connection refused"},
		{name: "no source configured", check: check, stage: stageA, alerts: Alerts{},
			want: "the alerts source could not be read: control has no alerts source (lehr control --alerts-url), and the policy's monitoring check says wait on a source error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &lehrpb.RolloutPolicy{Monitoring: tc.check}
			m := checkStage(p, tc.stage, 2, func() Alerts { return tc.alerts })
			got := ""
			if m.hold != nil {
				got = describeHold(p, m.hold)
				if m.hold.GetStage() != 2 || int(m.hold.GetAlertCount()) != tc.count || len(m.hold.GetAlerts()) != min(tc.count, MaxHeldAlerts) {
					t.Errorf("hold: stage %d, %d alert(s) recorded of %d; want stage 2, %d of %d", m.hold.GetStage(), len(m.hold.GetAlerts()), m.hold.GetAlertCount(), min(tc.count, MaxHeldAlerts), tc.count)
				}
			}
			if got != tc.want {
				t.Errorf("hold:\n got %q\nwant %q", got, tc.want)
			}
			if m.unchecked != tc.unchecked {
				t.Errorf("unchecked: got %q, want %q", m.unchecked, tc.unchecked)
			}
		})
	}
	// A policy without a monitoring check never reads the source.
	if m := checkStage(Default(), stageA, 1, func() Alerts {
		t.Fatal("read the alerts source for a policy without a monitoring check")
		return Alerts{}
	}); m.hold != nil || m.unchecked != "" {
		t.Errorf("no monitoring check: %+v", m)
	}
}

// monitored is canaryThenAll's canary, then zone a, then the rest (zone
// b), under a monitoring check of checkout's HighErrorRate by zone.
func monitored(onSourceError string) *lehrpb.RolloutPolicy {
	p := canaryThenAll(nil)
	p.Stages[1] = &lehrpb.RolloutStage{Name: "first zone", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"a"}}}, Bake: dur(5 * time.Minute)}
	p.Monitoring = &lehrpb.MonitoringCheck{OnSourceError: onSourceError, Alerts: []*lehrpb.AlertSelector{
		{Alert: "HighErrorRate", Matchers: []string{`service="checkout"`}, ZoneLabel: "zone"},
	}}
	return p
}

// quiet runs f and fails if it wrote anything: a rollout that only goes
// on waiting is not rewritten.
func (w *world) quiet(what string, f func()) {
	w.t.Helper()
	before, log := w.writes, w.log.Len()
	f()
	if w.writes != before || w.log.Len() != log {
		w.t.Errorf("%s: %d write(s), log %q; want none (nothing changed)", what, w.writes-before, w.log.String()[log:])
	}
}

func TestScenarioAlertsHoldStages(t *testing.T) {
	w := newWorld(t, monitored(""), "a", "b")
	src := "http://prometheus:9090"
	inB := firing(w.now.Add(-3*time.Minute), "alertname=HighErrorRate", "service=checkout", "zone=b", "severity=page")
	other := firing(w.now.Add(-time.Hour), "alertname=HighErrorRate", "service=search", "zone=b")
	w.alerts = Alerts{Source: src, Firing: []Alert{inB, other}}
	w.publish() // recorded, not entered: Admit checks the alerts first
	w.admit()   // the canary stage moves zone b too: held
	w.state()
	w.advance(time.Second)
	w.quiet("admit again, the same alert firing", w.admit)
	w.advance(2 * time.Minute)
	w.note("the alert in zone b clears")
	w.alerts = Alerts{Source: src, Firing: []Alert{other}}
	w.admit()
	r := w.rollouts[w.latest]
	w.advance(time.Second)
	w.step(evidenceOf(zoneHosts{zone: "a", agents: 2}, zoneHosts{zone: "b", agents: 2}).sampled(r, "a", "a-h1").sampled(r, "b", "b-h1"))
	ok := evidenceOf(zoneHosts{zone: "a", applied: 1, agents: 2}, zoneHosts{zone: "b", applied: 1, agents: 2}).withConsumers(2, 0, 0)
	w.advance(time.Second)
	w.step(ok)
	w.advance(5 * time.Minute)
	w.note("the alert in zone b fires again")
	inB.ActiveAt = w.now
	w.alerts = Alerts{Source: src, Firing: []Alert{inB}}
	reads := w.reads
	w.step(ok) // baking: the source is not read
	if w.reads != reads {
		t.Errorf("a baking stage read the alerts source")
	}
	w.advance(5 * time.Minute)
	w.step(ok) // the next stage moves zone a only: not held
	w.advance(time.Second)
	okA := evidenceOf(zoneHosts{zone: "a", applied: 2}).withConsumers(2, 0, 0)
	w.step(okA)
	w.advance(5 * time.Minute)
	w.step(okA) // baked; the rest moves zone b: held
	w.state()
	w.advance(time.Second)
	w.quiet("step again, the same alert firing", func() { w.step(okA) })
	w.advance(time.Minute)
	w.note("the alerts source stops answering")
	w.alerts = Alerts{Source: src, Err: errors.New(`Get "http://prometheus:9090/api/v1/alerts": dial tcp 10.0.0.9:9090: connect: connection refused`)}
	w.step(okA)
	w.state()
	w.advance(time.Second)
	w.quiet("step again, the source still down", func() { w.step(okA) })
	w.advance(time.Minute)
	w.note("the source answers; nothing fires")
	w.alerts = Alerts{Source: src}
	w.step(okA)
	w.state()
	if h := w.rollouts[w.latest].GetAlertHold(); h != nil {
		t.Errorf("the hold is kept after it cleared: %v", h)
	}
	w.check("alerts")
}

func TestScenarioAlertsSourceDownProceed(t *testing.T) {
	w := newWorld(t, monitored(OnSourceErrorProceed), "a", "b")
	w.alerts = Alerts{Source: "http://prometheus:9090", Err: errors.New("server answered 503 Service Unavailable")}
	w.publish()
	w.admit() // the policy says proceed: entered, saying so
	w.state()
	w.check("alerts-source-down-proceed")
}

// A control replica taking over knows what held a rollout from the
// rollout itself: reading the same alerts, it writes nothing.
func TestAlertHoldSurvivesFailover(t *testing.T) {
	w := newWorld(t, monitored(""), "a", "b")
	w.alerts = Alerts{Source: "http://prometheus:9090", Firing: []Alert{firing(w.now, "alertname=HighErrorRate", "service=checkout", "zone=a")}}
	w.publish()
	w.admit()
	stored := w.rollouts[w.latest]
	if stored.GetAlertHold() == nil {
		t.Fatalf("not held: %v", stored.GetReason())
	}
	// The next leader: the rollout as stored, its own read of the source.
	w.advance(30 * time.Second)
	next := &world{t: t, start: w.start, now: w.now, zones: w.zones, goals: w.goals, rollouts: map[uint64]*lehrpb.Rollout{stored.GetVersion(): stored},
		latest: w.latest, head: w.head, policy: w.policy, alerts: w.alerts}
	next.quiet("the next leader's first admit", next.admit)
}
