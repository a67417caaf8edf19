// Package lifecycle is how Lehr's daemons — control, the distributor and
// the agent — run their parts: each part (a server, a watch, a loop) is a
// goroutine of one Group, the first part that fails ends the component,
// and the component's Run returns that failure.
//
// It is errgroup with the habits the daemons share: a part gets the
// group's context and returns when it ends; a part that returns because
// that context ended has not failed; a failure is named by component and
// part ("distributor: watch goals: …") and is the context's cause, so
// every other part sees why it is asked to stop.
//
// Imported by control, distributor and agent.
package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// Group runs one component's parts. The zero value is not usable: call
// New.
type Group struct {
	component string
	ctx       context.Context
	g         *errgroup.Group
}

// New returns a Group for component (the prefix of its errors) and the
// context its parts run under: it ends when ctx ends or a part fails.
func New(ctx context.Context, component string) (*Group, context.Context) {
	g, gctx := errgroup.WithContext(ctx)
	return &Group{component: component, ctx: gctx, g: g}, gctx
}

// Go runs part f in its own goroutine with the group's context. An error
// f returns ends the group, unless it is the context's own ending
// (context.Canceled once the context ended): a part asked to stop has not
// failed.
func (g *Group) Go(part string, f func(ctx context.Context) error) {
	g.g.Go(func() error {
		err := f(g.ctx)
		if err == nil || (g.ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			return nil
		}
		return fmt.Errorf("%s: %s: %w", g.component, part, err)
	})
}

// Wait waits for every part to return and returns the first failure, or
// nil when every part returned because the context ended or on its own.
// Call it after stopping whatever the parts serve: a part returns when
// the context ends, and Wait does not end it.
func (g *Group) Wait() error { return g.g.Wait() }
