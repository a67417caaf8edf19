// Package backoff is exponential backoff with jitter, the retry pacing every
// Lehr client uses: attempt n waits up to Min·2^n, capped at Max. Full
// jitter spreads a crowd of clients retrying together (agents after a
// distributor restart); equal jitter never retries at once (a single client
// retrying a call). Importable by any package; it imports only the standard
// library.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy bounds the waits between attempts.
type Policy struct {
	Min, Max time.Duration
}

// Ceiling returns min(Max, Min·2^attempt), attempt counting from 0.
func (p Policy) Ceiling(attempt int) time.Duration {
	d := p.Min
	for i := 0; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	return max(min(d, p.Max), 0)
}

// Full returns a wait drawn uniformly from [0, Ceiling(attempt)].
func (p Policy) Full(attempt int) time.Duration {
	return rand.N(p.Ceiling(attempt) + 1)
}

// Equal returns a wait drawn uniformly from [Ceiling(attempt)/2,
// Ceiling(attempt)].
func (p Policy) Equal(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	half := c / 2
	return half + rand.N(c-half+1)
}

// Sleep waits for d or until ctx is done, and reports whether the whole
// wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
