package fanout

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultRedialRate is the default Options.RedialRate: the agents a
// distributor on two cores, shared with the agents it serves, admits per
// second in a reconnect storm of intact caches (bench/results/HISTORY.md,
// "Reconnect storm: the redial spread": 10,000 agents spread over 20 s converge in
// 21 s with almost no refused attempts; spread over 10 s, they flood it
// and take 48 s).
const DefaultRedialRate = 500

// Pacing of Advice frames.
const (
	// adviceInterval is how often the distributor compares the spread its
	// agents were told with the one its agent count calls for.
	adviceInterval = time.Second
	// minAdviceChange: a spread that moved less than this is not worth a
	// frame to every agent.
	minAdviceChange = time.Second
)

// DefaultKeepaliveRate is the default Options.KeepaliveRate: up to 1,000
// agents keep their own interval (1 s with the default silence timeout),
// 10,000 are told 10 s, wire.MaxKeepaliveInterval. At 10,000 idle agents
// their keepalives at 1 s took 0.32–0.41 of the distributor's core
// (bench/RESULTS.md, "Keepalives").
const DefaultKeepaliveRate = 1000

// advice is what a distributor tells its agents about reconnecting and
// keeping alive, sized to the agents connected.
type advice struct {
	// spread: Welcome.redial_spread.
	spread time.Duration
	// keepalive: Welcome.keepalive_interval, zero when the agents' own
	// interval is short enough.
	keepalive time.Duration
}

// advice returns the advice for n connected agents.
func (s *Server) advice(n int) advice {
	return advice{spread: s.redialSpread(n), keepalive: s.keepaliveInterval(n)}
}

// redialSpread is the spread for n connected agents: the time the
// distributor needs to admit them all again at Options.RedialRate.
func (s *Server) redialSpread(n int) time.Duration {
	if s.opts.RedialRate <= 0 || n <= 0 {
		return 0
	}
	d := time.Duration(float64(n) / s.opts.RedialRate * float64(time.Second))
	return min(d.Round(time.Millisecond), wire.MaxRedialSpread)
}

// keepaliveInterval is the interval at which n connected agents send
// Options.KeepaliveRate keepalives a second in all, whole seconds up to
// wire.MaxKeepaliveInterval; zero below wire.DefaultKeepAlivePeriod, the
// agents' own.
func (s *Server) keepaliveInterval(n int) time.Duration {
	if s.opts.KeepaliveRate <= 0 || n <= 0 {
		return 0
	}
	d := time.Duration(float64(n) / s.opts.KeepaliveRate * float64(time.Second))
	if d < wire.DefaultKeepAlivePeriod {
		return 0
	}
	return min(d.Round(time.Second), wire.MaxKeepaliveInterval)
}

// stale reports whether an agent told a should be told b instead: either
// value is more than 1.5 times the other, and they differ by
// minAdviceChange. The hysteresis bounds the frames: an agent count
// growing from 500 (a spread of a second at the default rate) to 10,000
// sends each agent about 8.
func (a advice) stale(b advice) bool {
	return staleDuration(a.spread, b.spread) || staleDuration(a.keepalive, b.keepalive)
}

func staleDuration(advised, now time.Duration) bool {
	lo, hi := min(advised, now), max(advised, now)
	return hi-lo >= minAdviceChange && 2*hi > 3*lo
}

// adviseLoop updates the agents' advice as their number changes, until
// the server closes.
func (s *Server) adviseLoop() {
	t := time.NewTicker(adviceInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		sessions := s.sessionList()
		a := s.advice(len(sessions))
		now := s.now()
		for _, ss := range sessions {
			if ss.redialCap && ss.adviseIfStale(a) {
				ss.kick() // a push round sends it
			}
			if silent := ss.unheard(now, a.keepalive); silent > 0 {
				ss.log.Info("forgetting an agent not heard from", "for", silent.Round(time.Millisecond))
				s.met.unheard.Inc()
				ss.conn.CloseWithError(wire.CodeSilent, "distributor heard nothing from the agent for three of its silence timeouts")
			}
		}
	}
}

// unheard returns how long nothing has arrived from the agent, once that
// is three of its silence timeouts — grown to three keepalive intervals
// with the one it was advised, or is advised now, whichever is longer —
// and zero before. A connection its agent has given up as silent is so
// forgotten about when the agent gave it up (which it cannot always say:
// the path may be one-way), instead of on the QUIC idle timeout, 30 s,
// which stays the rule for agents that do not send their silence timeout.
// Only adviseLoop calls it, once a second: arrivals are seen that often.
func (ss *session) unheard(now time.Time, keepalive time.Duration) time.Duration {
	if ss.silence <= 0 {
		return 0
	}
	if n := ss.conn.ConnectionStats().PacketsReceived; n != ss.heardPackets || ss.heardAt.IsZero() {
		ss.heardPackets, ss.heardAt = n, now
		return 0
	}
	ss.mu.Lock()
	keepalive = max(keepalive, ss.advised.keepalive)
	ss.mu.Unlock()
	silent := now.Sub(ss.heardAt)
	if silent < 3*max(ss.silence, 3*keepalive) {
		return 0
	}
	return silent
}

// adviseIfStale notes that the agent should be told a, if what it was told
// is stale; it reports whether it is.
func (ss *session) adviseIfStale(a advice) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.advised.stale(a) {
		return false
	}
	ss.advised, ss.advise = a, true
	return true
}

// takeAdvice returns the Advice to send the agent, if one is due.
func (ss *session) takeAdvice() *lehrpb.Advice {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.advise {
		return nil
	}
	ss.advise = false
	m := &lehrpb.Advice{RedialSpread: durationpb.New(ss.advised.spread)}
	if ss.advised.keepalive > 0 {
		m.KeepaliveInterval = durationpb.New(ss.advised.keepalive)
	}
	return m
}
