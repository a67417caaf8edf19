package agent_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// logSink collects log lines, safe for concurrent writes.
type logSink struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A consumer on a host the domain's readers do not admit no longer waits
// without a word (issue 28, item 8): the distributor's FORBIDDEN reaches
// it through the agent (KeepAlive, within a second while it has no
// content), Subscription.Unavailable names the ACL and what to do, and
// the consumer logs it.
func TestConsumerLearnsWhyItWaits(t *testing.T) {
	h := newHarness(t, 1)
	if _, err := h.ctl.Client.CreateDomain(ctx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "closed",
		Acl: &lehrpb.Acl{Readers: []string{"zone-b"}}}}); err != nil {
		t.Fatal(err)
	}
	const ns = "closed/app"
	h.publish(ns, map[string]string{"k": "v"})
	r := h.startAgent(dataDir(t), h.addrs())

	var logs logSink
	c, err := consumer.New(consumer.Options{Socket: r.a.Socket(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx(t), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wait.For(t, "the subscription to learn it is forbidden", func() bool { return errors.Is(sub.Unavailable(), consumer.ErrForbidden) })
	msg := sub.Unavailable().Error()
	for _, want := range []string{"FORBIDDEN", "acl.readers (zone-b)", "include neither zone " + zone, "lehr domain update closed --readers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Unavailable() = %q; it does not say %q", msg, want)
		}
	}
	var ue *consumer.UnavailableError
	if !errors.As(sub.Unavailable(), &ue) || ue.Namespace != ns || ue.Reason != lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN {
		t.Errorf("Unavailable() = %#v; want an *UnavailableError for %s, FORBIDDEN", sub.Unavailable(), ns)
	}
	wait.For(t, "a warning in the consumer's log", func() bool {
		return strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "reason=FORBIDDEN")
	})
	if v := sub.View(); v.Version() != 0 {
		t.Errorf("a forbidden namespace reached the consumer: version %d", v.Version())
	}
}
