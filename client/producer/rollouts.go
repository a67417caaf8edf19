package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
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

// ErrNoRollout is what WaitRollout's error matches (errors.Is) when there
// is nothing to wait for; the error is a *NoRolloutError saying why.
var ErrNoRollout = errors.New("producer: no rollout to wait for")

// NoRolloutError says why a version has no rollout, and never will.
type NoRolloutError struct {
	Namespace string
	Version   uint64
	// Latest is the namespace's latest version when WaitRollout looked.
	Latest uint64
	// Reason says why, for people.
	Reason string
}

func (e *NoRolloutError) Error() string {
	return fmt.Sprintf("producer: no rollout of %s version %d to wait for: %s", e.Namespace, e.Version, e.Reason)
}

// Is makes errors.Is(err, ErrNoRollout) true.
func (e *NoRolloutError) Is(target error) bool { return target == ErrNoRollout }

// WaitRollout polls the rollout of version (> 0) every interval (0: 1 s)
// until it has ended (Done) or ctx ends, calling progress, if not nil,
// whenever its stage, state or reason changes. A rollout not started yet
// (the strategist starts it within a round of the publish) is waited for;
// a version that has no rollout and never will is answered at once with a
// *NoRolloutError (errors.Is ErrNoRollout): one that went to every zone at
// its publish — a namespace's first version, a rollback, any version of a
// control without rollouts — or whose zones were all at it already (every
// zone's goal is at or past it), none when no zone is registered, and one
// a newer version superseded before its rollout started. When ctx ends
// first the error wraps ctx.Err() and the rollout is as last read.
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
		case errors.Is(err, ErrNotFound) && version > 0 && last == nil:
			// Not started yet, or never will be.
			none, err := c.noRollout(ctx, ns, version)
			if err != nil {
				return nil, err
			}
			if none != nil {
				return nil, none
			}
		case errors.Is(err, ErrNotFound) && version > 0:
			r = last
		case err != nil:
			return last, err
		}
		if r != nil && progress != nil && (last == nil || last.GetStage() != r.GetStage() || last.GetReason() != r.GetReason() || last.GetState() != r.GetState()) {
			progress(r)
		}
		if r != nil {
			last = r
		}
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

// noRollout tells, for a version whose rollout GetRollout did not find,
// whether it never will (a *NoRolloutError) or the strategist has yet to
// start it (nil). It decides as the strategist does (rollout.Start starts
// the head's rollout while some zone's goal is behind it): no rollout will
// start for a version that is not the head, nor for one every zone's goal
// has reached, nor with no zone. Goals move with the rollout record in one
// transaction, so the rollout is read again after the goals: one started
// meanwhile is found.
func (c *Client) noRollout(ctx context.Context, ns string, version uint64) (*NoRolloutError, error) {
	h, err := c.GetNamespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	none := &NoRolloutError{Namespace: ns, Version: version, Latest: h.GetLatestVersion()}
	switch latest := h.GetLatestVersion(); {
	case version > latest:
		return nil, apierror.New(codes.NotFound, apierror.ReasonNotFound, "version", "%s has no version %d (its latest is %d)", ns, version, latest)
	case version < latest:
		none.Reason = fmt.Sprintf("version %d superseded it before its rollout started (the latest intent wins)", latest)
	default:
		zones, err := c.ListZones(ctx)
		if err != nil {
			return nil, err
		}
		if len(zones) == 0 {
			none.Reason = "no zone is registered, so there is nowhere to roll it out to"
			break
		}
		for _, z := range zones {
			g, err := c.GetGoals(ctx, z.GetName(), ns)
			if err != nil {
				return nil, err
			}
			gs := g.GetGoals()
			if len(gs) == 0 || gs[0].GetVersion() < version {
				return nil, nil // behind: the strategist starts its rollout
			}
		}
		none.Reason = fmt.Sprintf("every zone's goal is at version %d already: it went to every zone at once "+
			"(a namespace's first version, a rollback, and any version of a control without rollouts do)", version)
	}
	if _, err := c.GetRollout(ctx, ns, version); err == nil {
		return nil, nil // started meanwhile
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return none, nil
}
