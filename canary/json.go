package canary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// The JSON file format of an Input, read by DecodeInput and written by
// EncodeInput (what "lehr canary judge --input" reads; docs/canary.md):
//
//	{
//	  "interval_seconds": 10,
//	  "change_index": 60,
//	  "canary":  {"host-1": {"requests": [1000, 998, null, …], …}, …},
//	  "control": {"host-9": {…}, …},
//	  "checks":  [{"name": "errors", "ratio": {"numerator": "request_errors",
//	               "denominator": "requests"}, "direction": "increase",
//	               "kind": "proportion", "tolerance": 0.1, "max": 0.05}]
//	}
//
// null is an interval without data; "checks" may be left out for the
// default checks.
type fileInput struct {
	IntervalSeconds int                              `json:"interval_seconds,omitempty"`
	ChangeIndex     int                              `json:"change_index"`
	Canary          map[string]map[string][]*float64 `json:"canary"`
	Control         map[string]map[string][]*float64 `json:"control"`
	Checks          []fileCheck                      `json:"checks,omitempty"`
	History         map[string]fileHistory           `json:"history,omitempty"` // learnedjson.go
}

type fileCheck struct {
	Name      string     `json:"name"`
	Metric    string     `json:"metric,omitempty"`
	Ratio     *fileRatio `json:"ratio,omitempty"`
	Direction Direction  `json:"direction"`
	Kind      Kind       `json:"kind"`
	Tolerance float64    `json:"tolerance,omitempty"`
	Max       *float64   `json:"max,omitempty"`
	Expected  float64    `json:"expected,omitempty"`
}

type fileRatio struct {
	Numerator   string `json:"numerator"`
	Denominator string `json:"denominator"`
}

// DecodeInput reads an Input from its JSON file format. Unknown fields are
// errors, so a misspelt one does not silently change the judgement.
func DecodeInput(r io.Reader) (Input, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var f fileInput
	if err := dec.Decode(&f); err != nil {
		return Input{}, fmt.Errorf("canary input: %w", err)
	}
	if f.IntervalSeconds < 0 {
		return Input{}, fmt.Errorf("canary input: interval_seconds: %d; want the interval's length in seconds (or leave it out)", f.IntervalSeconds)
	}
	in := Input{ChangeIndex: f.ChangeIndex, Interval: time.Duration(f.IntervalSeconds) * time.Second}
	in.Canary, in.Control = fromFile(f.Canary), fromFile(f.Control)
	in.History = historyFromFile(f.History)
	for _, c := range f.Checks {
		k := Check{Name: c.Name, Metric: c.Metric, Direction: c.Direction, Kind: c.Kind, Tolerance: c.Tolerance, Max: c.Max, Expected: c.Expected}
		if c.Ratio != nil {
			k.Ratio = &Ratio{Numerator: c.Ratio.Numerator, Denominator: c.Ratio.Denominator}
		}
		in.Checks = append(in.Checks, k)
	}
	return in, nil
}

// EncodeInput writes in in its JSON file format.
func EncodeInput(w io.Writer, in Input) error {
	f := fileInput{ChangeIndex: in.ChangeIndex, Canary: toFile(in.Canary), Control: toFile(in.Control)}
	f.IntervalSeconds = int(in.Interval / time.Second)
	f.History = historyToFile(in.History)
	for _, c := range in.Checks {
		fc := fileCheck{Name: c.Name, Metric: c.Metric, Direction: c.Direction, Kind: c.Kind, Tolerance: c.Tolerance, Max: c.Max, Expected: c.Expected}
		if c.Ratio != nil {
			fc.Ratio = &fileRatio{c.Ratio.Numerator, c.Ratio.Denominator}
		}
		f.Checks = append(f.Checks, fc)
	}
	enc := json.NewEncoder(w)
	return enc.Encode(f)
}

func fromFile(hosts map[string]map[string][]*float64) map[string]map[string][]float64 {
	out := make(map[string]map[string][]float64, len(hosts))
	for h, ms := range hosts {
		out[h] = make(map[string][]float64, len(ms))
		for m, vs := range ms {
			v := make([]float64, len(vs))
			for i, x := range vs {
				v[i] = math.NaN()
				if x != nil {
					v[i] = *x
				}
			}
			out[h][m] = v
		}
	}
	return out
}

func toFile(hosts map[string]map[string][]float64) map[string]map[string][]*float64 {
	out := make(map[string]map[string][]*float64, len(hosts))
	for h, ms := range hosts {
		out[h] = make(map[string][]*float64, len(ms))
		for m, vs := range ms {
			v := make([]*float64, len(vs))
			for i, x := range vs {
				if !math.IsNaN(x) {
					v[i] = &x
				}
			}
			out[h][m] = v
		}
	}
	return out
}

// number is a float64 that JSON-encodes NaN and infinities as null.
type number float64

func (n number) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

type jsonCheck struct {
	Name          string     `json:"name"`
	Verdict       Verdict    `json:"verdict"`
	Explanation   string     `json:"explanation"`
	Test          string     `json:"test,omitempty"`
	CanaryBefore  number     `json:"canary_before"`
	CanaryAfter   number     `json:"canary_after"`
	ControlBefore number     `json:"control_before"`
	ControlAfter  number     `json:"control_after"`
	CanaryHosts   int        `json:"canary_hosts"`
	ControlHosts  int        `json:"control_hosts"`
	CanaryWorse   int        `json:"canary_worse"`
	Effect        number     `json:"effect"`
	Statistic     number     `json:"statistic"`
	DF            number     `json:"df"`
	P             number     `json:"p"`
	Threshold     number     `json:"threshold"`
	AA            *jsonCheck `json:"aa,omitempty"`
	AASplits      int        `json:"aa_splits,omitempty"`
	AADiffer      int        `json:"aa_differ,omitempty"`
	// What this judgement adds to a learned history, and what history did
	// (learnedjson.go).
	Sample  *fileSample  `json:"sample,omitempty"`
	Learned *jsonLearned `json:"learned,omitempty"`
}

func toJSONCheck(c CheckResult) *jsonCheck {
	j := &jsonCheck{Name: c.Name, Verdict: c.Verdict, Explanation: c.Explanation, Test: c.Test,
		CanaryBefore: number(c.CanaryBefore), CanaryAfter: number(c.CanaryAfter),
		ControlBefore: number(c.ControlBefore), ControlAfter: number(c.ControlAfter),
		CanaryHosts: c.CanaryHosts, ControlHosts: c.ControlHosts, CanaryWorse: c.CanaryWorse,
		Effect: number(c.Effect), Statistic: number(c.Statistic), DF: number(c.DF), P: number(c.P), Threshold: number(c.Threshold),
		AASplits: c.AASplits, AADiffer: c.AADiffer, Sample: toJSONSample(c.Sample), Learned: toJSONLearned(c.Learned)}
	if c.AA != nil {
		j.AA = toJSONCheck(*c.AA)
	}
	return j
}

// MarshalJSON encodes r with its verdicts as words and numbers that are
// not (NaN: no data) as null.
func (r Result) MarshalJSON() ([]byte, error) {
	checks := make([]*jsonCheck, len(r.Checks))
	for i, c := range r.Checks {
		checks[i] = toJSONCheck(c)
	}
	var b bytes.Buffer
	err := json.NewEncoder(&b).Encode(struct {
		Verdict        Verdict      `json:"verdict"`
		Reason         string       `json:"reason"`
		Look           int          `json:"look"`
		Looks          int          `json:"looks"`
		AfterIntervals int          `json:"after_intervals"`
		Checks         []*jsonCheck `json:"checks"`
	}{r.Verdict, r.Reason, r.Look, r.Looks, r.AfterIntervals, checks})
	return bytes.TrimSpace(b.Bytes()), err
}
