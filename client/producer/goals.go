package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// CreateZone registers a zone; its goals start at every namespace's latest
// version.
func (c *Client) CreateZone(ctx context.Context, name string) (*lehrpb.Zone, error) {
	var out *lehrpb.Zone
	err := c.call(ctx, "create zone "+name, func(ctx context.Context) (err error) {
		out, err = c.rpc.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: name})
		return err
	})
	return out, err
}

// ListZones returns every registered zone, sorted by name.
func (c *Client) ListZones(ctx context.Context) ([]*lehrpb.Zone, error) {
	var resp *lehrpb.ListZonesResponse
	err := c.call(ctx, "list zones", func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListZones(ctx, &lehrpb.ListZonesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetZones(), nil
}

// GetGoals returns a zone's goal states and the store revision they were read
// at. A non-empty namespace restricts the answer to that namespace.
func (c *Client) GetGoals(ctx context.Context, zone, namespace string) (*lehrpb.GetGoalsResponse, error) {
	var resp *lehrpb.GetGoalsResponse
	err := c.call(ctx, "get goals of zone "+zone, func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: zone, Namespace: namespace})
		return err
	})
	return resp, err
}

// WatchOption modifies WatchGoals.
type WatchOption func(*watchOptions)

type watchOptions struct {
	start      int64
	createZone bool
}

// FromRevision resumes a watch at store revision rev (the last revision a
// previous watch delivered + 1) instead of starting with the current state.
func FromRevision(rev int64) WatchOption { return func(o *watchOptions) { o.start = rev } }

// WithCreateZone registers the zone if it does not exist yet, as
// distributors do.
func WithCreateZone() WatchOption { return func(o *watchOptions) { o.createZone = true } }

// WatchGoals streams the goal states of zone to fn until ctx is done, fn
// returns an error, or the server fails with a non-retryable error.
//
// Without FromRevision the first messages carry the current state (Initial
// set), the last of them with InitialComplete set; every later message is a
// change. fn is called on the caller's goroutine, one message at a time; a
// slow fn slows the stream, it never loses messages.
//
// After a disconnect or a retryable error, WatchGoals reconnects with
// jittered backoff (Options.Retry, without an attempt limit) and resumes at
// the last delivered revision + 1, so fn sees every change exactly once. A
// disconnect during the initial state restarts it. If the resume revision has
// been compacted away, the watch restarts from the current state: fn then
// receives messages with Initial set again and should replace what it knew.
//
// WatchGoals returns fn's error unchanged, or an error wrapping *Error
// (ErrCanceled or ErrDeadlineExceeded when ctx ends).
func (c *Client) WatchGoals(ctx context.Context, zone string, fn func(*lehrpb.WatchGoalsResponse) error, opts ...WatchOption) error {
	var o watchOptions
	for _, f := range opts {
		f(&o)
	}
	resume := o.start
	failures := 0
	for {
		delivered, err := c.watchOnce(ctx, zone, resume, o.createZone, fn, &resume)
		if delivered {
			failures = 0
		}
		var ferr callbackError
		if errors.As(err, &ferr) {
			return ferr.err
		}
		aerr := apierror.FromError(err)
		if errors.Is(err, io.EOF) {
			aerr = apierror.New(apierror.ErrUnavailable.Code, apierror.ReasonUnavailable, "", "watch stream closed by control")
		}
		if ctx.Err() != nil {
			return fmt.Errorf("producer: watch goals of zone %s: %w", zone, apierror.FromError(ctx.Err()))
		}
		switch {
		case errors.Is(aerr, ErrRevisionGone) && resume != 0:
			c.log.Warn("goal watch revision compacted; restarting from the current state", "zone", zone, "revision", resume)
			resume = 0
			continue
		case !aerr.Retryable():
			return fmt.Errorf("producer: watch goals of zone %s: %w", zone, aerr)
		}
		wait := c.opts.Retry.backoff(failures)
		failures++
		c.log.Warn("goal watch interrupted; reconnecting", "zone", zone, "resume_revision", resume, "wait", wait, "err", aerr)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("producer: watch goals of zone %s: %w", zone, apierror.FromError(ctx.Err()))
		case <-t.C:
		}
	}
}

// callbackError marks an error returned by the WatchGoals callback.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// watchOnce runs one stream from revision start. It advances *resume after
// each change and after a complete initial state, and reports whether it
// delivered anything. It always returns a non-nil error.
func (c *Client) watchOnce(ctx context.Context, zone string, start int64, createZone bool,
	fn func(*lehrpb.WatchGoalsResponse) error, resume *int64) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: zone, StartRevision: start, CreateZone: createZone})
	if err != nil {
		return false, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return delivered, err
		}
		if err := fn(msg); err != nil {
			return true, callbackError{err}
		}
		delivered = true
		if !msg.GetInitial() || msg.GetInitialComplete() {
			*resume = msg.GetRevision() + 1
		}
	}
}
