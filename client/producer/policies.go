package producer

import (
	"context"

	"lehr.dev/lehr/proto/lehrpb"
)

// SetRolloutPolicy sets the rollout policy of scope: a domain ("payments",
// its default) or a namespace ("payments/limits", its own). Control
// validates it against the registered zones; a field-level *Error says what
// is wrong. expectedGeneration, if non-zero, makes the call fail unless the
// scope's policy is still at that generation. Setting the policy the scope
// already has changes nothing, so the call is retried safely.
func (c *Client) SetRolloutPolicy(ctx context.Context, scope string, p *lehrpb.RolloutPolicy, message string, expectedGeneration uint64) (*lehrpb.RolloutPolicyRecord, error) {
	var out *lehrpb.RolloutPolicyRecord
	err := c.call(ctx, "set the rollout policy of "+scope, func(ctx context.Context) (err error) {
		out, err = c.rpc.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{
			Scope: scope, Policy: p, Message: message, Author: c.opts.Author, ExpectedGeneration: expectedGeneration,
		})
		return err
	})
	return out, err
}

// DeleteRolloutPolicy removes scope's own policy; it falls back to its
// domain's policy or control's built-in default. It returns the deletion
// record; deleting again returns the same record.
func (c *Client) DeleteRolloutPolicy(ctx context.Context, scope, message string, expectedGeneration uint64) (*lehrpb.RolloutPolicyRecord, error) {
	var out *lehrpb.RolloutPolicyRecord
	err := c.call(ctx, "delete the rollout policy of "+scope, func(ctx context.Context) (err error) {
		out, err = c.rpc.DeleteRolloutPolicy(ctx, &lehrpb.DeleteRolloutPolicyRequest{
			Scope: scope, Message: message, Author: c.opts.Author, ExpectedGeneration: expectedGeneration,
		})
		return err
	})
	return out, err
}

// GetRolloutPolicy returns scope's own stored policy (if any) and the
// policy in effect for it, with where that comes from.
func (c *Client) GetRolloutPolicy(ctx context.Context, scope string) (*lehrpb.GetRolloutPolicyResponse, error) {
	var out *lehrpb.GetRolloutPolicyResponse
	err := c.call(ctx, "get the rollout policy of "+scope, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetRolloutPolicy(ctx, &lehrpb.GetRolloutPolicyRequest{Scope: scope})
		return err
	})
	return out, err
}

// RolloutPolicyHistory returns up to pageSize (0: 100) of scope's policy
// changes older than generation before (0: from the newest), newest first.
func (c *Client) RolloutPolicyHistory(ctx context.Context, scope string, before uint64, pageSize int) ([]*lehrpb.RolloutPolicyRecord, error) {
	var out *lehrpb.RolloutPolicyHistoryResponse
	err := c.call(ctx, "list the rollout policy history of "+scope, func(ctx context.Context) (err error) {
		out, err = c.rpc.RolloutPolicyHistory(ctx, &lehrpb.RolloutPolicyHistoryRequest{
			Scope: scope, BeforeGeneration: before, PageSize: int32(min(pageSize, 1000)),
		})
		return err
	})
	return out.GetRecords(), err
}
