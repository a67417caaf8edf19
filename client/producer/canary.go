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
