package control_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func ruleProp(key, effect, cond string) *lehrpb.Property {
	return prop(key, "application/json", fmt.Sprintf(`{"effect": %q, "condition": %q}`, effect, cond))
}

// opResponse checks that op is a completed operation of this API and
// unpacks its response into into and its metadata into meta.
func opResponse(t *testing.T, op *longrunningpb.Operation, into, meta proto.Message) {
	t.Helper()
	if !op.GetDone() || op.GetName() == "" {
		t.Fatalf("operation %v: want a named operation, done", op)
	}
	if err := op.GetResponse().UnmarshalTo(into); err != nil {
		t.Fatalf("operation response: %v (want %T)", err, into)
	}
	if err := op.GetMetadata().UnmarshalTo(meta); err != nil {
		t.Fatalf("operation metadata: %v (want %T)", err, meta)
	}
}

func wantAPIError(t *testing.T, what string, err error, code codes.Code, field string) {
	t.Helper()
	e := apierror.FromError(err)
	if err == nil || e.Code != code || (field != "" && e.Field != field) {
		t.Fatalf("%s: %v; want %v on field %q", what, err, code, field)
	}
}

// previewRig is one control plane shared by the subtests of a preview
// test: starting control (and its etcd) once instead of once per subtest.
// Each subtest works in a domain of its own (env), so none sees another's
// policies, experiments or preview namespaces.
type previewRig struct {
	cl      lehrpb.ControlClient
	domains atomic.Int64 // handed out by env
}

func newPreviewRig(t *testing.T) *previewRig {
	return &previewRig{cl: controltest.StartControl(t, control.Options{}).Client}
}

// previewEnv is one subtest's live policy, fw, in a domain of its own.
type previewEnv struct {
	t      *testing.T
	cl     lehrpb.ControlClient
	domain string
	ns     string // the live policy's namespace, "<domain>/fw"
	policy string // its resource name, "domains/<domain>/policies/fw"
}

// env creates a new domain whose live policy fw has rules (none: the
// no-op policy), as version 1.
func (r *previewRig) env(t *testing.T, rules ...*lehrpb.Property) previewEnv {
	t.Helper()
	d := fmt.Sprintf("shop%d", r.domains.Add(1))
	p := previewEnv{t: t, cl: r.cl, domain: d, ns: d + "/fw", policy: "domains/" + d + "/policies/fw"}
	createDomain(t, r.cl, d, nil)
	if _, err := r.cl.Publish(testCtx(t), &lehrpb.PublishRequest{
		Namespace: p.ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: rules, Message: "live",
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// otherPolicy is the resource name of another policy of p's domain.
func (p previewEnv) otherPolicy(name string) string {
	return "domains/" + p.domain + "/policies/" + name
}

func (p previewEnv) create(id string, rules ...*lehrpb.Property) *lehrpb.PolicyExperiment {
	p.t.Helper()
	op, err := p.cl.CreatePolicyExperiment(testCtx(p.t), &lehrpb.CreatePolicyExperimentRequest{
		Parent: p.policy, PolicyExperimentId: id,
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.policy, Rules: rules}},
	})
	if err != nil {
		p.t.Fatalf("CreatePolicyExperiment(%s): %v", id, err)
	}
	e := new(lehrpb.PolicyExperiment)
	opResponse(p.t, op, e, new(lehrpb.CreatePolicyExperimentMetadata))
	return e
}

func (p previewEnv) get(id string) *lehrpb.PolicyExperiment {
	p.t.Helper()
	e, err := p.cl.GetPolicyExperiment(testCtx(p.t), &lehrpb.GetPolicyExperimentRequest{Name: p.policy + "/experiments/" + id})
	if err != nil {
		p.t.Fatalf("GetPolicyExperiment(%s): %v", id, err)
	}
	return e
}

func (p previewEnv) start(id string) *lehrpb.PolicyExperiment {
	p.t.Helper()
	op, err := p.cl.StartPreviewPolicyExperiment(testCtx(p.t), &lehrpb.StartPreviewPolicyExperimentRequest{Name: p.policy + "/experiments/" + id})
	if err != nil {
		p.t.Fatalf("StartPreview(%s): %v", id, err)
	}
	e := new(lehrpb.PolicyExperiment)
	opResponse(p.t, op, e, new(lehrpb.StartPreviewPolicyExperimentMetadata))
	return e
}

func (p previewEnv) stop(id string) *lehrpb.PolicyExperiment {
	p.t.Helper()
	op, err := p.cl.StopPreviewPolicyExperiment(testCtx(p.t), &lehrpb.StopPreviewPolicyExperimentRequest{Name: p.policy + "/experiments/" + id})
	if err != nil {
		p.t.Fatalf("StopPreview(%s): %v", id, err)
	}
	e := new(lehrpb.PolicyExperiment)
	opResponse(p.t, op, e, new(lehrpb.StopPreviewPolicyExperimentMetadata))
	return e
}

// previewed returns the experiments the hosts are sent: the preview
// namespace's properties, decoded.
func (p previewEnv) previewed() map[string]map[string]any {
	p.t.Helper()
	resp, err := p.cl.Get(testCtx(p.t), &lehrpb.GetRequest{Namespace: p.ns + "--preview"})
	if err != nil && apierror.FromError(err).Code == codes.NotFound {
		return nil
	}
	if err != nil {
		p.t.Fatalf("Get preview namespace: %v", err)
	}
	out := map[string]map[string]any{}
	for _, pr := range resp.GetProperties() {
		var doc map[string]any
		if err := json.Unmarshal(pr.GetValue(), &doc); err != nil {
			p.t.Fatalf("preview property %s: %v", pr.GetKey(), err)
		}
		out[pr.GetKey()] = doc
	}
	return out
}

func (p previewEnv) live() *lehrpb.Policy {
	p.t.Helper()
	pol, err := p.cl.GetPolicy(testCtx(p.t), &lehrpb.GetPolicyRequest{Name: p.policy})
	if err != nil {
		p.t.Fatalf("GetPolicy: %v", err)
	}
	return pol
}

// TestUpdateExperimentMask checks which fields an experiment update
// replaces: those its update_mask (a FieldMask) names, or, from a client
// that predates the FieldMask, those its legacy_update_mask (field 2, the
// old repeated-string update_mask) names; both set must agree.
func TestUpdateExperimentMask(t *testing.T) {
	rig := newPreviewRig(t)
	allowAll := ruleProp("all", "allow", "true")
	denyEU := ruleProp("eu", "deny", `request.region == "eu"`)
	annotations := map[string]string{"v": "2"}
	// Every request sends new rules (allowAll) and new annotations; the
	// mask says which of them the update takes.
	update := func(p previewEnv, e *lehrpb.PolicyExperiment, mask *fieldmaskpb.FieldMask, legacy []string) (*lehrpb.PolicyExperiment, error) {
		t.Helper()
		op, err := p.cl.UpdatePolicyExperiment(testCtx(t), &lehrpb.UpdatePolicyExperimentRequest{
			PolicyExperiment: &lehrpb.PolicyExperiment{Name: e.GetName(), Annotations: annotations,
				Policy: &lehrpb.Policy{Name: p.policy, Rules: []*lehrpb.Property{allowAll}}},
			UpdateMask:       mask,
			LegacyUpdateMask: legacy,
		})
		if err != nil {
			return nil, err
		}
		up := new(lehrpb.PolicyExperiment)
		opResponse(t, op, up, new(lehrpb.UpdatePolicyExperimentMetadata))
		return up, nil
	}
	for _, tc := range []struct {
		name            string
		mask            *fieldmaskpb.FieldMask
		legacy          []string
		wantRules       string // the experiment's rule keys after
		wantAnnotations bool
	}{
		{"field mask: annotations only", &fieldmaskpb.FieldMask{Paths: []string{"annotations"}}, nil, "eu", true},
		{"field mask: policy only", &fieldmaskpb.FieldMask{Paths: []string{"policy.rules"}}, nil, "all", false},
		{"field mask: both", &fieldmaskpb.FieldMask{Paths: []string{"policy", "annotations"}}, nil, "all", true},
		{"field mask: *", &fieldmaskpb.FieldMask{Paths: []string{"*"}}, nil, "all", true},
		{"empty field mask: both", &fieldmaskpb.FieldMask{}, nil, "all", true},
		{"no mask: both", nil, nil, "all", true},
		{"old client: annotations only", nil, []string{"annotations"}, "eu", true},
		{"old client: policy only", nil, []string{"policy"}, "all", false},
		{"new client for old controls: annotations only", &fieldmaskpb.FieldMask{Paths: []string{"annotations"}}, []string{"annotations"}, "eu", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := rig.env(t, allowAll)
			e := p.create("e1", denyEU)
			up, err := update(p, e, tc.mask, tc.legacy)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, r := range up.GetPolicy().GetRules() {
				keys = append(keys, r.GetKey())
			}
			if got := strings.Join(keys, ","); got != tc.wantRules {
				t.Errorf("rules after update %q; want %q", got, tc.wantRules)
			}
			if got := up.GetAnnotations()["v"] == "2"; got != tc.wantAnnotations {
				t.Errorf("annotations after update %v; want them replaced: %v", up.GetAnnotations(), tc.wantAnnotations)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		for _, tc := range []struct {
			name   string
			mask   *fieldmaskpb.FieldMask
			legacy []string
			field  string
		}{
			{"unknown path", &fieldmaskpb.FieldMask{Paths: []string{"annotations", "etag"}}, nil, "update_mask.paths[1]"},
			{"unknown legacy path", nil, []string{"name"}, "legacy_update_mask[0]"},
			{"masks that disagree", &fieldmaskpb.FieldMask{Paths: []string{"annotations"}}, []string{"policy"}, "legacy_update_mask"},
			{"legacy mask beside an empty one", &fieldmaskpb.FieldMask{}, []string{"policy"}, "legacy_update_mask"},
		} {
			_, err := update(p, e, tc.mask, tc.legacy)
			wantAPIError(t, tc.name, err, codes.InvalidArgument, tc.field)
		}
		if got := p.get("e1"); !proto.Equal(got, e) {
			t.Errorf("a refused update changed the experiment: %v", got)
		}
	})
}

// TestAIP236 checks every "must" of AIP-236 (policy preview) against the
// real gRPC API and etcd, one subtest per rule, named after it. The
// subtests share one control plane, each in a domain of its own.
func TestAIP236(t *testing.T) {
	rig := newPreviewRig(t)
	allowAll := ruleProp("all", "allow", "true")
	denyEU := ruleProp("eu", "deny", `request.region == "eu"`)

	t.Run("experiment_has_name_and_etag", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", allowAll, denyEU)
		if e.GetName() != p.policy+"/experiments/e1" || e.GetEtag() == "" {
			t.Errorf("created %v; want name %s/experiments/e1 and an etag", e, p.policy)
		}
	})

	t.Run("embedded_policy_named_as_live_policy", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		if e.GetPolicy().GetName() != p.policy {
			t.Errorf("policy.name = %q; want the live policy's %q", e.GetPolicy().GetName(), p.policy)
		}
		_, err := p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "e2",
			PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.otherPolicy("other")}},
		})
		wantAPIError(t, "create with another policy's name", err, codes.InvalidArgument, "policy_experiment.policy.name")
	})

	t.Run("annotations_store_arbitrary_data", func(t *testing.T) {
		p := rig.env(t, allowAll)
		op, err := p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "e1",
			PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.policy}, Annotations: map[string]string{"ticket": "SEC-12"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		e := new(lehrpb.PolicyExperiment)
		opResponse(t, op, e, new(lehrpb.CreatePolicyExperimentMetadata))
		if p.get("e1").GetAnnotations()["ticket"] != "SEC-12" {
			t.Errorf("annotations not stored: %v", p.get("e1"))
		}
	})

	t.Run("create_more_than_once_creates_multiple_experiments", func(t *testing.T) {
		p := rig.env(t, allowAll)
		p.create("e1", denyEU)
		p.create("e2", denyEU)
		resp, err := p.cl.ListPolicyExperiments(testCtx(t), &lehrpb.ListPolicyExperimentsRequest{Parent: p.policy})
		if err != nil || len(resp.GetPolicyExperiments()) != 2 {
			t.Errorf("List: %v, %v; want 2 experiments", resp, err)
		}
	})

	t.Run("cap_on_experiments_is_enforced", func(t *testing.T) {
		p := rig.env(t, allowAll)
		for i := range service.MaxExperimentsPerPolicy {
			p.create(fmt.Sprintf("e%d", i), denyEU)
		}
		_, err := p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "one-more",
			PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.policy}},
		})
		wantAPIError(t, "create beyond the cap", err, codes.ResourceExhausted, "parent")
	})

	t.Run("preview_metadata_absent_until_first_start", func(t *testing.T) {
		p := rig.env(t, allowAll)
		op, err := p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "e1",
			PolicyExperiment: &lehrpb.PolicyExperiment{
				Policy: &lehrpb.Policy{Name: p.policy},
				// Output only: ignored.
				PreviewMetadata: &lehrpb.PolicyPreviewMetadata{State: lehrpb.PolicyPreviewMetadata_ACTIVE, LogPrefix: "mine"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		e := new(lehrpb.PolicyExperiment)
		opResponse(t, op, e, new(lehrpb.CreatePolicyExperimentMetadata))
		if e.GetPreviewMetadata() != nil || p.get("e1").GetPreviewMetadata() != nil {
			t.Errorf("preview_metadata before any start: %v; want absent", p.get("e1").GetPreviewMetadata())
		}
		if p.previewed()["e1"] != nil {
			t.Error("an experiment never started is sent to hosts")
		}
	})

	t.Run("start_preview_sets_active_log_prefix_and_start_time", func(t *testing.T) {
		p := rig.env(t, allowAll)
		p.create("e1", denyEU)
		before := time.Now().Add(-time.Second)
		e := p.start("e1")
		md := e.GetPreviewMetadata()
		if md.GetState() != lehrpb.PolicyPreviewMetadata_ACTIVE || md.GetLogPrefix() != service.LogPrefix ||
			md.GetStartTime().AsTime().Before(before) || md.GetStopTime() != nil {
			t.Fatalf("after StartPreview: %v; want ACTIVE, log_prefix %q, start_time now, no stop_time", md, service.LogPrefix)
		}
		if !proto.Equal(p.get("e1").GetPreviewMetadata(), md) {
			t.Errorf("stored %v, returned %v", p.get("e1").GetPreviewMetadata(), md)
		}
		doc := p.previewed()["e1"]
		if doc == nil || doc["etag"] != e.GetEtag() || doc["log_prefix"] != service.LogPrefix {
			t.Errorf("hosts are sent %v; want the experiment with its etag and log prefix", doc)
		}
		// start_time is updated every time the state becomes ACTIVE.
		p.stop("e1")
		again := p.start("e1")
		if !again.GetPreviewMetadata().GetStartTime().AsTime().After(md.GetStartTime().AsTime()) {
			t.Errorf("start_time after a second start: %v; want later than %v", again.GetPreviewMetadata().GetStartTime().AsTime(), md.GetStartTime().AsTime())
		}
	})

	t.Run("stop_preview_sets_suspended_and_stop_time", func(t *testing.T) {
		p := rig.env(t, allowAll)
		p.create("e1", denyEU)
		started := p.start("e1")
		e := p.stop("e1")
		md := e.GetPreviewMetadata()
		if md.GetState() != lehrpb.PolicyPreviewMetadata_SUSPENDED || md.GetStopTime() == nil ||
			md.GetStopTime().AsTime().Before(started.GetPreviewMetadata().GetStartTime().AsTime()) ||
			md.GetLogPrefix() != service.LogPrefix {
			t.Fatalf("after StopPreview: %v; want SUSPENDED with stop_time now", md)
		}
		if p.previewed()["e1"] != nil {
			t.Error("a stopped experiment is still sent to hosts")
		}
	})

	t.Run("create_is_long_running_with_experiment_response", func(t *testing.T) {
		p := rig.env(t, allowAll)
		op, err := p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "e1", PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.policy}},
		})
		if err != nil {
			t.Fatal(err)
		}
		e, md := new(lehrpb.PolicyExperiment), new(lehrpb.CreatePolicyExperimentMetadata)
		opResponse(t, op, e, md)
		if md.GetTarget() != e.GetName() || md.GetEndTime() == nil {
			t.Errorf("metadata %v; want target %s and an end time", md, e.GetName())
		}
	})

	t.Run("preview_new_policy_with_noop_live_policy", func(t *testing.T) {
		p := rig.env(t) // the live policy has no rules: the no-op policy
		if r := p.live().GetRules(); len(r) != 0 {
			t.Fatalf("live rules %v; want none", r)
		}
		p.create("new", denyEU, allowAll)
		p.start("new")
		if doc := p.previewed()["new"]; doc == nil || len(doc["rules"].([]any)) != 2 {
			t.Errorf("hosts are sent %v; want the new policy's 2 rules", doc)
		}
	})

	t.Run("preview_update_with_full_live_payload", func(t *testing.T) {
		p := rig.env(t, allowAll)
		live := p.live()
		e := p.create("upd", append(live.GetRules(), denyEU)...)
		if e.GetPolicy().GetName() != live.GetName() || len(e.GetPolicy().GetRules()) != 2 {
			t.Errorf("experiment policy %v; want the live payload plus one rule", e.GetPolicy())
		}
	})

	t.Run("preview_delete_with_noop_rules", func(t *testing.T) {
		p := rig.env(t, allowAll, denyEU)
		p.create("del") // no rules: previews the deletion of the live policy
		p.start("del")
		if doc := p.previewed()["del"]; doc == nil || len(doc["rules"].([]any)) != 0 {
			t.Errorf("hosts are sent %v; want the experiment with no rules", doc)
		}
	})

	t.Run("update_is_long_running_and_policy_name_never_changes", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		op, err := p.cl.UpdatePolicyExperiment(testCtx(t), &lehrpb.UpdatePolicyExperimentRequest{
			PolicyExperiment: &lehrpb.PolicyExperiment{Name: e.GetName(), Policy: &lehrpb.Policy{Name: p.policy, Rules: []*lehrpb.Property{allowAll}}},
			UpdateMask:       &fieldmaskpb.FieldMask{Paths: []string{"policy"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		up := new(lehrpb.PolicyExperiment)
		opResponse(t, op, up, new(lehrpb.UpdatePolicyExperimentMetadata))
		if up.GetEtag() == e.GetEtag() || len(up.GetPolicy().GetRules()) != 1 || up.GetPolicy().GetRules()[0].GetKey() != "all" {
			t.Errorf("updated %v; want the new rules and a new etag", up)
		}
		_, err = p.cl.UpdatePolicyExperiment(testCtx(t), &lehrpb.UpdatePolicyExperimentRequest{
			PolicyExperiment: &lehrpb.PolicyExperiment{Name: e.GetName(), Policy: &lehrpb.Policy{Name: p.otherPolicy("renamed")}},
		})
		wantAPIError(t, "update renaming the policy", err, codes.InvalidArgument, "policy_experiment.policy.name")
		if got := p.get("e1"); !proto.Equal(got, up) {
			t.Errorf("a refused update changed the experiment: %v", got)
		}
	})

	t.Run("update_of_active_experiment_suspends_it", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		p.start("e1")
		op, err := p.cl.UpdatePolicyExperiment(testCtx(t), &lehrpb.UpdatePolicyExperimentRequest{
			PolicyExperiment: &lehrpb.PolicyExperiment{Name: e.GetName(), Annotations: map[string]string{"v": "2"}},
			UpdateMask:       &fieldmaskpb.FieldMask{Paths: []string{"annotations"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		up := new(lehrpb.PolicyExperiment)
		opResponse(t, op, up, new(lehrpb.UpdatePolicyExperimentMetadata))
		if up.GetPreviewMetadata().GetState() != lehrpb.PolicyPreviewMetadata_SUSPENDED || up.GetPreviewMetadata().GetStopTime() == nil {
			t.Errorf("after updating an ACTIVE experiment: %v; want SUSPENDED with a stop time", up.GetPreviewMetadata())
		}
		if p.previewed()["e1"] != nil {
			t.Error("the suspended experiment is still sent to hosts")
		}
	})

	t.Run("get_is_included", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		if got := p.get("e1"); !proto.Equal(got, e) {
			t.Errorf("Get = %v; want %v", got, e)
		}
		_, err := p.cl.GetPolicyExperiment(testCtx(t), &lehrpb.GetPolicyExperimentRequest{Name: p.policy + "/experiments/nope"})
		wantAPIError(t, "Get of a missing experiment", err, codes.NotFound, "name")
	})

	t.Run("list_filters_on_preview_metadata_state", func(t *testing.T) {
		p := rig.env(t, allowAll)
		p.create("a", denyEU)
		p.create("b", denyEU)
		p.create("c", denyEU)
		p.start("b")
		p.start("c")
		p.stop("c")
		for _, tc := range []struct {
			filter string
			want   []string
		}{
			{"preview_metadata.state = ACTIVE", []string{"b"}},
			{"preview_metadata.state = SUSPENDED", []string{"c"}},
			{"NOT preview_metadata.state = ACTIVE", []string{"a", "c"}},
			{"", []string{"a", "b", "c"}},
		} {
			resp, err := p.cl.ListPolicyExperiments(testCtx(t), &lehrpb.ListPolicyExperimentsRequest{Parent: p.policy, Filter: tc.filter})
			if err != nil {
				t.Fatalf("List(%q): %v", tc.filter, err)
			}
			var got []string
			for _, e := range resp.GetPolicyExperiments() {
				got = append(got, e.GetName()[len(p.policy+"/experiments/"):])
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("List(%q) = %v; want %v", tc.filter, got, tc.want)
			}
		}
		_, err := p.cl.ListPolicyExperiments(testCtx(t), &lehrpb.ListPolicyExperimentsRequest{Parent: p.policy, Filter: "preview_metadata.state = RUNNING"})
		wantAPIError(t, "List with a bad filter", err, codes.InvalidArgument, "filter")
	})

	t.Run("delete_is_long_running_with_experiment_response", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		p.start("e1")
		op, err := p.cl.DeletePolicyExperiment(testCtx(t), &lehrpb.DeletePolicyExperimentRequest{Name: e.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		del := new(lehrpb.PolicyExperiment)
		opResponse(t, op, del, new(lehrpb.DeletePolicyExperimentMetadata))
		if del.GetName() != e.GetName() {
			t.Errorf("delete response %v; want the deleted experiment", del)
		}
		if p.previewed()["e1"] != nil {
			t.Error("a deleted experiment is still sent to hosts")
		}
		_, err = p.cl.GetPolicyExperiment(testCtx(t), &lehrpb.GetPolicyExperimentRequest{Name: e.GetName()})
		wantAPIError(t, "Get after delete", err, codes.NotFound, "name")
	})

	t.Run("commit_copies_policy_to_live_and_deletes_experiment_atomically", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", allowAll, denyEU)
		p.start("e1")
		op, err := p.cl.CommitPolicyExperiment(testCtx(t), &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag(), ParentEtag: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		md := new(lehrpb.CommitPolicyExperimentMetadata)
		opResponse(t, op, new(emptypb.Empty), md)
		live := p.live()
		if live.GetEtag() != "v2" || len(live.GetRules()) != 2 || md.GetVersion().GetSeq() != 2 {
			t.Errorf("live after commit: %v (metadata %v); want version 2 with the experiment's 2 rules", live, md)
		}
		if p.previewed()["e1"] != nil {
			t.Error("a committed experiment is still sent to hosts")
		}
	})

	t.Run("commit_without_etag_fails", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		_, err := p.cl.CommitPolicyExperiment(testCtx(t), &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName()})
		wantAPIError(t, "commit without etag", err, codes.InvalidArgument, "etag")
		if p.live().GetEtag() != "v1" {
			t.Error("a refused commit changed the live policy")
		}
	})

	t.Run("failed_commit_keeps_previewing_and_live_policy", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		p.start("e1")
		for _, tc := range []struct {
			name  string
			req   *lehrpb.CommitPolicyExperimentRequest
			field string
		}{
			{"wrong etag", &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: "0123456789abcdef"}, "etag"},
			{"stale parent_etag", &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag(), ParentEtag: "v0"}, "parent_etag"},
		} {
			_, err := p.cl.CommitPolicyExperiment(testCtx(t), tc.req)
			wantAPIError(t, tc.name, err, codes.Aborted, tc.field)
		}
		_, err := p.cl.CommitPolicyExperiment(testCtx(t), &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag(), MinEvaluations: 10})
		wantAPIError(t, "commit gated on evaluations never made", err, codes.FailedPrecondition, "min_evaluations")
		if p.live().GetEtag() != "v1" {
			t.Error("a failed commit changed the live policy")
		}
		if got := p.get("e1").GetPreviewMetadata().GetState(); got != lehrpb.PolicyPreviewMetadata_ACTIVE {
			t.Errorf("state after failed commits: %v; want ACTIVE (previewing must not stop)", got)
		}
		if p.previewed()["e1"] == nil {
			t.Error("after failed commits the experiment is no longer sent to hosts")
		}
	})

	t.Run("commit_in_any_state", func(t *testing.T) {
		p := rig.env(t, allowAll)
		never := p.create("never", denyEU) // no preview_metadata
		stopped := p.create("stopped", denyEU)
		p.start("stopped")
		p.stop("stopped")
		for i, e := range []*lehrpb.PolicyExperiment{never, p.get("stopped")} {
			if _, err := p.cl.CommitPolicyExperiment(testCtx(t), &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag()}); err != nil {
				t.Errorf("commit %s: %v", e.GetName(), err)
			}
			if got := p.live().GetEtag(); got != fmt.Sprintf("v%d", i+2) {
				t.Errorf("live etag after commit %d: %s", i+1, got)
			}
		}
		_ = stopped
	})

	t.Run("commit_twice_is_not_found", func(t *testing.T) {
		p := rig.env(t, allowAll)
		e := p.create("e1", denyEU)
		req := &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag()}
		if _, err := p.cl.CommitPolicyExperiment(testCtx(t), req); err != nil {
			t.Fatal(err)
		}
		_, err := p.cl.CommitPolicyExperiment(testCtx(t), req)
		wantAPIError(t, "second commit", err, codes.NotFound, "name")
	})

	t.Run("cascading_delete_of_live_policy_deletes_all_experiments", func(t *testing.T) {
		p := rig.env(t, allowAll, denyEU)
		p.create("e1", denyEU)
		p.create("e2")
		p.start("e1")
		if len(p.previewed()) != 1 {
			t.Fatalf("previewed %v before the delete; want e1", p.previewed())
		}
		op, err := p.cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: p.policy, Etag: "v1", Message: "retire"})
		if err != nil {
			t.Fatalf("DeletePolicy: %v", err)
		}
		md := new(lehrpb.DeletePolicyMetadata)
		opResponse(t, op, new(emptypb.Empty), md)
		if got := md.GetDeletedExperiments(); len(got) != 2 || got[0] != p.policy+"/experiments/e1" || got[1] != p.policy+"/experiments/e2" {
			t.Errorf("deleted_experiments %v; want e1 and e2", got)
		}
		if v := md.GetVersion(); v.GetSeq() != 2 || v.GetPropertyCount() != 0 || v.GetMessage() != "retire" {
			t.Errorf("version %v; want 2, the no-op policy (no rules), message retire", v)
		}
		for _, id := range []string{"e1", "e2"} {
			_, err := p.cl.GetPolicyExperiment(testCtx(t), &lehrpb.GetPolicyExperimentRequest{Name: p.policy + "/experiments/" + id})
			wantAPIError(t, "get "+id+" after the policy's deletion", err, codes.NotFound, "")
		}
		resp, err := p.cl.ListPolicyExperiments(testCtx(t), &lehrpb.ListPolicyExperimentsRequest{Parent: p.policy})
		if err != nil || len(resp.GetPolicyExperiments()) != 0 {
			t.Errorf("List after the deletion: %v, %v; want none", resp, err)
		}
		if got := p.previewed(); len(got) != 0 {
			t.Errorf("hosts still sent experiments %v after the deletion", got)
		}
		_, err = p.cl.GetPolicy(testCtx(t), &lehrpb.GetPolicyRequest{Name: p.policy})
		wantAPIError(t, "GetPolicy of a deleted policy", err, codes.NotFound, "name")
		_, err = p.cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{
			Parent: p.policy, PolicyExperimentId: "e3",
			PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: p.policy}},
		})
		wantAPIError(t, "create under a deleted policy", err, codes.NotFound, "parent")
		_, err = p.cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: p.policy})
		wantAPIError(t, "delete twice", err, codes.NotFound, "name")

		// Publishing rules creates it again, without the old experiments.
		if _, err := p.cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: p.ns, Properties: []*lehrpb.Property{allowAll}}); err != nil {
			t.Fatal(err)
		}
		if pol := p.live(); pol.GetEtag() != "v3" || len(pol.GetRules()) != 1 {
			t.Errorf("after publishing again: %v; want v3 with one rule", pol)
		}
		p.create("e1", denyEU)
	})

	t.Run("failed_delete_of_live_policy_changes_nothing", func(t *testing.T) {
		p := rig.env(t, allowAll)
		p.create("e1", denyEU)
		p.start("e1")
		_, err := p.cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: p.policy, Etag: "v0"})
		wantAPIError(t, "delete with a stale etag", err, codes.Aborted, "etag")
		_, err = p.cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: p.otherPolicy("none")})
		wantAPIError(t, "delete of a missing policy", err, codes.NotFound, "name")
		_, err = p.cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: p.ns})
		wantAPIError(t, "delete by namespace name", err, codes.InvalidArgument, "name")
		if pol := p.live(); pol.GetEtag() != "v1" {
			t.Errorf("live policy %v after failed deletes; want v1", pol)
		}
		if p.get("e1").GetPreviewMetadata().GetState() != lehrpb.PolicyPreviewMetadata_ACTIVE || len(p.previewed()) != 1 {
			t.Errorf("e1 %v, previewed %v; want it still ACTIVE and previewed", p.get("e1"), p.previewed())
		}
	})

	t.Run("preview_namespaces_are_written_by_control_only", func(t *testing.T) {
		p := rig.env(t, allowAll)
		_, err := p.cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: p.ns + "--preview", Properties: []*lehrpb.Property{prop("x", "", "1")}})
		wantAPIError(t, "publish to a preview namespace", err, codes.InvalidArgument, "namespace")
		if r := apierror.FromError(err).Reason; r != apierror.ReasonInvalidName {
			t.Errorf("reason %s; want %s", r, apierror.ReasonInvalidName)
		}
	})
}

// TestCommittedExperimentCanaryWatchesDisagreement (issue 30, item 4): an
// experiment that flips a quarter of the live decisions from allow to
// deny and another quarter from deny to allow leaves the deny share where
// it was, so an expected change of the deny share alone says nothing of
// it. The commit's rollout must also expect the half of the decisions the
// preview saw change; and while it runs, the hosts are sent the replaced
// version to measure that against (the comparison), until it ends.
func TestCommittedExperimentCanaryWatchesDisagreement(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	cl := srv.Client
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	live := []*lehrpb.Property{ruleProp("all", "allow", "true"), ruleProp("eu", "deny", `request.region == "eu"`)}
	p := (&previewRig{cl: cl}).env(t, live...)
	liveNS, livePolicy := p.ns, p.policy
	e := p.create("flip", ruleProp("all", "allow", "true"), ruleProp("us", "deny", `request.region == "us"`))
	p.start("flip")
	reportStatus(t, cl, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 4,
		Preview: []*lehrpb.NamespacePreviewCounts{{Namespace: liveNS, Counts: []*lehrpb.HostPreviewCounts{{Experiment: "flip",
			Counts: &lehrpb.PreviewCounts{LiveEtag: "v1", ExperimentEtag: e.GetEtag(), AllowAllow: 250, DenyDeny: 250, AllowDeny: 250, DenyAllow: 250}}}}}})

	op, err := cl.CommitPolicyExperiment(testCtx(t), &lehrpb.CommitPolicyExperimentRequest{Name: e.GetName(), Etag: e.GetEtag(), MinEvaluations: 1000})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	md := new(lehrpb.CommitPolicyExperimentMetadata)
	opResponse(t, op, new(emptypb.Empty), md)
	if md.ExpectedDenyChange == nil || md.GetExpectedDenyChange() != 0 || md.ExpectedDisagreement == nil || md.GetExpectedDisagreement() != 0.5 {
		t.Fatalf("commit metadata %v; want an expected deny change of 0 and an expected disagreement of 0.5", md)
	}
	// The hosts are sent the version the commit replaced, to compare the
	// committed one with; the experiment is withdrawn.
	got := p.previewed()
	cmp := got[preview.ComparisonKey]
	if len(got) != 1 || cmp["committed"] != float64(2) || cmp["etag"] != "v1" || cmp["name"] != livePolicy || len(cmp["rules"].([]any)) != len(live) {
		t.Fatalf("previewed %v; want only the comparison of version 2 with version 1's rules", got)
	}

	var r *lehrpb.Rollout
	wait.For(t, "the committed version's rollout", func() bool {
		r, err = cl.GetRollout(testCtx(t), &lehrpb.GetRolloutRequest{Namespace: liveNS, Version: md.GetVersion().GetSeq()})
		return err == nil
	})
	var deny, disagreement *lehrpb.CanaryCheck
	for _, c := range r.GetExpectedChecks() {
		switch c.GetName() {
		case canary.PolicyCheckName:
			deny = c
		case canary.PolicyDisagreementCheckName:
			disagreement = c
		}
	}
	if deny == nil || deny.GetExpected() != 0 {
		t.Errorf("the rollout's expected checks %v; want %q expecting no change", r.GetExpectedChecks(), canary.PolicyCheckName)
	}
	if disagreement == nil || math.Abs(disagreement.GetExpected()-0.5) > 1e-9 || disagreement.GetRatio().GetNumerator() != canary.MetricPolicyChanged {
		t.Fatalf("the rollout's expected checks %v; want %q expecting the previewed disagreement, half of the decisions", r.GetExpectedChecks(), canary.PolicyDisagreementCheckName)
	}

	// Once the rollout ends, the hosts stop comparing.
	if _, err := cl.UpdateRollout(testCtx(t), &lehrpb.UpdateRolloutRequest{Namespace: liveNS, Version: 2, Action: lehrpb.RolloutAction_ROLLOUT_ACTION_ABORT, Message: "enough"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the comparison withdrawn after the rollout ended", func() bool { return len(p.previewed()) == 0 })
}
