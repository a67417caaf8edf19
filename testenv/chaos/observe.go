package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/internal/content"
)

// Observation is one view a consumer's callback received.
type Observation struct {
	At             time.Time
	Agent, NS      string
	Version        uint64
	Checksum       string
	Op             string // the view's "op" key
	ContentSumOK   bool   // the view's content has the checksum it claims
	ContentSumSeen string
}

// Observer is a consumer (client/consumer, the library services use) on
// every agent, subscribed to every namespace, recording each view its
// callbacks receive.
type Observer struct {
	clients []*consumer.Client

	mu  sync.Mutex
	obs []Observation
}

// Observe subscribes a consumer of each agent to every namespace.
func Observe(ctx context.Context, agents []*Agent, namespaces []string, log *slog.Logger) (*Observer, error) {
	o := &Observer{}
	for _, a := range agents {
		cl, err := consumer.New(consumer.Options{
			Socket: a.Socket(), FilesDir: a.FilesDir(), ClientID: "chaos-observer",
			RetryInterval: 200 * time.Millisecond, Logger: log,
		})
		if err != nil {
			o.Close()
			return nil, err
		}
		o.clients = append(o.clients, cl)
		for _, ns := range namespaces {
			sub, err := cl.Subscribe(ctx, ns)
			if err != nil {
				o.Close()
				return nil, fmt.Errorf("chaos: observer on %s: %w", a.HostID, err)
			}
			host := a.HostID
			sub.OnChange(func(ch consumer.Change) error {
				o.record(host, ch.New)
				return nil
			})
		}
	}
	return o, nil
}

func (o *Observer) record(agent string, v *consumer.View) {
	ob := Observation{At: time.Now(), Agent: agent, NS: v.Namespace(), Version: v.Version(), Checksum: v.Checksum()}
	if op, ok := v.Get("op"); ok {
		ob.Op = string(op)
	}
	var props []content.Property
	for _, k := range v.Keys() {
		val, _ := v.Get(k)
		props = append(props, content.Property{Key: k, ContentType: v.ContentType(k), Value: val})
	}
	if snap, err := content.New(props); err == nil {
		ob.ContentSumSeen = snap.Checksum()
		ob.ContentSumOK = ob.ContentSumSeen == ob.Checksum
	}
	o.mu.Lock()
	o.obs = append(o.obs, ob)
	o.mu.Unlock()
}

// Observations returns what was recorded so far, in order of arrival.
func (o *Observer) Observations() []Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Observation(nil), o.obs...)
}

// Latest returns the newest version each (agent, namespace) has seen.
func (o *Observer) Latest() map[[2]string]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[[2]string]uint64{}
	for _, ob := range o.obs {
		k := [2]string{ob.Agent, ob.NS}
		m[k] = max(m[k], ob.Version)
	}
	return m
}

// Close ends the consumers.
func (o *Observer) Close() error {
	var errs []error
	for _, cl := range o.clients {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}
