// Package canary is Lehr's canary analysis: given per-host time series of a
// canary population and a control population around a change, it decides
// whether the change made things worse, per check and overall, and says why.
//
// The package is pure: no I/O, no clock, no goroutines. It is a leaf that
// every role may import (control runs evaluations, agents run host-level
// checks, the lehr CLI replays past changes with "lehr canary judge").
// docs/canary.md explains the statistics and how to read a verdict.
package canary

import "time"

// Standard metric names. The agent reports its own signals and the
// application metrics it discovers under these names; the default checks
// (DefaultChecks) use them. Counters are per-interval increments; sampled
// values are NaN for an interval without data.
const (
	// Signals the agent has without any configuration (0 when nothing happened).
	MetricConsumerApplies    = "consumer_applies"    // consumers that applied a version
	MetricConsumerRejections = "consumer_rejections" // consumers that refused a version
	MetricCallbackPanics     = "callback_panics"     // consumer callbacks that panicked
	MetricCallbackSeconds    = "callback_seconds"    // total seconds spent in consumer callbacks
	MetricApplySeconds       = "apply_seconds"       // file written → consumers applied, summed
	MetricLeaseLosses        = "lease_losses"        // leases that lapsed without a clean close (crash signal)
	MetricScrapeFailures     = "scrape_failures"     // failed scrapes of consumers' metrics endpoints

	// Application metrics discovered by scraping (NaN without a scrape).
	MetricRequests            = "requests"              // requests served
	MetricRequestErrors       = "request_errors"        // requests that failed (HTTP 5xx, gRPC server-fault codes)
	MetricRequestSeconds      = "request_seconds"       // total seconds of requests measured for latency
	MetricRequestLatencyCount = "request_latency_count" // requests measured for latency
	MetricProcessRestarts     = "process_restarts"      // process restarts seen (start time moved or counters reset)

	// Decisions of a policy namespace's live rules, counted by the consumer
	// library's Evaluate (0 when nothing was decided).
	MetricPolicyDecisions = "policy_decisions" // live decisions made
	MetricPolicyDenies    = "policy_denies"    // of them, denials
	// Of them, those the version a committed policy experiment replaced
	// would have decided otherwise: counted while the host's live version
	// is the committed one and the policy's preview namespace carries the
	// replaced rules (docs/preview.md, "The committed version's canary");
	// 0 otherwise, when nothing is compared.
	MetricPolicyChanged = "policy_changed"
)

// Verdict is the outcome of a check or of a whole judgement.
type Verdict int

const (
	// None means there is not enough data to decide; the result says what
	// is missing. It is the zero value.
	None Verdict = iota
	// Pass means no check found the canary worse than the control.
	Pass
	// Fail means at least one check found the canary worse than the control.
	Fail
)

// Direction says which way a metric moving is bad.
type Direction int

const (
	// Increase: the metric going up is bad (errors, latency). The zero value.
	Increase Direction = iota
	// Decrease: the metric going down is bad (throughput, success count).
	Decrease
	// Either: any significant move is bad.
	Either
)

// Kind says what a check's values are, which decides the scale the
// statistics work on.
type Kind int

const (
	// KindAuto infers the kind: a ratio whose numerator never exceeds its
	// denominator is a proportion, another ratio a mean value; a metric whose
	// values are all non-negative integers is a count, another a value.
	KindAuto Kind = iota
	// KindCount is a count of events per interval (errors, restarts).
	KindCount
	// KindProportion is a ratio of two counts, numerator ≤ denominator
	// (error ratio).
	KindProportion
	// KindValue is a continuous value (latency, a gauge, a mean).
	KindValue
)

// Ratio names the two metrics of a ratio check: per interval, the sum of
// Numerator over the sum of Denominator.
type Ratio struct {
	Numerator   string
	Denominator string
}

// Check is one thing the judge compares between canary and control: a
// metric or a ratio of two metrics, and which way is bad.
type Check struct {
	// Name identifies the check in results. Required, unique in a judgement.
	Name string
	// Metric is the metric compared. Exactly one of Metric and Ratio is set.
	Metric string
	// Ratio is the ratio compared. Exactly one of Metric and Ratio is set.
	Ratio *Ratio
	// Direction says which move is bad. Zero means Increase.
	Direction Direction
	// Kind is what the values are. Zero means KindAuto.
	Kind Kind
	// Tolerance is the relative change allowed before a significant move
	// counts as worse: 0.1 lets the canary be up to 10 % worse than the
	// control. Zero means any significant move counts. Must be ≥ 0.
	Tolerance float64
	// Max, when set, is an absolute bound: a canary host whose value after
	// the change exceeds it (for a ratio: the ratio over the whole after
	// window) fails the check whatever the control does. Nil means no bound.
	Max *float64
	// Expected is the change the canary hosts are expected to show against
	// the control hosts, in the check's unit (for a ratio, as a ratio):
	// what a preview measured, such as a committed policy experiment's
	// extra deny share (PolicyCheck) or the share of decisions it changes
	// (PolicyDisagreementCheck). The judge asks whether the canary
	// hosts moved by something other than Expected, by more than
	// Tolerance: with Direction Either, too little is as wrong as too much.
	// Zero means no change is expected. A check expecting a change is
	// judged even when no host had any event: an expected change that did
	// not happen is a failure, not "nothing to compare".
	Expected float64
}

// Input is one judgement's data: per-host series of a canary population and
// a control population, one value per interval, aligned so that index i is
// the same interval on every host.
type Input struct {
	// Interval is the length of one interval. Used in explanations only;
	// zero means unknown.
	Interval time.Duration
	// ChangeIndex is the first interval after the change, the same on every
	// host: intervals before it are before the change.
	ChangeIndex int
	// Canary maps a canary host to its metrics, each a series of values.
	Canary map[string]map[string][]float64
	// Control maps a control host to its metrics.
	Control map[string]map[string][]float64
	// Checks are the checks to run. Nil means DefaultChecks() restricted to
	// the metrics some host reports.
	Checks []Check
	// Extra are checks run beside Checks (or the defaults), whatever those
	// are: what one change adds, such as PolicyCheck for a committed
	// policy experiment.
	Extra []Check
	// History maps a check's name to what the namespace's kept
	// evaluations say about it (learned.go); nil learns nothing.
	History map[string]History
}

// Options tunes a judgement. The zero value is valid.
type Options struct {
	// Alpha is the false-failure rate allowed per judgement, over every
	// check and every look. Zero means 0.01.
	Alpha float64
	// BakeIntervals is the planned number of intervals after the change.
	// The judgement looks at Looks evenly spaced points of the bake and
	// spends Alpha across them, so asking again every interval does not
	// raise the false-failure rate; data past the latest look is not used,
	// so the verdict stays the same between looks. Zero means the
	// intervals present after ChangeIndex, judged once.
	BakeIntervals int
	// Looks is the number of looks over the bake. Zero means 4.
	Looks int
}

// Result is the outcome of a judgement.
type Result struct {
	// Verdict is Fail if any check failed, else None if any check (or the
	// whole input) lacked data, else Pass.
	Verdict Verdict
	// Reason says in one sentence why the verdict is what it is.
	Reason string
	// Look is the look this verdict was taken at (1-based) and Looks their
	// number; AfterIntervals the intervals after the change used.
	Look, Looks, AfterIntervals int
	// LookEnds holds, per look of the bake (reached or not), the intervals
	// after the change it judges: look j judges up to LookEnds[j-1].
	LookEnds []int
	// Checks holds one result per check, in the order of the checks.
	Checks []CheckResult
}

// CheckResult is the outcome of one check, with the numbers behind it.
type CheckResult struct {
	Name    string
	Verdict Verdict
	// Explanation says in words a non-statistician reads what the data
	// showed and why that gives this verdict.
	Explanation string
	// Test names the statistical test used.
	Test string
	// Medians across hosts of the per-host values before and after the
	// change, in the check's own unit (a ratio as a ratio).
	CanaryBefore, CanaryAfter, ControlBefore, ControlAfter float64
	// CanaryHosts and ControlHosts are the hosts that had data;
	// CanaryWorse counts canary hosts whose change was worse than every
	// control host's.
	CanaryHosts, ControlHosts, CanaryWorse int
	// Effect is the canary's change minus the control's change on the
	// test's scale, Statistic and DF the test statistic and its degrees of
	// freedom, P its one- or two-sided p-value, Threshold the p-value this
	// look needed to fail.
	Effect, Statistic, DF, P, Threshold float64
	// AA is the same check run control against control (two alternating
	// halves of the control hosts); nil with fewer than 4 control hosts.
	// Its AASplits and AADiffer say how many random halvings of the
	// control hosts were compared and how many differed at p < 0.05: the
	// check's observed A/A false-failure rate at that level, about 5 %
	// when the control hosts are alike.
	AA                 *CheckResult
	AASplits, AADiffer int
	// CanarySeries and ControlSeries are, per interval from the input's
	// first to the last one this look judged, the median across the hosts
	// that counted in the check of the interval's value in the check's
	// unit (numerator over denominator for a ratio); NaN where no such
	// host had data. What the judge compares is each host's level shift at
	// the change on the check's scale; these show the same data, one
	// curve per population, to be looked at.
	CanarySeries, ControlSeries []float64
	// History is the check at every look judged so far, first to this one:
	// the sequential analysis.
	History []LookResult
	// Sample is what this judgement adds to the check's learned history
	// if its change is kept (nil without a test); Learned how the
	// history in Input.History was used (nil without one).
	Sample  *Sample
	Learned *Learned
}

// LookResult is one check at one look.
type LookResult struct {
	// Look is 1-based; AfterIntervals the intervals after the change it
	// judged.
	Look, AfterIntervals int
	Verdict              Verdict
	// P is the check's p-value at the look (NaN without a test), Threshold
	// the p-value the look needed to fail.
	P, Threshold float64
}
