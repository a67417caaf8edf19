package canary

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Defaults of Options.
const (
	DefaultAlpha = 0.01
	DefaultLooks = 4
)

// minBefore is the fewest intervals with data a host needs before the
// change to count in a check.
const minBefore = 3

// Judge decides whether the canary hosts of in got worse than its control
// hosts after the change, per check and overall. It returns an error only
// for input that can never be judged (which field, why); data that is
// merely insufficient gives a None verdict saying what is missing.
//
// Each check compares every host with itself (after the change vs before)
// and canary hosts' changes with control hosts' changes over the same
// intervals: hosts, not intervals, are the unit of replication, so
// autocorrelated metrics, host-to-host differences and fleet-wide trends
// do not produce false failures. docs/canary.md has the details.
func Judge(in Input, opts Options) (Result, error) {
	o, err := opts.resolve()
	if err != nil {
		return Result{}, err
	}
	if err := in.validate(); err != nil {
		return Result{}, err
	}
	checks := in.Checks
	if checks == nil {
		checks = in.reportedDefaults()
	}
	if len(in.Extra) > 0 {
		checks = append(slices.Clip(checks), in.Extra...)
	}
	if err := validateChecks(checks); err != nil {
		return Result{}, err
	}
	n := in.length()
	after := max(0, n-in.ChangeIndex)
	bake, looks := o.BakeIntervals, o.Looks
	if bake == 0 {
		bake, looks = after, 1
	}
	ends := make([]int, looks)
	reached := 0
	for j := range ends {
		ends[j] = max(1, int(math.Ceil(float64(j+1)*float64(bake)/float64(looks))))
		if bake > 0 && ends[j] <= after {
			reached = j + 1
		}
	}
	res := Result{Looks: looks, AfterIntervals: after, LookEnds: ends}
	if len(checks) == 0 {
		res.Reason = "no host reports any metric a check reads: nothing to judge"
		return res, nil
	}
	if reached == 0 {
		res.Reason = fmt.Sprintf("the first look needs %d interval(s) after the change; %d so far", ends[0], after)
		return res, nil
	}
	prep := make([]prepared, len(checks))
	for i, c := range checks {
		prep[i] = in.prepare(c, n)
	}
	history := make([][]LookResult, len(checks))
	for j := 1; j <= reached; j++ {
		alpha := spent(o.Alpha, float64(ends[j-1])/float64(bake))
		if j > 1 {
			alpha -= spent(o.Alpha, float64(ends[j-2])/float64(bake))
		}
		res = judgeLook(prep, in, lookPlan{look: j, looks: looks, after: ends[j-1], alpha: alpha, final: j == looks})
		for i, c := range res.Checks {
			history[i] = append(history[i], LookResult{Look: j, AfterIntervals: ends[j-1], Verdict: c.Verdict, P: c.P, Threshold: c.Threshold})
		}
		if res.Verdict == Fail {
			break
		}
	}
	for i := range res.Checks {
		res.Checks[i].History = history[i]
	}
	res.LookEnds = ends
	return res, nil
}

func (o Options) resolve() (Options, error) {
	switch {
	case math.IsNaN(o.Alpha) || o.Alpha < 0 || o.Alpha > 0.5:
		return o, fmt.Errorf("alpha: %v; want more than 0 and at most 0.5 (0 means %v)", o.Alpha, DefaultAlpha)
	case o.BakeIntervals < 0:
		return o, fmt.Errorf("bake intervals: %d; want 0 (judge what is there once) or more", o.BakeIntervals)
	case o.Looks < 0 || o.Looks > 100:
		return o, fmt.Errorf("looks: %d; want 1 to 100 (0 means %d)", o.Looks, DefaultLooks)
	}
	if o.Alpha == 0 {
		o.Alpha = DefaultAlpha
	}
	if o.Looks == 0 {
		o.Looks = DefaultLooks
	}
	if o.BakeIntervals > 0 && o.Looks > o.BakeIntervals {
		o.Looks = o.BakeIntervals
	}
	return o, nil
}

func (in Input) validate() error {
	if in.ChangeIndex < 0 {
		return fmt.Errorf("change index: %d; want ≥ 0 (the first interval after the change)", in.ChangeIndex)
	}
	for _, side := range []struct {
		name  string
		hosts map[string]map[string][]float64
	}{{"canary", in.Canary}, {"control", in.Control}} {
		for h, ms := range side.hosts {
			if h == "" {
				return fmt.Errorf("%s: a host with an empty name", side.name)
			}
			if _, dup := in.Canary[h]; dup && side.name == "control" {
				return fmt.Errorf("control: host %q is also a canary host; a host is one or the other", h)
			}
			for m, v := range ms {
				for i, x := range v {
					if math.IsInf(x, 0) {
						return fmt.Errorf("%s[%q][%q][%d]: infinite; use NaN for an interval without data", side.name, h, m, i)
					}
				}
			}
		}
	}
	return nil
}

// length returns the longest series of in.
func (in Input) length() int {
	n := 0
	for _, hosts := range []map[string]map[string][]float64{in.Canary, in.Control} {
		for _, ms := range hosts {
			for _, v := range ms {
				n = max(n, len(v))
			}
		}
	}
	return n
}

// reportedDefaults returns the default checks whose metrics some host has.
func (in Input) reportedDefaults() []Check {
	has := map[string]bool{}
	for _, hosts := range []map[string]map[string][]float64{in.Canary, in.Control} {
		for _, ms := range hosts {
			for m := range ms {
				has[m] = true
			}
		}
	}
	out := []Check{}
	for _, c := range DefaultChecks() {
		if !slices.ContainsFunc(c.metrics(), func(m string) bool { return !has[m] }) {
			out = append(out, c)
		}
	}
	return out
}

// prepared is one check's data on every host, sorted by host name.
type prepared struct {
	check           Check
	canary, control []hostSeries
}

type hostSeries struct {
	host string
	series
}

func (in Input) prepare(c Check, n int) prepared {
	p := prepared{check: c}
	for _, h := range slices.Sorted(maps.Keys(in.Canary)) {
		if s, ok := hostSeriesOf(c, in.Canary[h], n); ok {
			p.canary = append(p.canary, hostSeries{h, s})
		}
	}
	for _, h := range slices.Sorted(maps.Keys(in.Control)) {
		if s, ok := hostSeriesOf(c, in.Control[h], n); ok {
			p.control = append(p.control, hostSeries{h, s})
		}
	}
	return p
}

// lookPlan is one look of a judgement.
type lookPlan struct {
	look, looks, after int
	alpha              float64 // spent at this look over every test
	final              bool
}

func judgeLook(prep []prepared, in Input, lp lookPlan) Result {
	end := in.ChangeIndex + lp.after
	evals := make([]*evaluation, len(prep))
	tests := 0
	for i, p := range prep {
		evals[i] = evaluate(p, in, end)
		tests += len(evals[i].tests)
	}
	thr := lp.alpha / float64(max(1, tests))
	res := Result{Look: lp.look, Looks: lp.looks, AfterIntervals: lp.after}
	var names []string
	var verdicts []Verdict
	for _, e := range evals {
		cr := e.finish(thr)
		res.Checks = append(res.Checks, cr)
		names, verdicts = append(names, cr.Name), append(verdicts, cr.Verdict)
	}
	res.Verdict, res.Reason = lp.verdict(names, verdicts, "the canary hosts got worse than the control hosts")
	return res
}

// verdict combines the checks' verdicts at this look: Fail if any failed
// (worse says how), else None if any lacked data or the last look is still
// to come, else Pass; and the sentence saying why.
func (lp lookPlan) verdict(names []string, verdicts []Verdict, worse string) (Verdict, string) {
	var failed, lacking []string
	for i, v := range verdicts {
		switch v {
		case Fail:
			failed = append(failed, names[i])
		case None:
			lacking = append(lacking, names[i])
		}
	}
	switch {
	case len(failed) > 0:
		return Fail, fmt.Sprintf("%s failed at look %d of %d (%d interval(s) after the change): %s", list(failed, "check"), lp.look, lp.looks, lp.after, worse)
	case len(lacking) > 0:
		return None, fmt.Sprintf("%s lacked data at look %d of %d: see their explanations", list(lacking, "check"), lp.look, lp.looks)
	case !lp.final:
		return None, fmt.Sprintf("no check failed at look %d of %d (%d interval(s) after the change); a pass needs the last look", lp.look, lp.looks, lp.after)
	}
	return Pass, fmt.Sprintf("all %d check(s) passed at the last look (%d interval(s) after the change)", len(verdicts), lp.after)
}

// list names checks: `check "a"` or `checks "a", "b"`.
func list(names []string, what string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) > 1 {
		what += "s"
	}
	return what + " " + strings.Join(q, ", ")
}
