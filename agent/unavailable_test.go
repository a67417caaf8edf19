package agent_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/internal/nsfile"
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

// A namespace deleted upstream (DeleteNamespace) while a consumer holds
// it: the host keeps the file and the consumer its view at the version it
// had, the agent's status and the consumer learn it is NOT_FOUND and why,
// and once a namespace is published again under the name — its versions
// continuing after the deleted one's — it reaches the consumer like any
// new version.
func TestDeletedUpstream(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/gone"
	h.publish(ns, map[string]string{"k": "v1"})
	v2 := h.publish(ns, map[string]string{"k": "v2"})
	r := h.startAgent(dataDir(t), h.addrs())

	var logs logSink
	c, err := consumer.New(consumer.Options{Socket: r.a.Socket(), LeaseTTL: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx(t), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wait.For(t, "the consumer to get version 2", func() bool { return sub.View().Version() == v2.GetSeq() })
	path, _ := nsfile.Path(r.a.FilesDir(), ns)

	if _, err := h.ctl.Client.DeleteNamespace(ctx(t), &lehrpb.DeleteNamespaceRequest{Name: ns, Force: true}); err != nil {
		t.Fatalf("DeleteNamespace: %v", err)
	}
	var ue *consumer.UnavailableError
	wait.For(t, "the consumer to learn the namespace is gone", func() bool {
		return errors.As(sub.Unavailable(), &ue) && ue.Reason == lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND
	})
	for _, want := range []string{"deleted upstream", "keeps serving version 2", "lehr history " + ns} {
		if !strings.Contains(ue.Error(), want) {
			t.Errorf("Unavailable() = %q; it does not say %q", ue.Error(), want)
		}
	}
	st, err := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.GetNamespaces() {
		if n.GetNamespace() == ns && (n.GetVersion() != v2.GetSeq() || n.GetUnavailable().GetReason() != lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND) {
			t.Errorf("agent status of the deleted namespace: %v; want version 2 held, NOT_FOUND", n)
		}
	}
	if f, err := nsfile.Read(path); err != nil || f.Version != v2.GetSeq() {
		t.Errorf("the file after the deletion: version %d, %v; want version 2 kept", f.Version, err)
	}
	if v, ok := sub.View().Get("k"); sub.View().Version() != v2.GetSeq() || !ok || string(v) != "v2" {
		t.Errorf("the consumer's view after the deletion: version %d, k=%q; want version 2 kept", sub.View().Version(), v)
	}
	wait.For(t, "a warning in the consumer's log", func() bool {
		return strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "reason=NOT_FOUND")
	})

	// Published again: version 3, not 1, which the host and the consumer
	// (holding 2) would take for an old one and ignore.
	v3 := h.publish(ns, map[string]string{"k": "again"})
	if v3.GetSeq() != 3 {
		t.Fatalf("the namespace published again is at version %d, want 3", v3.GetSeq())
	}
	waitFile(t, path, 3, map[string]string{"k": "again"})
	wait.For(t, "the consumer to get the new version", func() bool { return sub.View().Version() == 3 })
	wait.For(t, "the consumer to hear it is served again", func() bool { return sub.Unavailable() == nil })
}
