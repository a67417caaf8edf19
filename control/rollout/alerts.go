package rollout

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// The monitoring check (Annealing's "no push while an alert fires"): a
// policy may name alerts (MonitoringCheck); while one of them fires where
// the next stage moves, that stage is not entered. Like a freeze window it
// delays, never rejects: the rollout waits, saying which alert holds it,
// since when and where, and goes on by itself once none fires. Pure: the
// alerts come as an input (Alerts, read by the strategist from control's
// alerts source, one read shared by every rollout of a round), and what a
// rollout waits on is recorded in it (Rollout.alert_hold), so that a
// decision is written — and an event logged — only when what holds it
// changes, on this replica or on the next leader.

// Bounds of a monitoring check.
const (
	MaxAlertSelectors = 20
	MaxAlertMatchers  = 20
	// MaxHeldAlerts bounds the alerts a rollout records (AlertHold.alerts);
	// AlertHold.alert_count counts them all.
	MaxHeldAlerts = 10
	// heldAlertsShown are the alerts a reason names; the rest are counted.
	heldAlertsShown = 3
)

// What a stage does when the alerts source cannot be read
// (MonitoringCheck.on_source_error).
const (
	OnSourceErrorWait    = "wait"
	OnSourceErrorProceed = "proceed"
)

// Alert is an alert the alerts source reports firing.
type Alert struct {
	// Labels, alertname among them.
	Labels map[string]string
	// ActiveAt is when it became active (pending, then firing).
	ActiveAt time.Time
}

// Alerts is what control's alerts source said when the strategist last
// read it: the alerts firing, or why it could not be read.
type Alerts struct {
	// Source names the source in reasons, e.g. "http://prometheus:9090"
	// (without credentials); "" means control has none.
	Source string
	// Firing are the alerts in state firing; nil when Err is set.
	Firing []Alert
	// Err says why the source could not be read.
	Err error
}

// matcher is a parsed label matcher: name op value.
type matcher struct {
	name, op, value string
	re              *regexp.Regexp // for =~ and !~, anchored
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// parseMatcher parses a Prometheus label matcher: label="value",
// label!="value", label=~"regex" or label!~"regex"; the value may be
// unquoted.
func parseMatcher(s string) (matcher, error) {
	i := strings.IndexAny(s, "=!")
	if i < 0 {
		return matcher{}, fmt.Errorf("%q has no operator; want label=\"value\", label!=\"value\", label=~\"regex\" or label!~\"regex\"", s)
	}
	m := matcher{name: strings.TrimSpace(s[:i])}
	rest := s[i:]
	for _, op := range []string{"=~", "!~", "!=", "="} {
		if strings.HasPrefix(rest, op) {
			m.op, rest = op, rest[len(op):]
			break
		}
	}
	if m.op == "" {
		return matcher{}, fmt.Errorf("%q: unknown operator; want =, !=, =~ or !~", s)
	}
	if !labelName.MatchString(m.name) {
		return matcher{}, fmt.Errorf("%q: %q is not a label name (letters, digits and _, not starting with a digit)", s, m.name)
	}
	rest = strings.TrimSpace(rest)
	m.value = rest
	if strings.HasPrefix(rest, `"`) {
		v, err := strconv.Unquote(rest)
		if err != nil {
			return matcher{}, fmt.Errorf("%q: the value is not a quoted string: %v", s, err)
		}
		m.value = v
	}
	if m.op == "=~" || m.op == "!~" {
		re, err := regexp.Compile("^(?:" + m.value + ")$")
		if err != nil {
			return matcher{}, fmt.Errorf("%q: not a regular expression: %v", s, err)
		}
		m.re = re
	}
	return m, nil
}

// matches reports whether labels satisfy m; an absent label is "", as in
// Prometheus.
func (m matcher) matches(labels map[string]string) bool {
	v := labels[m.name]
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

// checkMonitoring validates a policy's monitoring check; hasSource says
// whether control has an alerts source to read it from.
func checkMonitoring(field string, m *lehrpb.MonitoringCheck, hasSource bool) error {
	if m == nil {
		return nil
	}
	if !hasSource {
		return fieldErr(field, "control has no alerts source to check alerts against: start it with --alerts-url (Prometheus's or vmalert's /api/v1/alerts; docs/operations.md, \"The monitoring check\"), or remove the monitoring check")
	}
	switch m.GetOnSourceError() {
	case "", OnSourceErrorWait, OnSourceErrorProceed:
	default:
		return fieldErr(field+".on_source_error", "%q; want %s (the default: no stage is entered while the source cannot be read) or %s", m.GetOnSourceError(), OnSourceErrorWait, OnSourceErrorProceed)
	}
	sels := m.GetAlerts()
	if len(sels) == 0 {
		return fieldErr(field+".alerts", "at least one alert is required, e.g. {alert: HighErrorRate, matchers: ['service=\"checkout\"'], zone_label: zone}")
	}
	if len(sels) > MaxAlertSelectors {
		return fieldErr(field+".alerts", "%d alerts; at most %d allowed", len(sels), MaxAlertSelectors)
	}
	for i, sel := range sels {
		f := fmt.Sprintf("%s.alerts[%d]", field, i)
		if sel.GetAlert() == "" {
			return fieldErr(f+".alert", "an alert name is required: the alertname of a rule (its \"alert:\"), e.g. HighErrorRate")
		}
		if len(sel.GetAlert()) > 200 {
			return fieldErr(f+".alert", "%d bytes; at most 200 allowed", len(sel.GetAlert()))
		}
		if len(sel.GetMatchers()) > MaxAlertMatchers {
			return fieldErr(f+".matchers", "%d matchers; at most %d allowed", len(sel.GetMatchers()), MaxAlertMatchers)
		}
		for j, s := range sel.GetMatchers() {
			if _, err := parseMatcher(s); err != nil {
				return fieldErr(fmt.Sprintf("%s.matchers[%d]", f, j), "%v", err)
			}
		}
		if zl := sel.GetZoneLabel(); zl != "" && !labelName.MatchString(zl) {
			return fieldErr(f+".zone_label", "%q is not a label name (letters, digits and _, not starting with a digit)", zl)
		}
	}
	return nil
}

// selects returns the first selector of m that a matches, or nil.
func selects(m *lehrpb.MonitoringCheck, a Alert) *lehrpb.AlertSelector {
	for _, sel := range m.GetAlerts() {
		if a.Labels["alertname"] != sel.GetAlert() {
			continue
		}
		ok := true
		for _, s := range sel.GetMatchers() {
			mt, err := parseMatcher(s)
			if err != nil || !mt.matches(a.Labels) {
				ok = false // a matcher that does not parse (Validate refuses it) matches nothing
				break
			}
		}
		if ok {
			return sel
		}
	}
	return nil
}

// alertZone is the zone a firing alert is about, under the selector that
// matched it: "" when the selector names no zone label or the alert lacks
// it (the alert then holds every stage).
func alertZone(sel *lehrpb.AlertSelector, labels map[string]string) string {
	if sel.GetZoneLabel() == "" {
		return ""
	}
	return labels[sel.GetZoneLabel()]
}

// monitoring is what a policy's monitoring check says of the stage about
// to be entered.
type monitoring struct {
	// hold, when set, is why the stage waits.
	hold *lehrpb.AlertHold
	// unchecked, when set, says the stage goes on without the check: the
	// source could not be read and the policy says proceed.
	unchecked string
}

// checkStage runs p's monitoring check on stage stg (index i), reading
// the alerts (nil: control has no source) only when p names some.
func checkStage(p *lehrpb.RolloutPolicy, stg Stage, i int, read func() Alerts) monitoring {
	m := p.GetMonitoring()
	if m == nil {
		return monitoring{}
	}
	var a Alerts
	if read != nil {
		a = read()
	}
	if a.Source == "" && a.Err == nil {
		a.Err = fmt.Errorf("control has no alerts source (lehr control --alerts-url)")
	}
	if a.Err != nil {
		what := "the alerts source could not be read: " + a.Err.Error()
		if a.Source != "" {
			what = fmt.Sprintf("the alerts source %s could not be read: %v", a.Source, a.Err)
		}
		if m.GetOnSourceError() == OnSourceErrorProceed {
			return monitoring{unchecked: what}
		}
		return monitoring{hold: &lehrpb.AlertHold{Stage: int32(i), SourceError: what}}
	}
	zones := map[string]bool{}
	for _, t := range stg.Targets {
		zones[t.Zone] = true
	}
	var firing []Alert
	for _, al := range a.Firing {
		sel := selects(m, al)
		if sel == nil {
			continue
		}
		if z := alertZone(sel, al.Labels); z != "" && !zones[z] {
			continue // about a zone the stage does not move
		}
		firing = append(firing, al)
	}
	if len(firing) == 0 {
		return monitoring{}
	}
	slices.SortFunc(firing, func(x, y Alert) int {
		return cmp.Or(x.ActiveAt.Compare(y.ActiveAt), strings.Compare(labelString(x.Labels), labelString(y.Labels)))
	})
	h := &lehrpb.AlertHold{Stage: int32(i), AlertCount: uint32(len(firing))}
	for _, al := range firing[:min(len(firing), MaxHeldAlerts)] {
		h.Alerts = append(h.Alerts, &lehrpb.FiringAlert{Labels: maps.Clone(al.Labels), ActiveTime: timestamppb.New(al.ActiveAt)})
	}
	return monitoring{hold: h}
}

// labelString writes labels as Prometheus does, sorted: {a="1",b="2"}.
func labelString(labels map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// DescribeAlert names a firing alert as Prometheus writes it:
// HighErrorRate{service="checkout",zone="zone-b"}.
func DescribeAlert(a *lehrpb.FiringAlert) string {
	labels := maps.Clone(a.GetLabels())
	name := labels["alertname"]
	delete(labels, "alertname")
	if len(labels) == 0 {
		return name
	}
	return name + labelString(labels)
}

// fmtSince is when an alert became active, to the second, in UTC.
func fmtSince(t *timestamppb.Timestamp) string {
	return t.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}

// describeHold says what holds a stage, for a reason or an event: the
// alerts firing (since when and where), or the source that could not be
// read.
func describeHold(p *lehrpb.RolloutPolicy, h *lehrpb.AlertHold) string {
	if h.GetSourceError() != "" {
		return h.GetSourceError() + ", and the policy's monitoring check says wait on a source error"
	}
	var parts []string
	for _, a := range h.GetAlerts()[:min(len(h.GetAlerts()), heldAlertsShown)] {
		s := fmt.Sprintf("%s firing since %s", DescribeAlert(a), fmtSince(a.GetActiveTime()))
		if sel := selects(p.GetMonitoring(), Alert{Labels: a.GetLabels()}); sel.GetZoneLabel() != "" {
			if z := alertZone(sel, a.GetLabels()); z != "" {
				s += " in " + z
			} else {
				s += fmt.Sprintf(" (no %s label: everywhere)", sel.GetZoneLabel())
			}
		}
		parts = append(parts, s)
	}
	what := "alert "
	if h.GetAlertCount() > 1 {
		what = "alerts "
	}
	what += strings.Join(parts, "; ")
	if more := int(h.GetAlertCount()) - len(parts); more > 0 {
		what += fmt.Sprintf("; and %d more", more)
	}
	return what
}

// DescribeHold lists what h waits on, one line each, for operators (the
// console): every alert it recorded, with since when, and how many more
// fire; or the source that could not be read.
func DescribeHold(h *lehrpb.AlertHold) []string {
	if h.GetSourceError() != "" {
		return []string{h.GetSourceError()}
	}
	var out []string
	for _, a := range h.GetAlerts() {
		out = append(out, fmt.Sprintf("%s firing since %s", DescribeAlert(a), fmtSince(a.GetActiveTime())))
	}
	if more := int(h.GetAlertCount()) - len(out); more > 0 {
		out = append(out, fmt.Sprintf("and %d more alert(s)", more))
	}
	return out
}

// sameHold reports whether a and b hold the same stage for the same
// alerts or source error, whenever each began.
func sameHold(a, b *lehrpb.AlertHold) bool {
	if a == nil || b == nil {
		return a == b
	}
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	a.StartTime, b.StartTime = nil, nil
	return proto.Equal(a, b)
}

// held records that r's stage h.stage waits on the monitoring check, what
// being "stage X passed" or "" (the first stage, not entered yet): an
// event ("held") when what holds it changed, a write when its reason did,
// nothing otherwise.
func held(r *lehrpb.Rollout, now time.Time, h *lehrpb.AlertHold, next Stage, what string) Decision {
	h.StartTime = timestamppb.New(now)
	if prev := r.GetAlertHold(); prev != nil && prev.GetStage() == h.GetStage() {
		h.StartTime = prev.GetStartTime() // the stage has waited since then
	}
	reason := fmt.Sprintf("stage %q waits: %s; it goes on by itself once %s", next.Name, describeHold(r.GetPolicy(), h), resumesWhen(h))
	if what != "" {
		reason = what + "; " + reason
	}
	same := sameHold(r.GetAlertHold(), h)
	if same && reason == r.GetReason() && r.GetWaitUntil() == nil {
		return Decision{}
	}
	var evs []*lehrpb.RolloutEvent
	r.AlertHold, r.Reason, r.UpdateTime, r.WaitUntil = h, reason, timestamppb.New(now), nil
	if !same {
		evs = append(evs, newEvent(r, now, "held", fmt.Sprintf("stage %q waits: %s", next.Name, describeHold(r.GetPolicy(), h)), ""))
	}
	return Decision{Rollout: r, Events: evs}
}

func resumesWhen(h *lehrpb.AlertHold) string {
	if h.GetSourceError() != "" {
		return "the source answers and no alert the policy names fires there"
	}
	if h.GetAlertCount() > 1 {
		return "they clear"
	}
	return "it clears"
}

// released returns the events of stage next going on after the
// monitoring check (m) — "cleared" if it was held, "unchecked" if the
// source could not be read and the policy says proceed — and forgets the
// hold.
func released(r *lehrpb.Rollout, now time.Time, m monitoring, next Stage) []*lehrpb.RolloutEvent {
	var evs []*lehrpb.RolloutEvent
	h := r.GetAlertHold()
	r.AlertHold = nil
	waited := ""
	if h != nil {
		waited = fmt.Sprintf(" after waiting %v", now.Sub(h.GetStartTime().AsTime()).Round(time.Second))
	}
	switch {
	case m.unchecked != "":
		evs = append(evs, newEvent(r, now, "unchecked", fmt.Sprintf("%s, and the policy's monitoring check says proceed on a source error: stage %q goes on without it%s",
			m.unchecked, next.Name, waited), ""))
	case h != nil && h.GetSourceError() != "":
		evs = append(evs, newEvent(r, now, "cleared", fmt.Sprintf("the alerts source answers again and no alert the policy names fires where stage %q moves: it goes on%s", next.Name, waited), ""))
	case h != nil:
		evs = append(evs, newEvent(r, now, "cleared", fmt.Sprintf("no alert the policy names fires where stage %q moves any more (it waited on %s): it goes on%s",
			next.Name, describeHold(r.GetPolicy(), h), waited), ""))
	}
	return evs
}
