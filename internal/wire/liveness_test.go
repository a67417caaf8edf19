package wire

import (
	"testing"
	"time"
)

// An agent follows the keepalive interval its distributor advises only up
// to MaxKeepaliveInterval, never below its own, and its silence timeout is
// three intervals; every interval is within a third of the idle timeout.
func TestLivenessTimeouts(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name                     string
		silence, idle, advised   time.Duration
		wantKeepalive, wantSilen time.Duration
	}{
		{"own: a third of the silence timeout", 3 * s, 90 * s, 0, s, 3 * s},
		{"advised shorter than its own", 3 * s, 90 * s, 500 * time.Millisecond, s, 3 * s},
		{"advised longer", 3 * s, 90 * s, 4 * s, 4 * s, 12 * s},
		{"advised beyond the maximum", 3 * s, 90 * s, time.Minute, MaxKeepaliveInterval, 3 * MaxKeepaliveInterval},
		{"a short idle timeout of the caller's own configuration", 3 * s, 9 * s, 10 * s, 3 * s, 9 * s},
		{"a long silence timeout of its own", time.Minute, 180 * s, 4 * s, 10 * s, time.Minute},
		{"withdrawn", 3 * s, 90 * s, -s, s, 3 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLiveness(nil, tc.silence, tc.idle, nil)
			l.Advise(7 * s) // replaced below
			l.Advise(tc.advised)
			k, sil := l.Timeouts()
			if k != tc.wantKeepalive || sil != tc.wantSilen {
				t.Errorf("keepalive %v, silence %v; want %v, %v", k, sil, tc.wantKeepalive, tc.wantSilen)
			}
		})
	}
}

// The agent's QUIC configuration leaves keepalives to Liveness and never
// lets QUIC's idle timer end a connection the agent still judges alive.
func TestClientQUICConfigLeavesKeepalivesToTheAgent(t *testing.T) {
	c := ClientQUICConfig()
	if c.KeepAlivePeriod != 0 {
		t.Errorf("KeepAlivePeriod %v, want 0 (the agent's own, Liveness)", c.KeepAlivePeriod)
	}
	if most := 3 * MaxKeepaliveInterval; c.MaxIdleTimeout < most || ServerQUICConfig().MaxIdleTimeout < most {
		t.Errorf("idle timeouts agent %v, distributor %v; want both at least %v, three of the longest advised intervals", c.MaxIdleTimeout, ServerQUICConfig().MaxIdleTimeout, most)
	}
}
