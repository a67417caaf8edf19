package fanout

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// DefaultRedialRate is the default Options.RedialRate: the agents a
// distributor on two cores, shared with the agents it serves, admits per
// second in a reconnect storm of intact caches (bench/RESULTS.md,
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

// redialSpread is the spread for n connected agents: the time the
// distributor needs to admit them all again at Options.RedialRate.
func (s *Server) redialSpread(n int) time.Duration {
	if s.opts.RedialRate <= 0 || n <= 0 {
		return 0
	}
	d := time.Duration(float64(n) / s.opts.RedialRate * float64(time.Second))
	return min(d.Round(time.Millisecond), wire.MaxRedialSpread)
}

// staleAdvice reports whether an agent told advised should be told spread
// instead: one is more than 1.5 times the other, and they differ by
// minAdviceChange. The hysteresis bounds the frames: an agent count
// growing from 500 (a spread of a second at the default rate) to 10,000
// sends each agent about 8.
func staleAdvice(advised, spread time.Duration) bool {
	lo, hi := min(advised, spread), max(advised, spread)
	return hi-lo >= minAdviceChange && 2*hi > 3*lo
}

// adviseLoop updates the agents' redial spreads as their number changes,
// until the server closes.
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
		spread := s.redialSpread(len(sessions))
		for _, ss := range sessions {
			if ss.redialCap && ss.adviseIfStale(spread) {
				ss.kick() // a push round sends it
			}
		}
	}
}

// adviseIfStale notes that the agent should be told spread, if what it was
// told is stale; it reports whether it is.
func (ss *session) adviseIfStale(spread time.Duration) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !staleAdvice(ss.advised, spread) {
		return false
	}
	ss.advised, ss.advise = spread, true
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
	return &lehrpb.Advice{RedialSpread: durationpb.New(ss.advised)}
}
