package canary

import (
	"fmt"
	"math"
)

// DefaultChecks returns the checks a judgement runs when it is given none:
// one per standard signal, so a service that declares a Prometheus
// endpoint with standard names gets error, latency, crash and throughput
// checks without configuration. Judge keeps those whose metrics some host
// reports.
func DefaultChecks() []Check {
	return []Check{
		{Name: "error ratio", Ratio: &Ratio{Numerator: MetricRequestErrors, Denominator: MetricRequests}, Kind: KindProportion},
		{Name: "latency", Ratio: &Ratio{Numerator: MetricRequestSeconds, Denominator: MetricRequestLatencyCount}, Kind: KindValue},
		{Name: "throughput", Metric: MetricRequests, Kind: KindCount, Direction: Decrease, Tolerance: 0.2},
		{Name: "process restarts", Metric: MetricProcessRestarts, Kind: KindCount},
		{Name: "crashes", Metric: MetricLeaseLosses, Kind: KindCount},
		{Name: "scrape failures", Metric: MetricScrapeFailures, Kind: KindCount},
		{Name: "config rejections", Metric: MetricConsumerRejections, Kind: KindCount},
		{Name: "callback panics", Metric: MetricCallbackPanics, Kind: KindCount},
	}
}

// PolicyCheckName names the check PolicyCheck returns.
const PolicyCheckName = "policy deny ratio"

// PolicyCheckTolerance is PolicyCheck's relative tolerance: the canary
// hosts' deny ratio may differ from what the preview predicted by a
// quarter of the control hosts' ratio before a significant difference
// fails, because the canary hosts' traffic is a sample of the fleet's the
// preview measured, not the same requests.
const PolicyCheckTolerance = 0.25

// PolicyCheckMinDecisions is the fewest decisions of an experiment the
// hosts must have counted for its commit's rollout to expect their change
// of the deny share (PolicyCheck): fewer say too little of what the canary
// hosts' traffic will do.
const PolicyCheckMinDecisions = 100

// PolicyCheck is the check a committed policy experiment's rollout adds:
// the share of live decisions that deny, expected to move on the canary
// hosts by expected (the experiment's deny share minus the live policy's,
// as measured by the preview) and by nothing else, in either direction.
func PolicyCheck(expected float64) Check {
	return Check{
		Name:      PolicyCheckName,
		Ratio:     &Ratio{Numerator: MetricPolicyDenies, Denominator: MetricPolicyDecisions},
		Kind:      KindProportion,
		Direction: Either,
		Tolerance: PolicyCheckTolerance,
		Expected:  expected,
	}
}

// PolicyDisagreementCheckName names the check PolicyDisagreementCheck
// returns.
const PolicyDisagreementCheckName = "policy disagreement"

// PolicyDisagreementCheck is the other check a committed policy
// experiment's rollout adds, beside PolicyCheck: the share of live
// decisions that the replaced version would have decided otherwise
// (MetricPolicyChanged over MetricPolicyDecisions), expected to move on
// the canary hosts by expected — the share of decisions the preview saw
// the experiment disagree with the live policy on — against the control
// hosts, which run the replaced version and so change nothing. A change
// that flips as many decisions to deny as to allow leaves the deny share
// where it was and passes PolicyCheck whatever it does; this check sees
// it. Same tolerance and direction as PolicyCheck: the canary hosts
// changing much fewer or much more decisions than previewed fails.
func PolicyDisagreementCheck(expected float64) Check {
	return Check{
		Name:      PolicyDisagreementCheckName,
		Ratio:     &Ratio{Numerator: MetricPolicyChanged, Denominator: MetricPolicyDecisions},
		Kind:      KindProportion,
		Direction: Either,
		Tolerance: PolicyCheckTolerance,
		Expected:  expected,
	}
}

// metrics returns the metric names c reads.
func (c Check) metrics() []string {
	if c.Ratio != nil {
		return []string{c.Ratio.Numerator, c.Ratio.Denominator}
	}
	return []string{c.Metric}
}

// describe names what c measures, for explanations.
func (c Check) describe() string {
	if c.Ratio != nil {
		return c.Ratio.Numerator + "/" + c.Ratio.Denominator
	}
	return c.Metric
}

func validateChecks(cs []Check) error {
	seen := map[string]bool{}
	for i, c := range cs {
		at := fmt.Sprintf("checks[%d]", i)
		switch {
		case c.Name == "":
			return fmt.Errorf("%s.name: empty; every check needs a name", at)
		case seen[c.Name]:
			return fmt.Errorf("%s.name: %q repeats an earlier check's name; names must be unique", at, c.Name)
		case (c.Metric == "") == (c.Ratio == nil):
			return fmt.Errorf("%s (%s): set exactly one of metric and ratio", at, c.Name)
		case c.Ratio != nil && (c.Ratio.Numerator == "" || c.Ratio.Denominator == ""):
			return fmt.Errorf("%s.ratio (%s): numerator and denominator are both required", at, c.Name)
		case c.Direction < Increase || c.Direction > Either:
			return fmt.Errorf("%s.direction (%s): %d; want increase, decrease or either", at, c.Name, c.Direction)
		case c.Kind < KindAuto || c.Kind > KindValue:
			return fmt.Errorf("%s.kind (%s): %d; want auto, count, proportion or value", at, c.Name, c.Kind)
		case !(c.Tolerance >= 0) || math.IsInf(c.Tolerance, 0):
			return fmt.Errorf("%s.tolerance (%s): %v; want a finite number ≥ 0 (0.1 allows 10 %% worse)", at, c.Name, c.Tolerance)
		case c.Max != nil && (math.IsNaN(*c.Max) || math.IsInf(*c.Max, 0)):
			return fmt.Errorf("%s.max (%s): %v; want a finite bound", at, c.Name, *c.Max)
		case math.IsNaN(c.Expected) || math.IsInf(c.Expected, 0):
			return fmt.Errorf("%s.expected (%s): %v; want a finite change (0: none expected)", at, c.Name, c.Expected)
		case c.Kind == KindProportion && (c.Expected < -1 || c.Expected > 1):
			return fmt.Errorf("%s.expected (%s): %v; a proportion can move by -1 to 1", at, c.Name, c.Expected)
		}
		seen[c.Name] = true
	}
	return nil
}

// series is one host's data for one check: per interval a numerator and,
// for ratios, a denominator (1 for a plain metric). NaN marks an interval
// without data.
type series struct {
	num, den []float64
}

// hostSeriesOf extracts c's data from a host's metrics, n intervals long.
// ok is false when the host reports none of c's metrics.
func hostSeriesOf(c Check, m map[string][]float64, n int) (series, bool) {
	get := func(name string) ([]float64, bool) {
		v, ok := m[name]
		out := make([]float64, n)
		for i := range out {
			out[i] = math.NaN()
			if i < len(v) {
				out[i] = v[i]
			}
		}
		return out, ok
	}
	if c.Ratio == nil {
		num, ok := get(c.Metric)
		den := make([]float64, n)
		for i := range den {
			den[i] = 1
		}
		return series{num: num, den: den}, ok
	}
	num, ok1 := get(c.Ratio.Numerator)
	den, ok2 := get(c.Ratio.Denominator)
	for i := range num {
		if !(den[i] > 0) || math.IsNaN(num[i]) || math.IsInf(num[i], 0) || math.IsInf(den[i], 0) {
			num[i], den[i] = math.NaN(), math.NaN()
		}
	}
	return series{num: num, den: den}, ok1 && ok2
}

// inferKind resolves KindAuto from the data: a ratio whose numerator is a
// whole number never above its denominator is a proportion, another ratio
// a value; a metric of non-negative whole numbers is a count, another a
// value.
func inferKind(c Check, all []series) Kind {
	if c.Kind != KindAuto {
		return c.Kind
	}
	whole := func(x float64) bool { return x >= 0 && x == math.Trunc(x) }
	for _, s := range all {
		for i, x := range s.num {
			if math.IsNaN(x) {
				continue
			}
			if !whole(x) || (c.Ratio != nil && x > s.den[i]) {
				return KindValue
			}
		}
	}
	if c.Ratio != nil {
		return KindProportion
	}
	return KindCount
}
