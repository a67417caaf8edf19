package upstream_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/testenv/wait"
)

// An agent refused by its only distributor backs off exponentially, as it
// does when it cannot connect (issue 28, item 8) — also when the refusal
// ends a session that was established: it redialed every 50–85 ms
// because every Welcome reset its backoff. Each case runs the agent's
// default backoff (100 ms doubling to 10 s) for three seconds against one
// distributor and counts the handshakes it completed: backing off, an
// agent makes about six attempts there; redialing at the minimum, dozens.
// The log says what to do.
func TestRefusedAgentBacksOff(t *testing.T) {
	const window = 3 * time.Second
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	untrusted := signing.NewVerifier(key.Public().(ed25519.PublicKey)) // control's key is not this one
	for _, tc := range []struct {
		name string
		// agents are the agents' options, on top of the test defaults.
		agents []func(*upstream.Options)
		max    uint64 // handshakes in the window
		log    string // what the log says, in some line
	}{
		{"the agent refuses its only distributor's updates", []func(*upstream.Options){
			func(o *upstream.Options) { o.Verifier = untrusted },
		}, 15, "sent an untrusted update"},
		{"two agents with one host id replace each other", []func(*upstream.Options){nil, nil},
			25, "is a second agent running with the same host id"},
		{"the distributor refuses the host's certificate before Welcome", []func(*upstream.Options){
			func(o *upstream.Options) { o.HostID = "host-2" }, // the certificate names host-1
		}, 15, "the distributor does not accept this host's certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			d := startDist(t, p, "d1")
			d.setGoal(t, version("app/cfg", 1, map[string]string{"a": "1"}))
			var logs syncBuffer
			var clients []*client
			for _, mod := range tc.agents {
				cl := newClient(t, p, newMem(), func(o *upstream.Options) {
					o.BackoffMin, o.BackoffMax = upstream.DefaultBackoffMin, upstream.DefaultBackoffMax
					o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
					if mod != nil {
						mod(o)
					}
				}, d.srv.Addr().String())
				cl.c.Subscribe("app/cfg")
				cl.start(t)
				clients = append(clients, cl)
			}
			handshakes := func() uint64 { st := d.srv.Stats(); return st.Handshakes + st.ResumedHandshakes }
			wait.For(t, "a first handshake", func() bool { return handshakes() > 0 })
			start := handshakes()
			time.Sleep(window)
			got := handshakes() - start
			t.Logf("%d handshakes in %v", got, window)
			if got > tc.max {
				t.Errorf("%d handshakes in %v, want at most %d: a refused agent must back off", got, window, tc.max)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("the log never says %q:\n%s", tc.log, excerptLog(logs.String()))
			}
		})
	}
}

// excerptLog is the start of a long log.
func excerptLog(s string) string {
	if len(s) > 4000 {
		return s[:4000] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// Refused tells refusals — one side turned the other away — from every
// other end of a connection.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&quic.ApplicationError{Remote: true, ErrorCode: wire.CodeUnauthorized}, true},
		{&quic.ApplicationError{Remote: true, ErrorCode: wire.CodeReplaced}, true},
		{&wire.GoodbyeError{Code: wire.CodeWrongZone}, true},
		{fmt.Errorf("x: %w", upstream.ErrDistributorIdentity), true},
		{fmt.Errorf("x: %w", upstream.ErrUntrusted), true},
		{&quic.ApplicationError{Remote: true, ErrorCode: wire.CodeShuttingDown}, false},
		{&quic.ApplicationError{Remote: false, ErrorCode: wire.CodeUnauthorized}, false}, // the agent's own close
		{&wire.SilenceError{After: time.Second}, false},
		{&quic.StatelessResetError{}, false},
		{&quic.IdleTimeoutError{}, false},
		{errors.New("dial: connection refused"), false},
		{nil, false},
	} {
		if got := upstream.Refused(tc.err); got != tc.want {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
