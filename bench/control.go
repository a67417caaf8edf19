package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/proto/lehrpb"
)

// controlStartTimeout bounds how long startControl waits for control to serve.
const controlStartTimeout = 60 * time.Second

// benchDomain is the domain every Lehr scenario publishes into.
const benchDomain = "bench"

// benchQuotas are the quotas of the benchmark's domains: none that a
// scenario would meet (it measures the system, not the defaults) unless
// it sets its own, as the isolation scenario does.
func benchQuotas() *lehrpb.Quotas {
	return &lehrpb.Quotas{
		PublishesPerSecond: 1e6, PublishBurst: 1 << 20,
		MaxStoredBytes: 1 << 40, MaxNamespaces: 1 << 20, OutboundBytesPerSecond: 1 << 40, PublishBytesPerSecond: 1 << 40,
	}
}

// benchZone is the zone every Lehr scenario's distributors serve.
const benchZone = "zone-a"

// runningControl is a control plane started by a scenario: embedded etcd in
// its data directory, plaintext gRPC on loopback, no metrics listener.
type runningControl struct {
	c    *control.Control
	addr string
	done chan error

	closeOnce sync.Once
	closeErr  error
}

// startControl starts control in dir/control with fsync on unless
// noFsync, waits until it serves, and creates benchDomain and benchZone;
// mods change its options first.
func startControl(ctx context.Context, dir string, log *slog.Logger, noFsync bool, mods ...func(*control.Options)) (*runningControl, error) {
	opts := control.Options{
		DataDir:       filepath.Join(dir, "control"),
		Listen:        "127.0.0.1:0",
		MetricsListen: "off",
		Logger:        log.With("component", "control"),
		NoSync:        noFsync,
		DevMode:       true, // the bench publishes over plaintext loopback
	}
	for _, m := range mods {
		m(&opts)
	}
	c, err := control.New(opts)
	if err != nil {
		return nil, fmt.Errorf("new control: %w", err)
	}
	rc := &runningControl{c: c, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(context.Background()) }()
	select {
	case <-c.Ready():
	case err := <-rc.done:
		return nil, fmt.Errorf("control stopped before serving: %w", err)
	case <-time.After(controlStartTimeout):
		rc.close()
		return nil, fmt.Errorf("control did not serve within %v", controlStartTimeout)
	case <-ctx.Done():
		rc.close()
		return nil, ctx.Err()
	}
	rc.addr = c.Addr().String()
	p, err := rc.producer(log)
	if err != nil {
		rc.close()
		return nil, err
	}
	defer p.Close()
	if _, err := p.CreateDomain(ctx, &lehrpb.Domain{Name: benchDomain, Description: "benchmark", Quotas: benchQuotas()}); err != nil {
		rc.close()
		return nil, fmt.Errorf("create domain: %w", err)
	}
	if _, err := p.CreateZone(ctx, benchZone); err != nil {
		rc.close()
		return nil, fmt.Errorf("create zone: %w", err)
	}
	return rc, nil
}

// producer returns a new producer client for the control plane.
func (rc *runningControl) producer(log *slog.Logger) (*producer.Client, error) {
	p, err := producer.New(producer.Options{Address: rc.addr, Author: "lehr-bench", Logger: log})
	if err != nil {
		return nil, fmt.Errorf("new producer: %w", err)
	}
	return p, nil
}

// close stops control and waits for Run to return. Idempotent.
func (rc *runningControl) close() error {
	rc.closeOnce.Do(func() {
		rc.c.Close()
		rc.closeErr = <-rc.done
	})
	return rc.closeErr
}
