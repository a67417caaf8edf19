package devcluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// syncBuffer is a decision log shared by a consumer's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// Policy preview end to end (AIP-236): a live policy and an experiment that
// denies one more user, evaluated by the consumer library on every host;
// the counts control sums from the agents' reports equal the exact number
// of evaluations of each class; the decision log lines carry the prefix,
// both etags and no sensitive input; a commit with a stale etag fails and
// previewing goes on; the right etag makes the experiment the live policy,
// rolled out through the rollout policy's canary stage.
func TestPolicyPreview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startRollouts(t, ctx, 2)
	prod := c.Producer()
	rpc := prod.RPC()
	canary := &lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(time.Second), ApplyDeadline: durationpb.New(time.Minute),
		Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}}}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary}}, "test policy", 0); err != nil {
		t.Fatal(err)
	}
	ns := domain + "/fw"
	policyName := "domains/" + domain + "/policies/fw"
	rule := func(key, effect, cond string, sensitive ...string) *lehrpb.Property {
		b, _ := json.Marshal(policy.Rule{Effect: policy.Effect(effect), Condition: cond, Sensitive: sensitive})
		return &lehrpb.Property{Key: key, Value: b, ContentType: "application/json"}
	}
	live := []*lehrpb.Property{
		rule("all", "allow", "true"),
		rule("mallory", "deny", `principal.user == "mallory"`, "principal.token"),
	}
	if _, err := rpc.Publish(ctx, &lehrpb.PublishRequest{Namespace: ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: live, Message: "live"}); err != nil {
		t.Fatal(err)
	}

	type host struct {
		name string
		sub  *consumer.Subscription
		log  *syncBuffer
	}
	var hosts []host
	for _, z := range []string{zoneA, zoneB} {
		for i := range 2 {
			log := &syncBuffer{}
			cl, err := c.Consumer(z, i, func(o *consumer.Options) {
				o.DecisionLog, o.PreviewSample, o.PreviewReportInterval = log, 4, 100*time.Millisecond
			})
			if err != nil {
				t.Fatal(err)
			}
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, host{fmt.Sprintf("%s/%d", z, i), sub, log})
		}
	}
	for _, h := range hosts {
		if _, err := h.sub.Next(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}

	// An experiment: the live rules and one more deny.
	op, err := rpc.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{
		Parent: policyName, PolicyExperimentId: "deny-eve",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: policyName,
			Rules: append(slices.Clone(live), rule("eve", "deny", `principal.user == "eve"`))}},
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := new(lehrpb.PolicyExperiment)
	if err := op.GetResponse().UnmarshalTo(exp); err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.StartPreviewPolicyExperiment(ctx, &lehrpb.StartPreviewPolicyExperimentRequest{Name: exp.GetName()}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		wait.For(t, h.name+" previewing "+exp.GetName(), func() bool { return slices.Contains(h.sub.Previewing(), exp.GetName()) })
	}

	// Traffic: each round, each host decides for four users.
	users := []string{"alice", "bob", "eve", "mallory"}
	decide := func(rounds int) {
		t.Helper()
		for _, h := range hosts {
			for range rounds {
				for _, u := range users {
					d, err := h.sub.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": u, "token": "s3cr3t-" + u}, Request: map[string]any{"path": "/pay"}})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed() == (u == "mallory") {
						t.Fatalf("%s: live decision for %s: %+v", h.name, u, d)
					}
				}
			}
		}
	}
	const rounds = 25
	decide(rounds)
	n := uint64(rounds * len(hosts))
	want := &lehrpb.PreviewCounts{LiveEtag: "v1", ExperimentEtag: exp.GetEtag(), AllowAllow: 2 * n, AllowDeny: n, DenyDeny: n}
	waitCounts(t, ctx, rpc, exp.GetName(), want)
	counts, err := rpc.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range counts.GetZones() {
		if z.GetAllowDeny() != n/2 || z.GetAllowAllow() != n {
			t.Errorf("zone %s counts %v; want half the fleet's", z.GetZone(), z)
		}
	}

	// Decision logs: every disagreement (eve, once per round) and one
	// agreement in 4, each line with the prefix, both etags, and the
	// token masked.
	for _, h := range hosts {
		var disagree, agree int
		for _, l := range h.log.lines() {
			rest, ok := strings.CutPrefix(l, "PolicyPreviewLog ")
			if !ok {
				t.Fatalf("%s: a decision log line without the prefix: %q", h.name, l)
			}
			if strings.Contains(l, "s3cr3t") {
				t.Fatalf("%s: a decision log line shows a sensitive field: %q", h.name, l)
			}
			var line struct {
				LiveEtag       string                    `json:"live_etag"`
				ExperimentEtag string                    `json:"experiment_etag"`
				Agree          bool                      `json:"agree"`
				Input          map[string]map[string]any `json:"input"`
			}
			if err := json.Unmarshal([]byte(rest), &line); err != nil {
				t.Fatalf("%s: %q: %v", h.name, l, err)
			}
			if line.LiveEtag != "v1" || line.ExperimentEtag != exp.GetEtag() || line.Input["principal"]["token"] != policy.Masked {
				t.Fatalf("%s: line %q; want live etag v1, experiment etag %s, the token masked", h.name, l, exp.GetEtag())
			}
			if line.Agree {
				agree++
			} else {
				disagree++
			}
		}
		if disagree != rounds || agree != 3*rounds/4+1 {
			t.Errorf("%s: %d disagreements and %d agreements logged; want %d and %d (one in 4 of %d)", h.name, disagree, agree, rounds, 3*rounds/4+1, 3*rounds)
		}
	}

	// A commit with a stale etag fails; previewing goes on.
	_, err = rpc.CommitPolicyExperiment(ctx, &lehrpb.CommitPolicyExperimentRequest{Name: exp.GetName(), Etag: "stale"})
	if e := apierror.FromError(err); err == nil || e.Code != codes.Aborted || e.Field != "etag" {
		t.Fatalf("commit with a stale etag: %v; want ABORTED on etag", err)
	}
	decide(1)
	want.AllowAllow, want.AllowDeny, want.DenyDeny = want.AllowAllow+2*uint64(len(hosts)), want.AllowDeny+uint64(len(hosts)), want.DenyDeny+uint64(len(hosts))
	waitCounts(t, ctx, rpc, exp.GetName(), want)

	// A gate the counts do not meet refuses; the right etag commits, and
	// the new version rolls out through the canary stage.
	_, err = rpc.CommitPolicyExperiment(ctx, &lehrpb.CommitPolicyExperimentRequest{Name: exp.GetName(), Etag: exp.GetEtag(), MaxDisagreement: 0.1})
	if e := apierror.FromError(err); err == nil || e.Code != codes.FailedPrecondition || !strings.Contains(e.Message, "disagreed with the live policy on 104 of 416") {
		t.Fatalf("commit gated at 10%% disagreement: %v; want FAILED_PRECONDITION with the numbers", err)
	}
	op, err = rpc.CommitPolicyExperiment(ctx, &lehrpb.CommitPolicyExperimentRequest{Name: exp.GetName(), Etag: exp.GetEtag(), ParentEtag: "v1", MinEvaluations: 400, MaxDisagreement: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	md := new(lehrpb.CommitPolicyExperimentMetadata)
	if err := op.GetMetadata().UnmarshalTo(md); err != nil || md.GetVersion().GetSeq() != 2 {
		t.Fatalf("commit metadata %v, %v; want version 2", md, err)
	}
	r := waitRollout(t, ctx, c, ns, 2, lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	if st := r.GetStages(); len(st) < 2 || st[0] != "canary" {
		t.Errorf("the committed version's rollout %v; want it through the canary stage", r)
	}
	for _, h := range hosts {
		wait.For(t, h.name+" deciding with version 2", func() bool {
			d, err := h.sub.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": "eve"}})
			return err == nil && !d.Allowed() && d.Rule == "eve"
		})
		wait.For(t, h.name+" no longer previewing", func() bool { return len(h.sub.Previewing()) == 0 })
	}
	if _, err := rpc.GetPolicyExperiment(ctx, &lehrpb.GetPolicyExperimentRequest{Name: exp.GetName()}); apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("the committed experiment: %v; want NOT_FOUND", err)
	}

	// Deleting the live policy deletes its previewing experiment with it;
	// the no-op version rolls out like any other and hosts stop previewing.
	op, err = rpc.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{
		Parent: policyName, PolicyExperimentId: "again",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: policyName}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.StartPreviewPolicyExperiment(ctx, &lehrpb.StartPreviewPolicyExperimentRequest{Name: policyName + "/experiments/again"}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		wait.For(t, h.name+" previewing the second experiment", func() bool { return len(h.sub.Previewing()) == 1 })
	}
	op, err = rpc.DeletePolicy(ctx, &lehrpb.DeletePolicyRequest{Name: policyName, Etag: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	dmd := new(lehrpb.DeletePolicyMetadata)
	if err := op.GetMetadata().UnmarshalTo(dmd); err != nil || dmd.GetVersion().GetSeq() != 3 || len(dmd.GetDeletedExperiments()) != 1 {
		t.Fatalf("delete metadata %v, %v; want version 3 and one experiment deleted", dmd, err)
	}
	waitRollout(t, ctx, c, ns, 3, lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	for _, h := range hosts {
		wait.For(t, h.name+" deciding with the no-op policy", func() bool {
			d, err := h.sub.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": "eve"}})
			return err == nil && d.Allowed() && d.Rule == ""
		})
		wait.For(t, h.name+" no longer previewing", func() bool { return len(h.sub.Previewing()) == 0 })
	}
}

// waitCounts waits until control's totals for experiment name are want.
func waitCounts(t *testing.T, ctx context.Context, rpc lehrpb.ControlClient, name string, want *lehrpb.PreviewCounts) {
	t.Helper()
	var got *lehrpb.PolicyExperimentCounts
	wait.For(t, fmt.Sprintf("counts of %s at control: %v", name, want), func() bool {
		var err error
		got, err = rpc.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: name})
		if err != nil || len(got.GetTotals()) != 1 {
			return false
		}
		g := got.GetTotals()[0]
		return g.GetLiveEtag() == want.GetLiveEtag() && g.GetExperimentEtag() == want.GetExperimentEtag() &&
			g.GetAllowAllow() == want.GetAllowAllow() && g.GetAllowDeny() == want.GetAllowDeny() &&
			g.GetDenyDeny() == want.GetDenyDeny() && g.GetDenyAllow() == want.GetDenyAllow()
	})
}
