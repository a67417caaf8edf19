package signals

import (
	"fmt"
	"math"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/proto/lehrpb"
)

// MaxCheckName bounds a check's name.
const MaxCheckName = 63

// FieldError says which field of a check is wrong and why.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Checks converts the wire's canary checks to the judge's: control
// validates an analysis with it, the agent takes the checks a distributor
// passes on with it. Nil for none (the judge's defaults). The error is a
// *FieldError naming the field ("checks[2].direction").
func Checks(cs []*lehrpb.CanaryCheck) ([]canary.Check, error) {
	var out []canary.Check
	seen := map[string]bool{}
	for i, c := range cs {
		f := fmt.Sprintf("checks[%d]", i)
		if c.GetName() == "" || len(c.GetName()) > MaxCheckName {
			return nil, fieldErr(f+".name", "%d bytes; want 1 to %d", len(c.GetName()), MaxCheckName)
		}
		if seen[c.GetName()] {
			return nil, fieldErr(f+".name", "%q is used by an earlier check", c.GetName())
		}
		seen[c.GetName()] = true
		k := canary.Check{Name: c.GetName(), Metric: c.GetMetric(), Tolerance: c.GetTolerance()}
		if r := c.GetRatio(); r != nil {
			k.Ratio = &canary.Ratio{Numerator: r.GetNumerator(), Denominator: r.GetDenominator()}
		}
		if q := c.GetQuery(); q != nil {
			if k.Metric != "" || k.Ratio != nil {
				return nil, fieldErr(f, "set exactly one of metric, ratio and query")
			}
			switch {
			case q.GetValue() != "" && (q.GetNumerator() != "" || q.GetDenominator() != ""):
				return nil, fieldErr(f+".query", "set value (one query for a metric) or numerator and denominator (a ratio), not both")
			case q.GetValue() != "":
				k.Metric = QuerySeries(c.GetName(), "value")
			case q.GetNumerator() == "" || q.GetDenominator() == "":
				return nil, fieldErr(f+".query", "set value (one query for a metric) or both numerator and denominator (a ratio)")
			default:
				k.Ratio = &canary.Ratio{Numerator: QuerySeries(c.GetName(), "numerator"), Denominator: QuerySeries(c.GetName(), "denominator")}
			}
		}
		if (k.Metric == "") == (k.Ratio == nil) {
			return nil, fieldErr(f, "set exactly one of metric, ratio and query")
		}
		if k.Ratio != nil && (k.Ratio.Numerator == "" || k.Ratio.Denominator == "") {
			return nil, fieldErr(f+".ratio", "both numerator and denominator are required")
		}
		if d := c.GetDirection(); d != "" {
			if err := k.Direction.UnmarshalText([]byte(d)); err != nil {
				return nil, fieldErr(f+".direction", "%q; want increase, decrease or either", d)
			}
		}
		if kd := c.GetKind(); kd != "" {
			if err := k.Kind.UnmarshalText([]byte(kd)); err != nil {
				return nil, fieldErr(f+".kind", "%q; want auto, count, proportion or value", kd)
			}
		}
		if t := k.Tolerance; math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return nil, fieldErr(f+".tolerance", "%v; want a number ≥ 0", t)
		}
		if c.Max != nil {
			m := c.GetMax()
			if math.IsNaN(m) || math.IsInf(m, 0) {
				return nil, fieldErr(f+".max", "%v is not a number", m)
			}
			k.Max = &m
		}
		if x := c.GetExpected(); math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fieldErr(f+".expected", "%v is not a number", x)
		}
		k.Expected = c.GetExpected()
		out = append(out, k)
	}
	return out, nil
}

// QuerySeries names the series a check written as a query
// (lehrpb.CanaryQuery) reads for part ("value", "numerator" or
// "denominator"): control fills them from its metrics source, and the
// judge's explanations show them ("errors.numerator/errors.denominator").
func QuerySeries(check, part string) string { return check + "." + part }

// AgentChecks returns the checks of cs an agent can judge on its own
// data: those not written as queries (which only control can read). Nil
// when none is left, so a host whose analysis only queries runs the
// defaults.
func AgentChecks(cs []*lehrpb.CanaryCheck) []*lehrpb.CanaryCheck {
	var out []*lehrpb.CanaryCheck
	for _, c := range cs {
		if c.GetQuery() == nil {
			out = append(out, c)
		}
	}
	return out
}

// Verdict returns the wire's form of a judge's verdict.
func Verdict(v canary.Verdict) lehrpb.CanaryVerdict {
	switch v {
	case canary.Pass:
		return lehrpb.CanaryVerdict_CANARY_VERDICT_PASS
	case canary.Fail:
		return lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL
	}
	return lehrpb.CanaryVerdict_CANARY_VERDICT_NONE
}

// Finite maps NaN and infinities to 0 for the wire (protobuf JSON cannot
// carry them); a result's explanation says what was missing.
func Finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// CheckProto is the wire's form of a judge's check (the inverse of
// Checks for one check).
func CheckProto(c canary.Check) *lehrpb.CanaryCheck {
	out := &lehrpb.CanaryCheck{
		Name: c.Name, Metric: c.Metric, Direction: c.Direction.String(), Kind: c.Kind.String(),
		Tolerance: c.Tolerance, Max: c.Max, Expected: c.Expected,
	}
	if r := c.Ratio; r != nil {
		out.Ratio = &lehrpb.CanaryRatio{Numerator: r.Numerator, Denominator: r.Denominator}
	}
	return out
}
