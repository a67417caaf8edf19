package devcluster_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/demoservice"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// Canary analysis end to end: every host runs a demo service whose
// metrics endpoint its agent scrapes; a change the services accept but
// serve a fifth of their requests badly under is caught by the canary
// analysis on the canary hosts and rolled back, with the failing check's
// explanation; a harmless change passes it.
func TestCanaryAnalysis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 5 hosts per zone: 1 canary and 4 control hosts each, so the judge has
	// 8 control hosts to learn how much hosts' changes vary.
	c := startRollouts(t, ctx, 5)
	prod := c.Producer()
	ns := domain + "/svc"
	canary := &lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(8 * time.Second), ApplyDeadline: durationpb.New(time.Minute),
		Target:   &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1}},
		Analysis: &lehrpb.CanaryAnalysis{Alpha: 0.001}}
	if _, err := prod.SetRolloutPolicy(ctx, domain, &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{canary}}, "test policy", 0); err != nil {
		t.Fatal(err)
	}

	svcCtx, stopSvcs := context.WithCancel(ctx)
	defer stopSvcs()
	var agents []*devcluster.AgentHandle
	for _, z := range []string{zoneA, zoneB} {
		for i := range 5 {
			svc := demoservice.New(demoservice.Options{Seed: uint64(len(agents))})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go svc.Serve(svcCtx, ln)
			go svc.Run(svcCtx)
			cl, err := c.Consumer(z, i, func(o *consumer.Options) { o.MetricsURL = "http://" + ln.Addr().String() + "/metrics" })
			if err != nil {
				t.Fatal(err)
			}
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			sub.OnChange(func(ch consumer.Change) error { return svc.Take(ch.New) })
			a, _ := c.Agent(z, i)
			agents = append(agents, a)
		}
	}
	v1, err := prod.Publish(ctx, ns, props(demoservice.KeyErrorRatio, "0.01", demoservice.KeyLatencyMS, "20", "limit", "1"))
	if err != nil {
		t.Fatal(err)
	}
	// Each host's history before the change: a few scraped intervals.
	for _, a := range agents {
		wait.For(t, a.HostID+" keeping 5 intervals of requests", func() bool {
			resp, err := a.Local().Signals(ctx, &lehrpb.AgentSignalsRequest{Namespace: ns})
			if err != nil {
				return false
			}
			n := 0
			for _, sr := range resp.GetSignals().GetSeries() {
				if sr.GetName() == "requests" {
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
	if v1.GetSeq() != 1 {
		t.Fatalf("first version %d", v1.GetSeq())
	}

	good, err := prod.Publish(ctx, ns, props(demoservice.KeyErrorRatio, "0.01", demoservice.KeyLatencyMS, "20", "limit", "2"))
	if err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, c, ns, good.GetSeq(), lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	ev := evaluation(t, ctx, prod.RPC(), ns, good.GetSeq())
	if ev.GetResult().GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_PASS {
		t.Errorf("the harmless change's analysis: %s", dump(ev))
	}
	// A kept change: its evaluation's samples join the namespace's history
	// (docs/canary.md, "Learning from history").
	var hist *lehrpb.CanaryHistory
	wait.For(t, "the kept change learned", func() bool {
		hist, err = prod.CanaryHistory(ctx, ns)
		return err == nil && hist.GetLearnedVersion() == good.GetSeq()
	})
	if len(hist.GetChecks()) == 0 || len(hist.GetChecks()[0].GetSamples()) != 1 || hist.GetStoredBytes() <= 0 {
		t.Errorf("the history after one kept change: %v; want one sample per check, its bytes", hist)
	}

	bad, err := prod.Publish(ctx, ns, props(demoservice.KeyErrorRatio, "0.2", demoservice.KeyLatencyMS, "20", "limit", "2"))
	if err != nil {
		t.Fatal(err)
	}
	var r *lehrpb.Rollout
	wait.For(t, "the bad change's rollout ending", func() bool {
		r, err = prod.GetRollout(ctx, ns, bad.GetSeq())
		return err == nil && (r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_FAILED || r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED)
	})
	ev = evaluation(t, ctx, prod.RPC(), ns, bad.GetSeq())
	if r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_FAILED || ev.GetResult().GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
		t.Fatalf("the bad change's rollout %v (%s); its analysis: %s", r.GetState(), r.GetReason(), dump(ev))
	}
	var failed *lehrpb.CanaryCheckResult
	for _, ch := range ev.GetResult().GetChecks() {
		if ch.GetName() == "error ratio" {
			failed = ch
		}
	}
	if failed.GetVerdict() != lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL || !strings.Contains(failed.GetExplanation(), "rose more on the canary hosts") {
		t.Errorf("error ratio check: %s", dump(ev))
	}
	if !strings.Contains(r.GetReason(), "canary analysis "+ev.GetId()) || !strings.Contains(r.GetReason(), "error ratio") {
		t.Errorf("the rollout's reason does not explain the failure: %s", r.GetReason())
	}
	// The signals came in distributors' reports: the failure says whose.
	if !strings.Contains(r.GetReason(), "; on the word of distributor") || !strings.Contains(r.GetReason(), "-dist-0") {
		t.Errorf("the rollout's reason does not name the distributors whose reports it rests on: %s", r.GetReason())
	}
	if r.GetRollbackVersion() == 0 {
		t.Errorf("the failed rollout rolled nothing back: %v", r)
	}
	// A failed change is not learned; forgetting frees every byte.
	if h, err := prod.CanaryHistory(ctx, ns); err != nil || h.GetLearnedVersion() != good.GetSeq() || len(h.GetChecks()[0].GetSamples()) != 1 {
		t.Errorf("the history after a failed change: %v, %v; want the kept change's alone", h, err)
	}
	if f, err := prod.ForgetCanaryHistory(ctx, ns, "", "test"); err != nil || int(f.GetSamplesForgotten()) != len(hist.GetChecks()) || f.GetBytesFreed() != hist.GetStoredBytes() {
		t.Errorf("forget: %v, %v; want %d samples and %d bytes", f, err, len(hist.GetChecks()), hist.GetStoredBytes())
	}

	// The evaluation is data: read again (waiting, it is done) it is the
	// same; started again under its name it is the same one.
	got, err := prod.CanaryEvaluation(ctx, ev.GetId(), true)
	if err != nil || got.GetState() != lehrpb.CanaryEvaluationState_CANARY_EVALUATION_STATE_DONE || !proto.Equal(got, ev) {
		t.Errorf("GetCanaryEvaluation(%s, wait): %v, %v; want the stored, done evaluation", ev.GetId(), got, err)
	}
	req := &lehrpb.EvaluateRequest{Name: "replay", Namespace: ns, Version: bad.GetSeq(), Trials: ev.GetTrials(),
		ChangeTime: ev.GetChangeTime(), Bake: ev.GetBake()}
	first, err := prod.Evaluate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := prod.Evaluate(ctx, req)
	if err != nil || first.GetId() != ns+"@3/replay" || !proto.Equal(first.GetCreateTime(), again.GetCreateTime()) {
		t.Errorf("Evaluate twice: %v then %v (%v); want one evaluation %s@3/replay", first, again, err, ns)
	}
	req.Name, req.Trials = "no-trials", nil
	if _, err := prod.Evaluate(ctx, req); err == nil || !strings.Contains(err.Error(), "trials") {
		t.Errorf("Evaluate without trials: %v; want an error naming trials", err)
	}
}

func evaluation(t *testing.T, ctx context.Context, rpc lehrpb.ControlClient, ns string, v uint64) *lehrpb.CanaryEvaluation {
	t.Helper()
	resp, err := rpc.ListCanaryEvaluations(ctx, &lehrpb.ListCanaryEvaluationsRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range resp.GetEvaluations() {
		if ev.GetVersion() == v {
			return ev
		}
	}
	t.Fatalf("no canary evaluation of %s@%d among %d", ns, v, len(resp.GetEvaluations()))
	return nil
}

func dump(ev *lehrpb.CanaryEvaluation) string {
	b, _ := protojson.Marshal(ev)
	var v any
	_ = json.Unmarshal(b, &v)
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}
