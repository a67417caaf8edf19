package rollout

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control/evaluation"
	"lehr.dev/lehr/proto/lehrpb"
)

// Bounds of a policy.
const (
	MaxStages            = 32
	MaxStageNameBytes    = 63
	MaxBake              = 7 * 24 * time.Hour
	MaxApplyDeadline     = 24 * time.Hour
	DefaultApplyDeadline = 10 * time.Minute
)

// FieldError says which field of a policy is wrong and why; the message
// says what is allowed. Field is a path such as "policy.stages[1].bake".
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Fleet is what a policy is validated and resolved against.
type Fleet struct {
	// Zones are the registered zones.
	Zones []string
	// Hosts maps a zone to the hosts its distributors report connected;
	// a zone absent, or reporting none, is not checked.
	Hosts map[string]int
	// Alerts says control has an alerts source (lehr control
	// --alerts-url): without one a policy's monitoring check is refused.
	Alerts bool
	// Metrics says control has a metrics source (lehr control
	// --metrics-url): without one an analysis's checks written as
	// queries are refused.
	Metrics bool
}

// Validate checks p against the fleet. The error is a *FieldError naming
// the first wrong field under prefix (e.g. "policy").
func Validate(prefix string, p *lehrpb.RolloutPolicy, fleet Fleet) error {
	if p == nil {
		return fieldErr(prefix, "a policy is required: a list of stages, or global_blast")
	}
	if err := checkFreezeWindows(prefix+".freeze_windows", p.GetFreezeWindows()); err != nil {
		return err
	}
	if err := checkAfter(prefix+".after", p.GetAfter()); err != nil {
		return err
	}
	if err := checkMonitoring(prefix+".monitoring", p.GetMonitoring(), fleet.Alerts); err != nil {
		return err
	}
	if n := p.GetMaxConcurrent(); n > MaxConcurrentLimit {
		return fieldErr(prefix+".max_concurrent", "%d; at most %d allowed (0 means no limit)", n, MaxConcurrentLimit)
	}
	stages := p.GetStages()
	if p.GetGlobalBlast() {
		if len(stages) > 0 {
			return fieldErr(prefix+".global_blast", "global_blast moves every zone at once and takes no stages; remove the %d stage(s) or unset global_blast", len(stages))
		}
		return nil
	}
	if len(stages) == 0 {
		return fieldErr(prefix+".stages", "at least one stage is required (or global_blast for an emergency policy)")
	}
	if len(stages) > MaxStages {
		return fieldErr(prefix+".stages", "%d stages; at most %d allowed", len(stages), MaxStages)
	}
	known := map[string]bool{}
	for _, z := range fleet.Zones {
		known[z] = true
	}
	reached := map[string]float64{} // zone → percent of hosts moved so far
	names := map[string]int{}
	for i, st := range stages {
		f := fmt.Sprintf("%s.stages[%d]", prefix, i)
		if err := checkStageName(f+".name", st.GetName()); err != nil {
			return err
		}
		name := stageName(i, st)
		if j, dup := names[name]; dup {
			return fieldErr(f+".name", "%q is also the name of stages[%d]; stage names must differ", name, j)
		}
		names[name] = i
		if err := checkDuration(f+".bake", st.GetBake(), 0, MaxBake); err != nil {
			return err
		}
		if err := checkDuration(f+".apply_deadline", st.GetApplyDeadline(), 0, MaxApplyDeadline); err != nil {
			return err
		}
		if err := evaluation.CheckAnalysis(f+".analysis", st.GetAnalysis()); err != nil {
			var fe *evaluation.FieldError
			if errors.As(err, &fe) {
				return fieldErr(fe.Field, "%s", fe.Message)
			}
			return err
		}
		if q := evaluation.QueryField(st.GetAnalysis()); q != "" && !fleet.Metrics {
			return fieldErr(f+".analysis."+q, "%s", evaluation.NoSourceMessage)
		}
		if r := st.GetMaxErrorRatio(); math.IsNaN(r) || r < 0 || r > 1 {
			return fieldErr(f+".max_error_ratio", "%v is not a ratio; want 0 to 1 (0.01 allows one error per hundred consumers)", r)
		}
		switch t := st.GetTarget().(type) {
		case *lehrpb.RolloutStage_Canary:
			if err := checkCanary(f+".canary", t.Canary, known, fleet.Hosts); err != nil {
				return err
			}
			if n := st.GetMinHostsApplied(); n > 0 && t.Canary.GetHosts() > 0 {
				zones := len(t.Canary.GetZones())
				if zones == 0 {
					zones = len(fleet.Zones)
				}
				if max := uint64(t.Canary.GetHosts()) * uint64(zones); uint64(n) > max {
					return fieldErr(f+".min_hosts_applied", "%d, but the stage selects at most %d host(s) (%d per zone in %d zone(s)); want at most %d", n, max, t.Canary.GetHosts(), zones, max)
				}
			}
		case *lehrpb.RolloutStage_Zones:
			if err := checkZones(f+".zones", t.Zones, known, reached, len(fleet.Zones)); err != nil {
				return err
			}
		default:
			return fieldErr(f, "a stage needs a target: canary (a few hosts per zone) or zones (whole zones, or a percentage of their hosts)")
		}
	}
	return nil
}

func checkStageName(field, name string) error {
	if len(name) > MaxStageNameBytes {
		return fieldErr(field, "%d bytes; at most %d allowed", len(name), MaxStageNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ' ') {
			return fieldErr(field, "byte %q at offset %d; use letters, digits, spaces, '-', '_' and '.'", c, i)
		}
	}
	return nil
}

func checkDuration(field string, d *durationpb.Duration, lo, hi time.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return fieldErr(field, "not a valid duration: %v", err)
	}
	if v := d.AsDuration(); v < lo || v > hi {
		return fieldErr(field, "%v; want %v to %v", v, lo, hi)
	}
	return nil
}

func checkPercent(field string, p float64, zeroOK bool) error {
	if math.IsNaN(p) || p < 0 || p > 100 || (p == 0 && !zeroOK) {
		want := "more than 0, at most 100"
		if zeroOK {
			want = "0 (meaning 100) to 100"
		}
		return fieldErr(field, "%v; want %s", p, want)
	}
	return nil
}

func checkZoneList(field string, zones []string, known map[string]bool) error {
	seen := map[string]bool{}
	for i, z := range zones {
		if !known[z] {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "zone %q is not registered; registered zones: %v", z, slices.Sorted(maps.Keys(known)))
		}
		if seen[z] {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "zone %q is named twice", z)
		}
		seen[z] = true
	}
	return nil
}

func checkCanary(field string, c *lehrpb.CanaryTarget, known map[string]bool, hosts map[string]int) error {
	if err := checkZoneList(field+".zones", c.GetZones(), known); err != nil {
		return err
	}
	switch {
	case c.GetHosts() > 0 && c.GetPercent() != 0:
		return fieldErr(field, "hosts %d and percent %v are both set; choose one", c.GetHosts(), c.GetPercent())
	case c.GetHosts() == 0 && c.GetPercent() == 0:
		return fieldErr(field, "choose hosts (a count per zone, e.g. 1) or percent (of each zone's hosts)")
	case c.GetPercent() != 0:
		return checkPercent(field+".percent", c.GetPercent(), false)
	}
	zones := c.GetZones()
	if len(zones) == 0 {
		zones = slices.Sorted(maps.Keys(known))
	}
	for _, z := range zones {
		// A zone reporting no host is not checked: its agents may be
		// between distributors, and a canary stage waits for hosts anyway.
		if n, ok := hosts[z]; ok && n > 0 && int64(c.GetHosts()) > int64(n) {
			return fieldErr(field+".hosts", "%d, but zone %q has %d host(s) connected now; want at most %d, or a percent", c.GetHosts(), z, n, n)
		}
	}
	return nil
}

func checkZones(field string, t *lehrpb.ZonesTarget, known map[string]bool, reached map[string]float64, registered int) error {
	if len(t.GetZones()) > 0 && t.GetCount() > 0 {
		return fieldErr(field, "zones and count are both set; name zones, or take the next count zones in name order")
	}
	if err := checkZoneList(field+".zones", t.GetZones(), known); err != nil {
		return err
	}
	if err := checkPercent(field+".percent", t.GetPercent(), true); err != nil {
		return err
	}
	pct := t.GetPercent()
	if pct == 0 {
		pct = 100
	}
	var zones []string
	switch {
	case len(t.GetZones()) > 0:
		zones = t.GetZones()
	default:
		for _, z := range slices.Sorted(maps.Keys(known)) {
			if reached[z] < 100 {
				zones = append(zones, z)
			}
		}
		if n := int(t.GetCount()); n > 0 {
			if n > len(zones) {
				return fieldErr(field+".count", "%d, but only %d zone(s) are left to reach (%d registered); want at most %d", n, len(zones), registered, len(zones))
			}
			zones = zones[:n]
		}
		if len(zones) == 0 {
			return fieldErr(field, "every zone is reached by an earlier stage; remove this stage")
		}
	}
	for i, z := range zones {
		if prev := reached[z]; prev >= pct {
			f := field
			if len(t.GetZones()) > 0 {
				f = fmt.Sprintf("%s.zones[%d]", field, i)
			}
			return fieldErr(f, "zone %q is already at %v%% from an earlier stage; a later stage must move more of it", z, prev)
		}
		reached[z] = pct
	}
	return nil
}

func stageName(i int, st *lehrpb.RolloutStage) string {
	if st.GetName() != "" {
		return st.GetName()
	}
	return fmt.Sprintf("stage %d", i+1)
}

// MaxConcurrentLimit bounds RolloutPolicy.max_concurrent.
const MaxConcurrentLimit = 1000
