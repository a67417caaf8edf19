package preview

import (
	"encoding/json"
	"time"

	"lehr.dev/lehr/policy"
)

// Result is one side of a decision log line: a policy's decision.
type Result struct {
	Effect policy.Effect `json:"effect"`
	Rule   string        `json:"rule,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// LogLine is a decision log line's JSON, after the log prefix
// (docs/preview.md, "Decision log").
type LogLine struct {
	Time             time.Time      `json:"time"`
	Policy           string         `json:"policy"`
	Experiment       string         `json:"experiment"`
	LiveEtag         string         `json:"live_etag"`
	ExperimentEtag   string         `json:"experiment_etag"`
	Live             Result         `json:"live"`
	ExperimentResult Result         `json:"experiment_result"`
	Agree            bool           `json:"agree"`
	Input            map[string]any `json:"input"`
}

// Format returns the line as written: prefix (LogPrefix when empty), a
// space, the JSON object and a newline. An input JSON cannot encode is
// replaced by the reason.
func (l LogLine) Format(prefix string) []byte {
	b, err := json.Marshal(l)
	if err != nil {
		l.Input = map[string]any{"unencodable": err.Error()}
		b, _ = json.Marshal(l)
	}
	if prefix == "" {
		prefix = LogPrefix
	}
	out := make([]byte, 0, len(prefix)+len(b)+2)
	return append(append(append(append(out, prefix...), ' '), b...), '\n')
}
