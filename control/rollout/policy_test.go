package rollout_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/proto/lehrpb"
)

var fleet = rollout.Fleet{Zones: []string{"zone-a", "zone-b", "zone-c"}, Hosts: map[string]int{"zone-a": 3, "zone-b": 2}, Alerts: true}

func withMonitoring(m *lehrpb.MonitoringCheck) *lehrpb.RolloutPolicy {
	p := rollout.Default()
	p.Monitoring = m
	return p
}

func alertsNamed(sels ...*lehrpb.AlertSelector) *lehrpb.MonitoringCheck {
	return &lehrpb.MonitoringCheck{Alerts: sels}
}

func canary(c *lehrpb.CanaryTarget) *lehrpb.RolloutStage {
	return &lehrpb.RolloutStage{Target: &lehrpb.RolloutStage_Canary{Canary: c}}
}

func zones(z *lehrpb.ZonesTarget) *lehrpb.RolloutStage {
	return &lehrpb.RolloutStage{Target: &lehrpb.RolloutStage_Zones{Zones: z}}
}

func policy(stages ...*lehrpb.RolloutStage) *lehrpb.RolloutPolicy {
	return &lehrpb.RolloutPolicy{Stages: stages}
}

func with(st *lehrpb.RolloutStage, mod func(*lehrpb.RolloutStage)) *lehrpb.RolloutStage {
	mod(st)
	return st
}

var t0 = time.Date(2026, 12, 23, 0, 0, 0, 0, time.UTC)

func withFreeze(ws ...*lehrpb.FreezeWindow) *lehrpb.RolloutPolicy {
	p := rollout.Default()
	p.FreezeWindows = ws
	return p
}

func TestFrozen(t *testing.T) {
	p := withFreeze(
		&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(2 * time.Hour)), Reason: "a"},
		&lehrpb.FreezeWindow{Start: timestamppb.New(t0.Add(time.Hour)), End: timestamppb.New(t0.Add(3 * time.Hour)), Reason: "b"},
	)
	for _, tc := range []struct {
		at   time.Duration
		want string // "" for none
	}{{-time.Second, ""}, {0, "a"}, {90 * time.Minute, "b"}, {2*time.Hour + 30*time.Minute, "b"}, {3 * time.Hour, ""}} {
		w, _, ok := rollout.Frozen(p, t0.Add(tc.at))
		if got := w.GetReason(); ok != (tc.want != "") || got != tc.want {
			t.Errorf("Frozen at t0%+v = %q, %v; want %q", tc.at, got, ok, tc.want)
		}
	}
}

// weekend is a weekly window: every Friday and Saturday at 16:00 Berlin
// time, for 40 hours.
func weekend() *lehrpb.WeeklyWindow {
	return &lehrpb.WeeklyWindow{Days: []string{"fri", "sat"}, At: "16:00", Length: durationpb.New(40 * time.Hour), TimeZone: "Europe/Berlin"}
}

func weeklyWith(mod func(*lehrpb.WeeklyWindow)) *lehrpb.WeeklyWindow {
	w := weekend()
	mod(w)
	return w
}

// TestFrozenWeekly checks weekly windows against the wall clock of their
// zone, across the switch to summer time in Berlin (Sunday 28 March 2027,
// 02:00 → 03:00) and with overlapping openings.
func TestFrozenWeekly(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, berlin) }
	p := withFreeze(&lehrpb.FreezeWindow{Weekly: weekend(), Reason: "weekend"})
	night := withFreeze(&lehrpb.FreezeWindow{Reason: "night", Weekly: &lehrpb.WeeklyWindow{
		Days: []string{"sun"}, At: "02:30", Length: durationpb.New(time.Hour), TimeZone: "Europe/Berlin"}})
	long := withFreeze(&lehrpb.FreezeWindow{Reason: "long", Weekly: &lehrpb.WeeklyWindow{
		Days: []string{"mon"}, At: "12:00", Length: durationpb.New(6*24*time.Hour + 23*time.Hour)}})
	for _, tc := range []struct {
		name      string
		p         *lehrpb.RolloutPolicy
		now       time.Time
		wantUntil time.Time // zero: not frozen
	}{
		{"thursday evening", p, at(2027, 3, 25, 20, 0), time.Time{}},
		{"friday before it opens", p, at(2027, 3, 26, 15, 59), time.Time{}},
		// A length is elapsed time: Friday 16:00 CET plus 40 hours is Sunday
		// 08:00 CET, which is 09:00 CEST once the clock went forward at
		// 02:00. Saturday's opening (overlapping) runs to Monday 09:00 CEST:
		// the later end wins once it is open.
		{"friday as it opens", p, at(2027, 3, 26, 16, 0), at(2027, 3, 28, 9, 0)},
		{"saturday afternoon", p, at(2027, 3, 27, 15, 0), at(2027, 3, 28, 9, 0)},
		{"saturday evening", p, at(2027, 3, 27, 17, 0), at(2027, 3, 29, 9, 0)},
		{"across the DST switch", p, at(2027, 3, 29, 8, 30), at(2027, 3, 29, 9, 0)},
		{"monday after it closed", p, at(2027, 3, 29, 9, 0), time.Time{}},
		// 02:30 does not exist on 28 March 2027 in Berlin: the opening moves
		// to 03:30 CEST (time.Date's normalisation), open for an hour.
		{"skipped hour, before", night, at(2027, 3, 28, 1, 59), time.Time{}},
		{"skipped hour, opened late", night, at(2027, 3, 28, 3, 45), at(2027, 3, 28, 4, 30)},
		{"normal sunday", night, at(2027, 4, 4, 2, 45), at(2027, 4, 4, 3, 30)},
		// A window that opened six days and 22 hours ago (UTC).
		{"six days old", long, time.Date(2027, 1, 11, 10, 0, 0, 0, time.UTC), time.Date(2027, 1, 11, 11, 0, 0, 0, time.UTC)},
		{"closed an hour before the next", long, time.Date(2027, 1, 11, 11, 30, 0, 0, time.UTC), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := rollout.Validate("policy", tc.p, fleet); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			_, until, ok := rollout.Frozen(tc.p, tc.now)
			if ok != !tc.wantUntil.IsZero() || !until.Equal(tc.wantUntil) {
				t.Errorf("Frozen at %v = until %v, %v; want until %v", tc.now, until, ok, tc.wantUntil)
			}
		})
	}
}

func TestDescribeFreeze(t *testing.T) {
	if got, want := rollout.DescribeFreeze(&lehrpb.FreezeWindow{Weekly: weekend()}), "every fri, sat at 16:00 Europe/Berlin for 40h0m0s"; got != want {
		t.Errorf("DescribeFreeze(weekly) = %q, want %q", got, want)
	}
	once := &lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(time.Hour))}
	if got, want := rollout.DescribeFreeze(once), "2026-12-23T00:00:00Z → 2026-12-23T01:00:00Z"; got != want {
		t.Errorf("DescribeFreeze(once) = %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		p         *lehrpb.RolloutPolicy
		wantField string // "" means valid
		wantMsg   string
	}{
		{"default", rollout.Default(), "", ""},
		{"fast", rollout.Fast(), "", ""},
		{"global blast", rollout.GlobalBlast(), "", ""},
		{"canary percent then two named zones", policy(canary(&lehrpb.CanaryTarget{Percent: 5}), zones(&lehrpb.ZonesTarget{Zones: []string{"zone-b", "zone-a"}})), "", ""},
		{"a zone by percent then whole", policy(zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a"}, Percent: 10}), zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a"}})), "", ""},
		{"unknown host count is not checked", policy(canary(&lehrpb.CanaryTarget{Zones: []string{"zone-c"}, Hosts: 50})), "", ""},

		{"after two namespaces", &lehrpb.RolloutPolicy{GlobalBlast: true, After: []string{"pay/flags", "search/ranking"}}, "", ""},
		{"after a domain", &lehrpb.RolloutPolicy{GlobalBlast: true, After: []string{"pay"}}, "policy.after[0]", "domain/name"},
		{"after one twice", &lehrpb.RolloutPolicy{GlobalBlast: true, After: []string{"pay/flags", "pay/keys", "pay/flags"}}, "policy.after[2]", "also after[0]"},
		{"after too many", &lehrpb.RolloutPolicy{GlobalBlast: true, After: func() (out []string) {
			for i := range rollout.MaxAfter + 1 {
				out = append(out, fmt.Sprintf("pay/n%d", i))
			}
			return out
		}()}, "policy.after", "at most 16"},
		{"nil", nil, "policy", "required"},
		{"no stages", policy(), "policy.stages", "at least one stage"},
		{"global blast with stages", &lehrpb.RolloutPolicy{GlobalBlast: true, Stages: rollout.Default().Stages}, "policy.global_blast", "takes no stages"},
		{"no target", policy(&lehrpb.RolloutStage{Name: "x"}), "policy.stages[0]", "needs a target"},
		{"unknown zone", policy(zones(&lehrpb.ZonesTarget{Zones: []string{"zone-x"}})), "policy.stages[0].zones.zones[0]", `"zone-x" is not registered`},
		{"unknown canary zone", policy(canary(&lehrpb.CanaryTarget{Zones: []string{"zone-x"}, Hosts: 1})), "policy.stages[0].canary.zones[0]", "not registered"},
		{"zone twice in a stage", policy(zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a", "zone-a"}})), "policy.stages[0].zones.zones[1]", "named twice"},
		{"negative bake", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.Bake = durationpb.New(-time.Second) })), "policy.stages[0].bake", "want 0s to 168h0m0s"},
		{"bake too long", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.Bake = durationpb.New(8 * 24 * time.Hour) })), "policy.stages[0].bake", "168h"},
		{"deadline too long", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.ApplyDeadline = durationpb.New(48 * time.Hour) })), "policy.stages[0].apply_deadline", "24h"},
		{"percent over 100", policy(zones(&lehrpb.ZonesTarget{Percent: 150})), "policy.stages[0].zones.percent", "150; want 0 (meaning 100) to 100"},
		{"canary percent over 100", policy(canary(&lehrpb.CanaryTarget{Percent: 101})), "policy.stages[0].canary.percent", "more than 0, at most 100"},
		{"canary NaN percent", policy(canary(&lehrpb.CanaryTarget{Percent: math.NaN()})), "policy.stages[0].canary.percent", "NaN"},
		{"canary hosts and percent", policy(canary(&lehrpb.CanaryTarget{Hosts: 1, Percent: 5})), "policy.stages[0].canary", "choose one"},
		{"canary neither", policy(canary(&lehrpb.CanaryTarget{})), "policy.stages[0].canary", "choose hosts"},
		{"more canary hosts than the zone has", policy(canary(&lehrpb.CanaryTarget{Hosts: 3})), "policy.stages[0].canary.hosts", `zone "zone-b" has 2 host(s)`},
		{"min hosts above selection", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1, Zones: []string{"zone-a"}}), func(s *lehrpb.RolloutStage) { s.MinHostsApplied = 2 })), "policy.stages[0].min_hosts_applied", "at most 1"},
		{"error ratio above 1", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.MaxErrorRatio = 1.5 })), "policy.stages[0].max_error_ratio", "want 0 to 1"},
		{"error ratio NaN", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.MaxErrorRatio = math.NaN() })), "policy.stages[0].max_error_ratio", "not a ratio"},
		{"zones and count", policy(zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a"}, Count: 1})), "policy.stages[0].zones", "both set"},
		{"count too large", policy(zones(&lehrpb.ZonesTarget{Count: 4})), "policy.stages[0].zones.count", "only 3 zone(s) are left"},
		{"zone reached twice", policy(zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a"}}), zones(&lehrpb.ZonesTarget{Zones: []string{"zone-a"}})), "policy.stages[1].zones.zones[0]", "already at 100%"},
		{"nothing left to reach", policy(zones(&lehrpb.ZonesTarget{}), zones(&lehrpb.ZonesTarget{})), "policy.stages[1].zones", "every zone is reached"},
		{"duplicate names", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.Name = "a" }), with(zones(&lehrpb.ZonesTarget{}), func(s *lehrpb.RolloutStage) { s.Name = "a" })), "policy.stages[1].name", "must differ"},
		{"bad name", policy(with(canary(&lehrpb.CanaryTarget{Hosts: 1}), func(s *lehrpb.RolloutStage) { s.Name = "a/b" })), "policy.stages[0].name", "offset 1"},
		{"freeze without an end", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0)}), "policy.freeze_windows[0]", "a start and an end"},
		{"freeze ending before it starts", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(-time.Hour))}), "policy.freeze_windows[0].end", "is not after start"},
		{"freeze of a year", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(365 * 24 * time.Hour))}), "policy.freeze_windows[0].end", "at most 2160h"},
		{"freeze reason too long", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(time.Hour)), Reason: strings.Repeat("x", 201)}), "policy.freeze_windows[0].reason", "at most 200"},
		{"weekly and a start", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(time.Hour)), Weekly: weekend()}), "policy.freeze_windows[0]", "not both"},
		{"weekly without days", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.Days = nil })}), "policy.freeze_windows[0].weekly.days", "at least one day"},
		{"weekly bad day", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.Days = []string{"fri", "friday"} })}), "policy.freeze_windows[0].weekly.days[1]", `"friday" is not a day; want mon, tue`},
		{"weekly day twice", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.Days = []string{"fri", "FRI"} })}), "policy.freeze_windows[0].weekly.days[1]", "listed twice"},
		{"weekly bad time", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.At = "4pm" })}), "policy.freeze_windows[0].weekly.at", "HH:MM"},
		{"weekly 25 o'clock", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.At = "25:00" })}), "policy.freeze_windows[0].weekly.at", "HH:MM"},
		{"weekly without length", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.Length = nil })}), "policy.freeze_windows[0].weekly.length", "required"},
		{"weekly a whole week", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.Length = durationpb.New(7 * 24 * time.Hour) })}), "policy.freeze_windows[0].weekly.length", "under 168h"},
		{"weekly unknown zone", withFreeze(&lehrpb.FreezeWindow{Weekly: weeklyWith(func(w *lehrpb.WeeklyWindow) { w.TimeZone = "Mars/Olympus" })}), "policy.freeze_windows[0].weekly.time_zone", "not an IANA time zone"},
		{"a valid weekly freeze", withFreeze(&lehrpb.FreezeWindow{Weekly: weekend(), Reason: "weekend"}), "", ""},
		{"a valid freeze", withFreeze(&lehrpb.FreezeWindow{Start: timestamppb.New(t0), End: timestamppb.New(t0.Add(time.Hour)), Reason: "launch"}), "", ""},
		{"a valid monitoring check", withMonitoring(&lehrpb.MonitoringCheck{OnSourceError: "proceed", Alerts: []*lehrpb.AlertSelector{
			{Alert: "HighErrorRate", Matchers: []string{`service="checkout"`, `severity=~"page|critical"`, `team!=db`, `env!~"dev.*"`}, ZoneLabel: "zone"},
			{Alert: "Overloaded"},
		}}), "", ""},
		{"a global blast with a monitoring check", &lehrpb.RolloutPolicy{GlobalBlast: true, Monitoring: alertsNamed(&lehrpb.AlertSelector{Alert: "A"})}, "", ""},
		{"monitoring without alerts", withMonitoring(&lehrpb.MonitoringCheck{}), "policy.monitoring.alerts", "at least one alert"},
		{"monitoring unknown on_source_error", withMonitoring(&lehrpb.MonitoringCheck{OnSourceError: "WAIT", Alerts: []*lehrpb.AlertSelector{{Alert: "A"}}}), "policy.monitoring.on_source_error", `"WAIT"; want wait`},
		{"alert without a name", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A"}, &lehrpb.AlertSelector{Matchers: []string{"a=b"}})), "policy.monitoring.alerts[1].alert", "an alert name is required"},
		{"matcher without operator", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A", Matchers: []string{`service="x"`, "service"}})), "policy.monitoring.alerts[0].matchers[1]", "no operator"},
		{"matcher bad label", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A", Matchers: []string{`1x="y"`}})), "policy.monitoring.alerts[0].matchers[0]", "not a label name"},
		{"matcher bad regex", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A", Matchers: []string{`x=~"(("`}})), "policy.monitoring.alerts[0].matchers[0]", "not a regular expression"},
		{"matcher bad quote", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A", Matchers: []string{`x="y`}})), "policy.monitoring.alerts[0].matchers[0]", "not a quoted string"},
		{"bad zone label", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A", ZoneLabel: "zone-name"})), "policy.monitoring.alerts[0].zone_label", "not a label name"},
		{"too many alerts", withMonitoring(alertsNamed(func() []*lehrpb.AlertSelector {
			var out []*lehrpb.AlertSelector
			for range rollout.MaxAlertSelectors + 1 {
				out = append(out, &lehrpb.AlertSelector{Alert: "A"})
			}
			return out
		}()...)), "policy.monitoring.alerts", "at most 20"},
		{"too many stages", policy(func() []*lehrpb.RolloutStage {
			var out []*lehrpb.RolloutStage
			for range rollout.MaxStages + 1 {
				out = append(out, canary(&lehrpb.CanaryTarget{Hosts: 1}))
			}
			return out
		}()...), "policy.stages", "at most 32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := rollout.Validate("policy", tc.p, fleet)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var fe *rollout.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate: %v, want a *FieldError on %s", err, tc.wantField)
			}
			if fe.Field != tc.wantField || !strings.Contains(fe.Message, tc.wantMsg) {
				t.Errorf("Validate: field %q message %q; want field %q and a message containing %q", fe.Field, fe.Message, tc.wantField, tc.wantMsg)
			}
		})
	}
}

// A control without an alerts source refuses a monitoring check: it could
// never be checked.
func TestValidateMonitoringNeedsASource(t *testing.T) {
	noSource := fleet
	noSource.Alerts = false
	err := rollout.Validate("policy", withMonitoring(alertsNamed(&lehrpb.AlertSelector{Alert: "A"})), noSource)
	var fe *rollout.FieldError
	if !errors.As(err, &fe) || fe.Field != "policy.monitoring" || !strings.Contains(fe.Message, "--alerts-url") {
		t.Errorf("Validate without an alerts source: %v; want a *FieldError on policy.monitoring naming --alerts-url", err)
	}
	if err := rollout.Validate("policy", rollout.Default(), noSource); err != nil {
		t.Errorf("Validate of a policy without a monitoring check, without an alerts source: %v", err)
	}
}

// A control without a metrics source refuses an analysis with a check
// written as a query, saying to give it one; with one, it is accepted.
func TestValidateQueryCheckNeedsASource(t *testing.T) {
	p := rollout.Default()
	i := slices.IndexFunc(p.GetStages(), func(st *lehrpb.RolloutStage) bool { return st.GetCanary() != nil })
	if i < 0 {
		t.Fatal("rollout.Default() has no canary stage")
	}
	p.Stages[i].Analysis = &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{{Name: "errors", Kind: "proportion", Query: &lehrpb.CanaryQuery{
		Numerator:   `sum by (host) (increase(errors_total{$population}[$interval]))`,
		Denominator: `sum by (host) (increase(requests_total{$population}[$interval]))`}}}}
	err := rollout.Validate("policy", p, fleet)
	var fe *rollout.FieldError
	want := fmt.Sprintf("policy.stages[%d].analysis.checks[0].query", i)
	if !errors.As(err, &fe) || fe.Field != want || !strings.Contains(fe.Message, "--metrics-url") {
		t.Errorf("Validate without a metrics source: %v; want a *FieldError on %s naming --metrics-url", err, want)
	}
	withSource := fleet
	withSource.Metrics = true
	if err := rollout.Validate("policy", p, withSource); err != nil {
		t.Errorf("Validate with a metrics source: %v", err)
	}
}
