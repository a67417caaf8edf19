// Package gomemlimit gives a daemon's Go runtime a soft memory limit under
// its cgroup's: 90 % of memory.max (systemd's MemoryMax=), so the garbage
// collector works harder as the heap nears the limit instead of letting a
// heap that doubles between collections (GOGC=100) reach it and be killed.
// Without a limit it changes nothing. GOMEMLIMIT in the environment wins;
// AUTOMEMLIMIT=off turns it off and AUTOMEMLIMIT=0.8 changes the ratio
// (github.com/KimMachineGun/automemlimit, which reads cgroup v1 and v2).
//
// Imported by agent/agentcmd, distributor/distributorcmd and cmd/lehr (control).
package gomemlimit

import (
	"log/slog"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Ratio is the share of the cgroup's memory limit given to the Go heap;
// the rest is for goroutine stacks, the runtime and memory Go does not
// manage (etcd's mapped database in control, Badger's tables in the agent).
const Ratio = 0.9

// Apply sets the Go runtime's soft memory limit from the process's cgroup
// and logs what it set, and returns it (math.MaxInt64: none). A failure to
// read the cgroup is logged and leaves the runtime as it was: the daemon
// runs as it would without a limit.
func Apply(log *slog.Logger) int64 {
	limit, err := memlimit.Set(memlimit.WithRatio(Ratio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Warn("go memory limit: cannot read the cgroup's memory limit; the heap is unbounded", "err", err)
	case limit == math.MaxInt64:
		log.Debug("go memory limit: none (the cgroup sets no memory limit)")
	case os.Getenv("GOMEMLIMIT") != "":
		log.Info("go memory limit from GOMEMLIMIT", "bytes", limit)
	default:
		log.Info("go memory limit from the cgroup's", "bytes", limit, "ratio", Ratio)
	}
	return limit
}
