package policy

import (
	"encoding/json"
	"fmt"

	"cel.dev/cel-go/cel"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Experiment is a policy experiment being previewed, as hosts receive it:
// the JSON value of its property in the policy's preview namespace
// ("<namespace>--preview", keyed by the experiment's id; docs/files.md).
// Control writes it; consumers evaluate it beside the live rules and never
// enforce it.
type Experiment struct {
	// Name is the experiment's resource name.
	Name string `json:"name"`
	// Etag identifies the experiment's configuration.
	Etag string `json:"etag"`
	// LogPrefix begins every decision log line about the experiment.
	LogPrefix string `json:"log_prefix"`
	// Rules are the experiment's rules, by key; none is the no-op policy.
	Rules []ExperimentRule `json:"rules"`
}

// ExperimentRule is one rule of an Experiment.
type ExperimentRule struct {
	Key  string `json:"key"`
	Rule Rule   `json:"rule"`
}

// ParseExperiment decodes an Experiment from its preview-namespace
// property and compiles its rules in env.
func ParseExperiment(env *cel.Env, p content.Property) (Experiment, *Set, error) {
	var e Experiment
	if err := json.Unmarshal(p.Value, &e); err != nil {
		return Experiment{}, nil, fmt.Errorf("experiment %q: %w", p.Key, err)
	}
	s := &Set{}
	for _, r := range e.Rules {
		c, err := Compile(env, r.Key, r.Rule)
		if err != nil {
			return Experiment{}, nil, fmt.Errorf("experiment %q: %w", p.Key, err)
		}
		s.add(c)
	}
	return e, s, nil
}

// AddCounts adds src's decision counts to dst's (the etags are left
// alone). Agents, distributors and control sum preview counts with it.
func AddCounts(dst, src *lehrpb.PreviewCounts) {
	dst.AllowAllow += src.GetAllowAllow()
	dst.DenyDeny += src.GetDenyDeny()
	dst.AllowDeny += src.GetAllowDeny()
	dst.DenyAllow += src.GetDenyAllow()
	dst.ExperimentErrors += src.GetExperimentErrors()
}

// Decisions returns the decisions c counts, and how many of them the
// experiment disagreed with the live policy on.
func Decisions(c *lehrpb.PreviewCounts) (total, disagree uint64) {
	disagree = c.GetAllowDeny() + c.GetDenyAllow()
	return c.GetAllowAllow() + c.GetDenyDeny() + disagree, disagree
}
