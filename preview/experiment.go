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
	// Committed is set on the comparison only (ComparisonKey): the
	// committed version whose hosts evaluate Rules, the rules of the
	// version it replaced (Etag is that version's live etag). Zero for
	// an experiment.
	Committed uint64 `json:"committed,omitempty"`
}

// Compares reports whether e is the comparison of a committed version
// with the version it replaced, rather than an experiment.
func (e Experiment) Compares() bool { return e.Committed != 0 }

// AppliesTo reports whether a host whose live version is live evaluates
// e: an experiment, always; the comparison, only at the committed
// version — a host still at the replaced version decides as it does, so
// nothing of it changed and there is nothing to evaluate.
func (e Experiment) AppliesTo(live uint64) bool { return e.Committed == 0 || e.Committed == live }

// ComparisonKey is the key of the comparison (Comparison) in a policy's
// preview namespace, beside the experiments' ids. An experiment id begins
// with a letter, so none is ever this one.
const ComparisonKey = "_committed"

// Comparison is the version a committed experiment replaced, previewed
// in reverse while the committed version rolls out (docs/preview.md,
// "The committed version's canary"): hosts whose live version is
// Committed evaluate Replaced's rules beside it and count the decisions
// the two differ on — the signal policy_changed, which the rollout's
// canary analysis expects to be the share of decisions the experiment's
// preview disagreed with the live policy on. Disagreement is symmetric,
// so this is the same quantity, measured on the canary hosts' traffic
// under the version they now enforce.
type Comparison struct {
	// Policy is the policy's resource name: the comparison's name in
	// decision log lines, whose experiment_etag is Replaced's live etag.
	Policy string
	// Committed is the committed version; Replaced the version it
	// replaced, whose content Rules is.
	Committed, Replaced uint64
	Rules               []content.Property
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
// ACTIVE experiment of exps (by id), its Experiment as JSON, and, when
// cmp is not nil, the comparison under ComparisonKey, an Experiment
// whose Committed is set.
func Content(exps map[string]*lehrpb.PolicyExperiment, cmp *Comparison) (content.Snapshot, error) {
	var props []content.Property
	if cmp != nil {
		doc := Experiment{Name: cmp.Policy, Etag: LiveEtag(cmp.Replaced), LogPrefix: LogPrefix, Rules: []ExperimentRule{}, Committed: cmp.Committed}
		for _, p := range cmp.Rules {
			r, err := policy.ParseRule(p)
			if err != nil {
				return content.Snapshot{}, fmt.Errorf("comparison with version %d: %w", cmp.Replaced, err) // checked when published
			}
			doc.Rules = append(doc.Rules, ExperimentRule{Key: p.Key, Rule: r})
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return content.Snapshot{}, err
		}
		props = append(props, content.Property{Key: ComparisonKey, Value: b, ContentType: "application/json"})
	}
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
