package distributor

import (
	"log/slog"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc"

	"lehr.dev/lehr/internal/storeid"
)

// storePin holds the control store this distributor follows (issue 29):
// the first store id control's answers carry (internal/storeid). An answer
// from a control replica serving another store — one started on an etcd
// of its own, whose store is empty — is refused before anything reads it:
// the call fails as UNAVAILABLE, naming both stores and the fix, so the
// goal watch, the version fetches and the reports retry while the goals
// and versions held are kept and served. Each refusal is logged at ERROR
// and counted in lehr_distributor_control_store_mismatches_total.
//
// The pin lives as long as the process: a distributor that starts while
// the only replica it reaches serves the wrong store follows that one, and
// then refuses the cluster's.
type storePin struct {
	pin        storeid.Pin
	log        *slog.Logger
	mismatches *metrics.Counter
}

// newStorePin returns a pin that logs to log and counts in set.
func newStorePin(log *slog.Logger, set *metrics.Set) *storePin {
	p := &storePin{log: log, mismatches: set.NewCounter("lehr_distributor_control_store_mismatches_total")}
	p.pin.OnMismatch = p.refused
	return p
}

// unary and stream are the interceptors on the connection to control.
func (p *storePin) unary() grpc.DialOption  { return grpc.WithChainUnaryInterceptor(p.pin.Unary) }
func (p *storePin) stream() grpc.DialOption { return grpc.WithChainStreamInterceptor(p.pin.Stream) }

// refused logs and counts a refused answer.
func (p *storePin) refused(e *storeid.MismatchError) {
	p.mismatches.Inc()
	p.log.Error("distributor: refused the answer of a control replica serving another store; keeping the goals held",
		"followed_store", e.Pinned, "replica_store", e.Got, "replica", e.Replica, "method", e.Method, "err", e)
}

// ControlStoreID returns the id of the control store this distributor
// follows: the first one control's answers named ("" before the first
// answer, or with a control too old to name its store).
func (d *Distributor) ControlStoreID() string { return d.pin.pin.ID() }
