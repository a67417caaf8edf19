package producer

import (
	"context"

	"lehr.dev/lehr/proto/lehrpb"
)

// Evaluate starts a canary evaluation (docs/canary.md), or returns the one
// with the same id (req's namespace, version and name) unchanged.
func (c *Client) Evaluate(ctx context.Context, req *lehrpb.EvaluateRequest) (*lehrpb.CanaryEvaluation, error) {
	var out *lehrpb.CanaryEvaluation
	err := c.call(ctx, "start a canary evaluation of "+req.GetNamespace(), func(ctx context.Context) (err error) {
		out, err = c.rpc.Evaluate(ctx, req)
		return err
	})
	return out, err
}

// CanaryEvaluation returns the evaluation id ("<namespace>@<version>/<name>",
// as a rollout's events name it); with wait, only once it is DONE or when
// ctx ends (then as it stands).
func (c *Client) CanaryEvaluation(ctx context.Context, id string, wait bool) (*lehrpb.CanaryEvaluation, error) {
	var out *lehrpb.CanaryEvaluation
	err := c.call(ctx, "get canary evaluation "+id, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetCanaryEvaluation(ctx, &lehrpb.GetCanaryEvaluationRequest{Id: id, Wait: wait})
		return err
	})
	return out, err
}

// CanaryEvaluations lists the evaluations of ns ("" for every namespace).
func (c *Client) CanaryEvaluations(ctx context.Context, ns string) ([]*lehrpb.CanaryEvaluation, error) {
	var out *lehrpb.ListCanaryEvaluationsResponse
	err := c.call(ctx, "list canary evaluations", func(ctx context.Context) (err error) {
		out, err = c.rpc.ListCanaryEvaluations(ctx, &lehrpb.ListCanaryEvaluationsRequest{Namespace: ns})
		return err
	})
	return out.GetEvaluations(), err
}

// CanaryHistory returns what the canary judge learned of ns's checks from
// its kept evaluations (docs/canary.md, "Learning from history").
func (c *Client) CanaryHistory(ctx context.Context, ns string) (*lehrpb.CanaryHistory, error) {
	var out *lehrpb.CanaryHistory
	err := c.call(ctx, "get the canary history of "+ns, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetCanaryHistory(ctx, &lehrpb.GetCanaryHistoryRequest{Namespace: ns})
		return err
	})
	return out, err
}

// ForgetCanaryHistory deletes what the canary judge learned of ns's
// checks, or of check alone when it is not empty; message says why, for
// the audit log.
func (c *Client) ForgetCanaryHistory(ctx context.Context, ns, check, message string) (*lehrpb.ForgetCanaryHistoryResponse, error) {
	var out *lehrpb.ForgetCanaryHistoryResponse
	err := c.call(ctx, "forget the canary history of "+ns, func(ctx context.Context) (err error) {
		out, err = c.rpc.ForgetCanaryHistory(ctx, &lehrpb.ForgetCanaryHistoryRequest{Namespace: ns, Check: check, Message: message})
		return err
	})
	return out, err
}
