package wire

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// SilenceError ends a connection on which nothing arrived for the
// silence timeout (Liveness); the agent closes it with CodeSilent.
type SilenceError struct {
	// After is how long nothing had arrived.
	After time.Duration
}

func (e *SilenceError) Error() string {
	return fmt.Sprintf("wire: nothing received from the distributor for %v (silence timeout)", e.After.Round(time.Millisecond))
}

// Liveness keeps an agent's connection alive and notices when it has gone
// silent. Its keepalives are the agent's own (QUIC's are off,
// SetSilenceTimeout), sent with ping — a Ping on the control stream — when
// nothing has arrived for a keepalive interval: a third of the agent's
// silence timeout, or the longer interval its distributor advised
// (Welcome.keepalive_interval, Advice), so that a distributor with many
// agents spends a bounded rate on their keepalives however many there
// are. The silence timeout grows with the interval, to three of them.
//
// The silence is judged by the rules of QUIC's idle timeout (RFC 9000
// §10.1): it starts when a packet arrives and starts again with the first
// packet sent after it (so an idle connection's keepalive starts it), and
// it is at least three probe timeouts, so a path whose round trips have
// grown long is not taken for a dead one (quic-go's own rule). Arrivals
// are seen in the connection's statistics, checked every quarter of the
// keepalive interval.
type Liveness struct {
	conn  *quic.Conn
	ping  func(nonce uint64) error
	floor time.Duration // the agent's own silence timeout
	limit time.Duration // the longest keepalive interval the idle timeout allows

	mu      sync.Mutex
	advised time.Duration
	changed chan struct{} // capacity 1: Run recomputes its timeouts
	pings   int           // keepalives sent
}

// NewLiveness returns the liveness of conn for an agent whose silence
// timeout is silence and whose QUIC configuration had idleTimeout (its
// MaxIdleTimeout: an advised interval is followed only up to a third of
// the smaller of it and the distributor's). ping sends a keepalive, a Ping
// with the given nonce (1, 2, …).
func NewLiveness(conn *quic.Conn, silence, idleTimeout time.Duration, ping func(nonce uint64) error) *Liveness {
	return &Liveness{
		conn:    conn,
		ping:    ping,
		floor:   silence,
		limit:   min(idleTimeout, serverMaxIdleTimeout) / 3,
		changed: make(chan struct{}, 1),
	}
}

// Advise takes the keepalive interval the distributor advised; zero or a
// negative value withdraws it. It is followed up to MaxKeepaliveInterval
// and what the connection's idle timeout allows.
func (l *Liveness) Advise(d time.Duration) {
	d = max(min(d, MaxKeepaliveInterval, l.limit), 0)
	l.mu.Lock()
	same := d == l.advised
	l.advised = d
	l.mu.Unlock()
	if !same {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// Timeouts returns the keepalive interval and the silence timeout in force.
func (l *Liveness) Timeouts() (keepalive, silence time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// At most a third of the idle timeout, as QUIC's own keepalives
	// (quic-go takes half), so the distributor's idle timer never ends a
	// connection whose agent keeps it alive.
	keepalive = min(max(l.floor/3, l.advised), l.limit)
	return keepalive, max(l.floor, 3*keepalive)
}

// Keepalives returns how many keepalives Run has sent.
func (l *Liveness) Keepalives() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pings
}

// Run sends the keepalives and returns a *SilenceError once the connection
// has been silent for the silence timeout, or ping's error wrapped. It
// returns nil when ctx ends.
func (l *Liveness) Run(ctx context.Context) error {
	keepalive, silence := l.Timeouts()
	t := time.NewTicker(keepalive / 4)
	defer t.Stop()
	st := l.conn.ConnectionStats()
	recv, sent := st.PacketsReceived, st.PacketsSent
	heard := time.Now() // when a packet was last seen to have arrived
	since, restarted := heard, false
	checked := heard // the previous check
	pinged := false  // a keepalive was sent since heard
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.changed:
			keepalive, silence = l.Timeouts()
			t.Reset(keepalive / 4)
			continue
		case now := <-t.C:
			st := l.conn.ConnectionStats()
			switch {
			case st.PacketsReceived != recv:
				recv, sent = st.PacketsReceived, st.PacketsSent
				heard, since, restarted, pinged = now, now, false, false
			case !restarted && st.PacketsSent != sent:
				// Sent since the previous check: counted from then, so
				// that checking only every quarter interval does not add
				// to the timeout.
				since, restarted = checked, true
			}
			checked = now
			if now.Sub(since) >= max(silence, 3*probeTimeout(st)) {
				return &SilenceError{After: now.Sub(heard)}
			}
			// Due a quarter interval early at the latest, so the
			// distributor hears from the agent at least every interval
			// however the checks fall.
			if !pinged && now.Sub(heard) >= keepalive-keepalive/4 {
				l.mu.Lock()
				l.pings++
				nonce := uint64(l.pings)
				l.mu.Unlock()
				if err := l.ping(nonce); err != nil {
					return fmt.Errorf("wire: send keepalive: %w", err)
				}
				pinged = true
			}
		}
	}
}
