package fanout_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// The tests of this file each reproduce a defect found in review (issue 8)
// and hold the fanout to what must happen instead.

// An update the agent consumes but never answers does not freeze the
// namespace: after Options.AckTimeout the distributor plans again (a
// snapshot, as it cannot know what the agent holds), and the late answer,
// when it comes, is ignored rather than treated as a protocol violation
// (defect 1).
func TestUnansweredUpdateIsPlannedAgain(t *testing.T) {
	e := newEnv(t, func(o *fanout.Options) { o.AckTimeout = 200 * time.Millisecond })
	ns := "d/app"
	v1 := e.publish(ns, props(10, "v1"))
	var first atomic.Bool
	late := make(chan *lehrpb.Ack, 1)
	a := e.dial("host-1", agenttest.Options{
		Subscriptions: []string{ns},
		Answer: func(u *lehrpb.Update, ack *lehrpb.Ack) *lehrpb.Ack {
			if first.CompareAndSwap(false, true) {
				late <- ack // held back: answered after the deadline
				return nil
			}
			return ack
		},
	})
	waitVersion(t, a, ns, v1)
	wait.For(t, "the distributor to push v1 a second time", func() bool { return len(a.Applied(ns)) >= 2 })
	if got := e.srv.Stats().AckTimeouts; got == 0 {
		t.Errorf("AckTimeouts = 0, want the unanswered update counted")
	}
	// The held-back answer arrives now, long after its deadline.
	if err := a.SendAck(<-late); err != nil {
		t.Fatal(err)
	}
	v2 := e.publish(ns, props(10, "v2"))
	waitVersion(t, a, ns, v2)
	if err := a.Err(); err != nil {
		t.Fatalf("connection ended: %v; a late Ack must not be a protocol violation", err)
	}
}

// A push to an agent that stopped taking update streams does not hang
// forever: the write's progress is bounded by Options.AckTimeout, after
// which the distributor closes the connection so the agent reconnects and
// announces what it holds. Before the bound, the second push waited for
// stream credit that never came, without an Ack deadline, while the
// agent's keepalives kept the connection up — the catalog bench's 15
// namespaces that never converged (issue 27).
func TestStalledPushEndsTheConnection(t *testing.T) {
	e := newEnv(t, func(o *fanout.Options) { o.AckTimeout = 200 * time.Millisecond })
	ns := "d/app"
	e.publish(ns, props(10, "v1"))
	qc := wire.ClientQUICConfig()
	qc.MaxIncomingUniStreams = 1 // the first push takes the only credit
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}, IgnoreStreams: true, QUIC: qc})
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the connection to a stuck agent is still up after 30 s (stats %+v)", e.srv.Stats())
	}
	var ae *quic.ApplicationError
	if err := a.Err(); !errors.As(err, &ae) || ae.ErrorCode != wire.CodeInternalError || !strings.Contains(ae.ErrorMessage, "push an update") {
		t.Errorf("agent's connection ended with %v, want the distributor's close for a push it could not make", err)
	}
	if got := e.srv.Stats().StalledPushes; got != 1 {
		t.Errorf("StalledPushes = %d, want 1", got)
	}
}

// A control frame the distributor cannot send ends the session and closes
// the connection. Before, the push loop alone ended: the read loop went on
// reading the agent's frames, so the session stayed registered — counted
// connected, its namespaces lagging — and pushed nothing again, while the
// agent, hearing its keepalives answered, never failed over (a zombie).
func TestUnsendableControlFrameEndsTheSession(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	v1 := e.publish(ns, props(10, "v1"))
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)
	a.StopReadingControl()
	// A namespace without a goal: the distributor answers Unavailable on
	// the control stream, which the agent no longer reads.
	if err := a.Subscribe("d/nothing"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the distributor to close the connection it cannot send on", func() bool { return e.srv.Stats().Agents == 0 })
	select {
	case <-a.Done(): // the connection ended: the agent reconnects
	case <-time.After(30 * time.Second):
		t.Fatal("the distributor dropped the session but the agent's connection is still up")
	}
}

// An agent that acknowledges a repair snapshot with the checksum it
// already had (as agents before the repair rule did: "stale, I hold that
// version") is not sent the same snapshot again and again: the fanout
// checks the Ack's checksum against what it sent and backs off (defect 2;
// review saw 13,000 pushes in 2 s).
func TestAckWithAnotherChecksumBacksOff(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	v1 := e.publish(ns, props(10, "v1"))
	corrupt := content.Snapshot{}.Checksum()
	a := e.dial("host-1", agenttest.Options{
		Cached:        []agenttest.Cached{{Namespace: ns, Version: 1, Content: v1.Content, Checksum: corrupt}},
		Subscriptions: []string{ns},
		Answer: func(u *lehrpb.Update, ack *lehrpb.Ack) *lehrpb.Ack {
			// The old agent's answer: ok, at the version it holds, with
			// its own checksum.
			return &lehrpb.Ack{Namespace: u.GetNamespace(), Version: u.GetVersion(), Checksum: corrupt, Ok: true}
		},
	})
	wait.For(t, "the first repair snapshot", func() bool { return len(a.Applied(ns)) >= 1 })
	time.Sleep(2 * time.Second) // a window to count pushes in, not a wait for an event
	if n := len(a.Applied(ns)); n > 8 {
		t.Errorf("%d snapshots pushed in 2 s to an agent that keeps acking another checksum; want a backoff (≤ 8)", n)
	}
	if got := e.srv.Stats().Refusals; got == 0 {
		t.Errorf("Refusals = 0; an Ack naming another checksum than the one sent is a refusal")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("connection ended: %v", err)
	}
}

// A Resync for a namespace the agent just unsubscribed from (it raced the
// Unsubscribe) is ignored; it does not close the connection and with it
// every other namespace of the host (defect 6).
func TestResyncOfUnsubscribedNamespaceIsIgnored(t *testing.T) {
	e := newEnv(t)
	v1 := e.publish("d/a", props(3, "a"))
	b1 := e.publish("d/b", props(3, "b"))
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{"d/a"}})
	waitVersion(t, a, "d/a", v1)
	if err := a.Unsubscribe("d/a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Resync("d/a", lehrpb.ResyncReason_RESYNC_REASON_CACHE_CORRUPT); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscribe("d/b"); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, a, "d/b", b1)
	if err := a.Err(); err != nil {
		t.Fatalf("connection ended: %v", err)
	}
}

// A push whose write fails (here: the agent abandons every update stream)
// ends the session and closes the connection, so the agent notices and
// fails over; it does not leave a connection that stays up while nothing
// is pushed on it any more (defect 7).
func TestPushWriteErrorClosesTheConnection(t *testing.T) {
	e := newEnv(t)
	ns := "d/big"
	big, err := content.New([]content.Property{{Key: "blob", Value: []byte(strings.Repeat("x", 8<<20))}})
	if err != nil {
		t.Fatal(err)
	}
	e.publishSnap(ns, big)
	a := e.dial("host-1", agenttest.Options{Subscriptions: []string{ns}, RejectStreams: true})
	select {
	case <-a.Done():
	case <-time.After(wait.Timeout):
		t.Fatal("the connection is still up after its push failed")
	}
}

// Subscription churn does not grow the session without bound: an
// unsubscribed namespace is forgotten, so a long-lived agent that keeps
// subscribing to new namespaces and dropping old ones never reaches the
// per-agent cap, which counts live subscriptions only (defect 8).
func TestSubscriptionChurnIsBounded(t *testing.T) {
	e := newEnv(t, func(o *fanout.Options) { o.MaxNamespacesPerAgent = 4 })
	a := e.dial("host-1", agenttest.Options{})
	for i := range 20 {
		ns := "d/churn-" + string(rune('a'+i))
		v := e.publish(ns, props(2, ns))
		if err := a.Subscribe(ns); err != nil {
			t.Fatal(err)
		}
		waitVersion(t, a, ns, v)
		if err := a.Unsubscribe(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Err(); err != nil {
		t.Fatalf("connection ended: %v", err)
	}
}

// An agent may hold a newer version than the one sent (it got it from
// another distributor of the zone, ahead of this one): it acknowledges
// the update as stale with what it holds, and the fanout records that
// instead of calling it a protocol violation.
func TestStaleAckWithNewerVersionIsRecorded(t *testing.T) {
	e := newEnv(t)
	ns := "d/app"
	e.publish(ns, props(5, "v1"))
	v2 := e.publish(ns, props(5, "v2"))
	var mu sync.Mutex
	a := e.dial("host-1", agenttest.Options{
		Subscriptions: []string{ns},
		Answer: func(u *lehrpb.Update, ack *lehrpb.Ack) *lehrpb.Ack {
			mu.Lock()
			defer mu.Unlock()
			// Claim to hold version 9 already.
			return &lehrpb.Ack{Namespace: ns, UpdateVersion: u.GetVersion(), Version: 9, Checksum: v2.Checksum, Ok: true}
		},
	})
	wait.For(t, "the push of v2", func() bool { return len(a.Applied(ns)) >= 1 })
	wait.For(t, "the agent counted at version 9", func() bool {
		_, counts := e.srv.Convergence()
		for _, c := range counts {
			if c.Namespace == ns && c.Version == 9 {
				return true
			}
		}
		return false
	})
	if err := a.Err(); err != nil {
		t.Fatalf("connection ended: %v", err)
	}
}

// A malformed first frame (a Hello that does not decode, another frame
// type) is a protocol violation counted like any other (issue 8, defect 14).
func TestMalformedHelloIsCounted(t *testing.T) {
	for name, frame := range map[string][]byte{
		"garbage Hello": {byte(wire.FrameHello), 0x03, 0xff, 0xff, 0xff},
		"Ack first":     {byte(wire.FrameAck), 0x00},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), wait.Timeout)
			defer cancel()
			conn, err := quic.DialAddr(ctx, e.srv.Addr().String(), wire.ClientTLSConfig(e.pki.client("raw")), wire.ClientQUICConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseWithError(0, "")
			s, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(frame); err != nil {
				t.Fatal(err)
			}
			select {
			case <-conn.Context().Done():
			case <-ctx.Done():
				t.Fatal("connection with a malformed Hello not closed")
			}
			if code, _, _ := wire.CloseCode(context.Cause(conn.Context())); code != wire.CodeProtocolViolation {
				t.Errorf("closed with %v, want CodeProtocolViolation", context.Cause(conn.Context()))
			}
			wait.For(t, "the violation counted", func() bool { return e.srv.Stats().ProtocolErrors == 1 })
		})
	}
}
