package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// GetRollout returns the rollout of version (0: ns's latest rollout).
func (c *Client) GetRollout(ctx context.Context, ns string, version uint64) (*lehrpb.Rollout, error) {
	var out *lehrpb.Rollout
	err := c.call(ctx, "get the rollout of "+ns, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: ns, Version: version})
		return err
	})
	return out, err
}

// ListRollouts returns ns's rollouts ("" for every namespace's), oldest
// first; activeOnly keeps running and paused ones.
func (c *Client) ListRollouts(ctx context.Context, ns string, activeOnly bool) ([]*lehrpb.Rollout, error) {
	var out *lehrpb.ListRolloutsResponse
	err := c.call(ctx, "list rollouts", func(ctx context.Context) (err error) {
		out, err = c.rpc.ListRollouts(ctx, &lehrpb.ListRolloutsRequest{Namespace: ns, ActiveOnly: activeOnly})
		return err
	})
	return out.GetRollouts(), err
}

// RolloutEvents returns the event log of the rollout of version (0: ns's
// latest rollout), in order.
func (c *Client) RolloutEvents(ctx context.Context, ns string, version uint64) ([]*lehrpb.RolloutEvent, error) {
	var out *lehrpb.ListRolloutEventsResponse
	err := c.call(ctx, "list the rollout events of "+ns, func(ctx context.Context) (err error) {
		out, err = c.rpc.ListRolloutEvents(ctx, &lehrpb.ListRolloutEventsRequest{Namespace: ns, Version: version})
		return err
	})
	return out.GetEvents(), err
}

// UpdateRollout asks control to pause, resume, abort or promote the rollout
// of version (0: ns's latest); control acts within a second and records
// the message. It returns the rollout as it stood when asked.
func (c *Client) UpdateRollout(ctx context.Context, ns string, version uint64, action lehrpb.RolloutAction, message string) (*lehrpb.Rollout, error) {
	var out *lehrpb.Rollout
	err := c.call(ctx, fmt.Sprintf("%v the rollout of %s", action, ns), func(ctx context.Context) (err error) {
		out, err = c.rpc.UpdateRollout(ctx, &lehrpb.UpdateRolloutRequest{Namespace: ns, Version: version, Action: action, Message: message, Author: c.opts.Author})
		return err
	})
	return out, err
}

// Done reports whether a rollout has ended: succeeded, failed (rolled
// back), superseded or aborted.
func Done(r *lehrpb.Rollout) bool {
	switch r.GetState() {
	case lehrpb.RolloutState_ROLLOUT_STATE_RUNNING, lehrpb.RolloutState_ROLLOUT_STATE_PAUSED, lehrpb.RolloutState_ROLLOUT_STATE_UNSPECIFIED:
		return false
	}
	return true
}

// WaitRollout polls the rollout of version (> 0) every interval (0: 1 s)
// until it has ended (Done) or ctx ends, calling progress, if not nil,
// whenever its stage, state or reason changes. A rollout not started yet
// (the strategist starts it within a round of the publish) is waited for.
// A producer publishes, then waits for the outcome: SUCCEEDED, or FAILED
// with the reason and the rollback version.
func (c *Client) WaitRollout(ctx context.Context, ns string, version uint64, interval time.Duration, progress func(*lehrpb.Rollout)) (*lehrpb.Rollout, error) {
	if interval <= 0 {
		interval = time.Second
	}
	var last *lehrpb.Rollout
	for {
		r, err := c.GetRollout(ctx, ns, version)
		switch {
		case errors.Is(err, ErrNotFound) && version > 0:
			r = last // not started yet
		case err != nil:
			return last, err
		}
		if r != nil && progress != nil && (last == nil || last.GetStage() != r.GetStage() || last.GetReason() != r.GetReason() || last.GetState() != r.GetState()) {
			progress(r)
		}
		last = r
		if r != nil && Done(r) {
			return r, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("producer: wait for the rollout of %s: %w", ns, ctx.Err())
		case <-t.C:
		}
	}
}
