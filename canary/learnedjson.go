package canary

import "math"

// The learned history in the JSON file format (json.go): per check name,
//
//	"history": {"latency": {"after_intervals": 30, "samples": [
//	    {"effect": 0.004, "level_variance": 0.0012, "spread_variance": 0.03, "df": 19}, …]}}
//
// what a namespace's kept evaluations measured (docs/canary.md, "Learning
// from history"); null is a number a sample does not have.
type fileHistory struct {
	After   int          `json:"after_intervals"`
	Samples []fileSample `json:"samples"`
}

type fileSample struct {
	Effect    *float64 `json:"effect"`
	LevelVar  *float64 `json:"level_variance"`
	SpreadVar *float64 `json:"spread_variance"`
	DF        int      `json:"df"`
}

func orNaN(x *float64) float64 {
	if x == nil {
		return math.NaN()
	}
	return *x
}

func orNull(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func historyFromFile(f map[string]fileHistory) map[string]History {
	if len(f) == 0 {
		return nil
	}
	out := make(map[string]History, len(f))
	for name, h := range f {
		x := History{After: h.After}
		for _, s := range h.Samples {
			x.Samples = append(x.Samples, Sample{After: h.After, Effect: orNaN(s.Effect), LevelVar: orNaN(s.LevelVar), SpreadVar: orNaN(s.SpreadVar), DF: s.DF})
		}
		out[name] = x
	}
	return out
}

func historyToFile(hs map[string]History) map[string]fileHistory {
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]fileHistory, len(hs))
	for name, h := range hs {
		f := fileHistory{After: h.After, Samples: []fileSample{}}
		for _, s := range h.Samples {
			f.Samples = append(f.Samples, fileSample{Effect: orNull(s.Effect), LevelVar: orNull(s.LevelVar), SpreadVar: orNull(s.SpreadVar), DF: s.DF})
		}
		out[name] = f
	}
	return out
}

// jsonLearned is Learned in a result's JSON.
type jsonLearned struct {
	Evaluations    int    `json:"evaluations"`
	Used           bool   `json:"used"`
	Typical        number `json:"typical"`
	Mean           number `json:"mean"`
	Tolerance      number `json:"tolerance"`
	NoiseRatio     number `json:"noise_ratio"`
	NoiseGrown     bool   `json:"noise_grown"`
	PooledDF       number `json:"pooled_df"`
	ChangedVerdict bool   `json:"changed_verdict"`
}

func toJSONLearned(u *Learned) *jsonLearned {
	if u == nil {
		return nil
	}
	return &jsonLearned{Evaluations: u.Evaluations, Used: u.Used, Typical: number(u.Typical), Mean: number(u.Mean), Tolerance: number(u.Tolerance),
		NoiseRatio: number(u.NoiseRatio), NoiseGrown: u.NoiseGrown, PooledDF: number(u.PooledDF), ChangedVerdict: u.ChangedVerdict}
}

func toJSONSample(s *Sample) *fileSample {
	if s == nil {
		return nil
	}
	return &fileSample{Effect: orNull(s.Effect), LevelVar: orNull(s.LevelVar), SpreadVar: orNull(s.SpreadVar), DF: s.DF}
}
