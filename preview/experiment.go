package preview

import (
	"encoding/json"
	"fmt"

	"cel.dev/cel-go/cel"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/policy"
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
	// Etag identifies the experiment's configuration (ExperimentEtag).
	Etag string `json:"etag"`
	// LogPrefix begins every decision log line about the experiment.
	LogPrefix string `json:"log_prefix"`
	// Rules are the experiment's rules, by key; none is the no-op policy.
	Rules []ExperimentRule `json:"rules"`
}

// ExperimentRule is one rule of an Experiment.
type ExperimentRule struct {
	Key  string      `json:"key"`
	Rule policy.Rule `json:"rule"`
}

// Parse decodes an Experiment from its preview-namespace property and
// compiles its rules in env.
func Parse(env *cel.Env, p content.Property) (Experiment, *policy.Set, error) {
	var e Experiment
	if err := json.Unmarshal(p.Value, &e); err != nil {
		return Experiment{}, nil, fmt.Errorf("experiment %q: %w", p.Key, err)
	}
	var rules []*policy.CompiledRule
	for _, r := range e.Rules {
		c, err := policy.Compile(env, r.Key, r.Rule)
		if err != nil {
			return Experiment{}, nil, fmt.Errorf("experiment %q: %w", p.Key, err)
		}
		rules = append(rules, c)
	}
	return e, policy.NewSet(rules...), nil
}

// Content is the content of a policy's preview namespace: one property per
// ACTIVE experiment of exps (by id), its Experiment as JSON.
func Content(exps map[string]*lehrpb.PolicyExperiment) (content.Snapshot, error) {
	var props []content.Property
	for id, e := range exps {
		md := e.GetPreviewMetadata()
		if md.GetState() != lehrpb.PolicyPreviewMetadata_ACTIVE {
			continue
		}
		doc := Experiment{Name: e.GetName(), Etag: e.GetEtag(), LogPrefix: md.GetLogPrefix(), Rules: []ExperimentRule{}}
		for _, p := range content.FromProto(e.GetPolicy().GetRules()) {
			r, err := policy.ParseRule(p)
			if err != nil {
				return content.Snapshot{}, fmt.Errorf("experiment %s: %w", e.GetName(), err) // checked when stored
			}
			doc.Rules = append(doc.Rules, ExperimentRule{Key: p.Key, Rule: r})
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return content.Snapshot{}, err
		}
		props = append(props, content.Property{Key: id, Value: b, ContentType: "application/json"})
	}
	return content.New(props)
}
