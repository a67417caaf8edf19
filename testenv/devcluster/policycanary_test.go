package devcluster_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A committed policy experiment's canary expects what the preview
// measured: ten hosts decide for a random mix of users (one in ten
// denied by the live policy, two more in ten by the experiment); the
// commit's rollout adds the check "policy deny ratio" expecting the deny
// share to rise by the previewed 20 points on the canary hosts, and the
// analysis passes it with the canary hosts at about 30 % and the control
// hosts at 10 % (a move the check fails without the expectation:
// canary.TestPolicyCheckExpectedChange). It adds "policy disagreement"
// too, expecting the canary hosts to decide the previewed 20 % of
// decisions otherwise than the replaced version would: they count that
// against the comparison control sends them for the rollout, and the
// analysis passes it with the canary hosts at about 20 % and the control
// hosts, still at the replaced version, at none. Once the rollout
// succeeded, the comparison is withdrawn.
func TestCommittedExperimentCanary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startRollouts(t, ctx, 5)
	prod := c.Producer()
	rpc := prod.RPC()
	stage := &lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(8 * time.Second), ApplyDeadline: durationpb.New(time.Minute),
		Target:   &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
		Analysis: &lehrpb.CanaryAnalysis{Alpha: 0.001}}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{stage}}, "test policy", 0); err != nil {
		t.Fatal(err)
	}
	ns := domain + "/gate"
	policyName := "domains/" + domain + "/policies/gate"
	rule := func(key, effect, cond string) *lehrpb.Property {
		b, _ := json.Marshal(policy.Rule{Effect: policy.Effect(effect), Condition: cond})
		return &lehrpb.Property{Key: key, Value: b, ContentType: "application/json"}
	}
	live := []*lehrpb.Property{rule("all", "allow", "true"), rule("mallory", "deny", `principal.user == "mallory"`)}
	if _, err := rpc.Publish(ctx, &lehrpb.PublishRequest{Namespace: ns, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: live, Message: "live"}); err != nil {
		t.Fatal(err)
	}

	users := []string{"ana", "ben", "c-eve", "mallory", "dan", "c-fay", "gus", "hal", "ivy", "jo"}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var agents []string
	for _, z := range []string{zoneA, zoneB} {
		for i := range 5 {
			cl, err := c.Consumer(z, i, func(o *consumer.Options) {
				o.PreviewReportInterval, o.DecisionLog, o.PreviewSample = 100*time.Millisecond, io.Discard, -1
			})
			if err != nil {
				t.Fatal(err)
			}
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sub.Next(ctx, nil); err != nil {
				t.Fatal(err)
			}
			a, _ := c.Agent(z, i)
			agents = append(agents, a.HostID)
			rng := rand.New(rand.NewPCG(uint64(len(agents)), 1))
			go func() {
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-trafficCtx.Done():
						return
					case <-tick.C:
					}
					_, _ = sub.Evaluate(trafficCtx, policy.Input{Principal: map[string]any{"user": users[rng.IntN(len(users))]}})
				}
			}()
			// Each host's history of live decisions before any change.
			wait.For(t, a.HostID+" keeping 5 intervals of policy decisions", func() bool {
				resp, err := a.Local().Signals(ctx, &lehrpb.AgentSignalsRequest{Namespace: ns})
				if err != nil {
					return false
				}
				n := 0
				for _, sr := range resp.GetSignals().GetSeries() {
					if sr.GetName() == canary.MetricPolicyDecisions {
						for _, v := range sr.GetValues() {
							if v > 0 {
								n++
							}
						}
					}
				}
				return n >= 5
			})
		}
	}

	// Preview the experiment until the hosts counted 2,000 decisions.
	deny := append(live, rule("contractors", "deny", `principal.user.startsWith("c-")`))
	op, err := rpc.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: policyName, PolicyExperimentId: "contractors",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: policyName, Rules: deny}}})
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
	wait.For(t, "2,000 previewed decisions", func() bool {
		counts, err := rpc.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: exp.GetName()})
		if err != nil {
			return false
		}
		var n uint64
		for _, tot := range counts.GetTotals() {
			n += tot.GetAllowAllow() + tot.GetDenyDeny() + tot.GetAllowDeny() + tot.GetDenyAllow()
		}
		return n >= 2000
	})

	op, err = rpc.CommitPolicyExperiment(ctx, &lehrpb.CommitPolicyExperimentRequest{Name: exp.GetName(), Etag: exp.GetEtag()})
	if err != nil {
		t.Fatal(err)
	}
	md := new(lehrpb.CommitPolicyExperimentMetadata)
	if err := op.GetMetadata().UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	if md.ExpectedDenyChange == nil || math.Abs(md.GetExpectedDenyChange()-0.2) > 0.05 ||
		md.ExpectedDisagreement == nil || md.GetExpectedDisagreement() != md.GetExpectedDenyChange() {
		t.Fatalf("commit metadata %v; want an expected deny change of about 0.2, and as much disagreement (the experiment only adds denials)", md)
	}
	v := md.GetVersion().GetSeq()
	r := waitRollout(t, ctx, c, ns, v, lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	if ec := r.GetExpectedChecks(); len(ec) != 2 || ec[0].GetName() != canary.PolicyCheckName || ec[0].GetExpected() != md.GetExpectedDenyChange() ||
		ec[1].GetName() != canary.PolicyDisagreementCheckName || ec[1].GetExpected() != md.GetExpectedDisagreement() {
		t.Fatalf("the rollout's expected checks %v; want %q expecting %v and %q expecting %v", ec,
			canary.PolicyCheckName, md.GetExpectedDenyChange(), canary.PolicyDisagreementCheckName, md.GetExpectedDisagreement())
	}
	ev := evaluation(t, ctx, rpc, ns, v)
	var got, changed *lehrpb.CanaryCheckResult
	for _, ch := range ev.GetResult().GetChecks() {
		switch ch.GetName() {
		case canary.PolicyCheckName:
			got = ch
		case canary.PolicyDisagreementCheckName:
			changed = ch
		}
	}
	if ev.GetResult().GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS || got.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS ||
		!strings.Contains(got.GetExplanation(), "expected on the canary hosts") ||
		math.Abs(got.GetCanaryAfter()-0.3) > 0.1 || math.Abs(got.GetControlAfter()-0.1) > 0.05 {
		t.Fatalf("the committed experiment's analysis: %s", dump(ev))
	}
	if changed.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS || !strings.Contains(changed.GetExplanation(), "expected on the canary hosts") ||
		math.Abs(changed.GetCanaryAfter()-0.2) > 0.1 || changed.GetControlAfter() != 0 {
		t.Fatalf("the committed experiment's disagreement check: %s", dump(ev))
	}
	wait.For(t, "the comparison withdrawn once the rollout succeeded", func() bool {
		resp, err := rpc.Get(ctx, &lehrpb.GetRequest{Namespace: ns + "--preview"})
		return err == nil && len(resp.GetProperties()) == 0
	})

}
