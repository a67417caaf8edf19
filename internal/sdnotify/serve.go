package sdnotify

import (
	"context"
	"log/slog"
	"sync"
)

// Daemon is a component with the lifecycle every Lehr daemon has: Run
// blocks until ctx is done (or it fails), Ready is closed once it serves.
type Daemon interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// ServeOptions configures Serve. The zero value is valid.
type ServeOptions struct {
	// Status, if set, is sent as STATUS= with READY=1.
	Status func() string
	// OnReady, if set, is called once the daemon is ready, after READY=1.
	OnReady func()
	// Send delivers a notification; nil means Notify (to $NOTIFY_SOCKET,
	// nothing when it is unset).
	Send func(state string) error
	// Logger receives notification failures; nil means slog.Default().
	Logger *slog.Logger
}

// Serve runs d until ctx is done or d.Run returns, and returns Run's error.
// Once d is ready it sends READY=1 (with the status) and calls OnReady; as
// soon as shutdown begins — ctx done, or Run returning — it sends
// STOPPING=1, before waiting for Run to finish. A daemon that fails before
// it is ready sends nothing.
func Serve(ctx context.Context, d Daemon, opts ServeOptions) error {
	send := opts.Send
	if send == nil {
		send = func(state string) error { _, err := Notify(state); return err }
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	notify := func(state string) {
		if err := send(state); err != nil {
			log.Warn("systemd notification failed", "state", state, "err", err)
		}
	}
	done := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { done <- d.Run(ctx) })
	select {
	case <-d.Ready():
	case err := <-done:
		return err
	}
	state := Ready
	if opts.Status != nil {
		state += "\nSTATUS=" + opts.Status()
	}
	notify(state)
	if opts.OnReady != nil {
		opts.OnReady()
	}
	select {
	case <-ctx.Done():
		notify(Stopping)
		return <-done
	case err := <-done:
		notify(Stopping)
		return err
	}
}
